package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// listeningTCPPorts returns the TCP ports (IPv4 and IPv6) the process pid
// listens on: the LISTEN sockets of /proc/net/tcp{,6} whose inode is one of
// its file descriptors.
func listeningTCPPorts(t *testing.T, pid int) []int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(sc.Text())
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports = append(ports, int(p))
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(ports)
	return ports
}

// TestDefaultOpensNoPort: with the default configuration (no readOnlyPort;
// the harness turns the healthz port off) the agent listens on no TCP port at
// all, and `nodekeeper get` and `apply` work through its socket.
func TestDefaultOpensNoPort(t *testing.T) {
	a := StartAgent(t, Options{NoReadOnlyPort: true})
	if ports := listeningTCPPorts(t, a.PID()); len(ports) != 0 {
		t.Errorf("the agent listens on TCP ports %v, want none", ports)
	}
	a.apply("job.yaml", bestEffortManifest("job"))
	a.WaitPod("job", "running", running)
	if code, out := a.cli("get", "pods", "--root-dir", a.Root); code != 0 || !strings.Contains(out, "job") {
		t.Errorf("get pods through the socket: exit %d, %q", code, out)
	}
	if code, out := a.cli("get", "node", "--socket", a.Socket()); code != 0 || !strings.Contains(out, "Ready") {
		t.Errorf("get node through the socket: exit %d, %q", code, out)
	}
}

// TestReadOnlyPortServesReadsAlone: with readOnlyPort set, the port serves
// the kubelet's read-only endpoints and nothing more: no pod changes, no
// /configz, no profiles (enableProfilingHandler is on by default), and no
// request for another host (DNS rebinding); the socket serves them all.
func TestReadOnlyPortServesReadsAlone(t *testing.T) {
	a := StartAgent(t, Options{})
	port := a.URL[strings.LastIndex(a.URL, ":")+1:]
	if ports := listeningTCPPorts(t, a.PID()); len(ports) != 1 || strconv.Itoa(ports[0]) != port {
		t.Errorf("the agent listens on TCP ports %v, want only the read-only port %s", ports, port)
	}
	do := func(c *http.Client, method, url, host string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(bestEffortManifest("root")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/yaml")
		if host != "" {
			req.Host = host
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, host string
		port, socket       int
	}{
		{"GET", "/pods", "", 200, 200},
		{"GET", "/stats/summary", "", 200, 200},
		{"GET", "/metrics", "", 200, 200},
		{"GET", "/healthz", "", 200, 200},
		{"GET", "/configz", "", 404, 200},
		{"GET", "/debug/pprof/", "", 404, 200},
		{"GET", "/debug/pprof/cmdline", "", 404, 200},
		{"DELETE", "/pods/default/nosuchpod", "", 404, 404},
		{"GET", "/pods", "attacker.example", 421, 200},
		{"POST", "/pods", "", 405, 201},
	} {
		if code, body := do(http.DefaultClient, tc.method, a.URL+tc.path, tc.host); code != tc.port {
			t.Errorf("read-only port: %s %s (Host %q): %d %.200q, want %d", tc.method, tc.path, tc.host, code, body, tc.port)
		}
		if code, body := do(a.Client(), tc.method, "http://localhost"+tc.path, tc.host); code != tc.socket {
			t.Errorf("socket: %s %s (Host %q): %d %.200q, want %d", tc.method, tc.path, tc.host, code, body, tc.socket)
		}
	}
	// The one pod the socket created; the read-only port created none.
	if pods := a.localPods(); len(pods) != 1 {
		t.Errorf("%d local pods, want the one created through the socket", len(pods))
	}
	a.cli("delete", "pod", "root", "--grace-period", "1", "--root-dir", a.Root)
}
