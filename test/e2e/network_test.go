package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/rawget"
)

// countingConn counts the bytes written to and read from a connection.
type countingConn struct {
	net.Conn
	read, written *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// podNetwork returns the named pod's network stats in s, nil when none.
func podNetwork(s *statsapi.Summary, name string) *statsapi.NetworkStats {
	for _, p := range s.Pods {
		if p.PodRef.Name == name {
			return p.Network
		}
	}
	return nil
}

// TestNetworkStatsThroughKubeconfig: nodekeeper kubeconfig gives client-go
// (kubectl get --raw's path) the read-only port, whose /pods and
// /stats/summary it reads; the Summary has the node's interfaces and the
// pod's, read in the pod sandbox's network namespace: after the test
// talks HTTP with the pod on its IP, the pod's eth0 has received at least
// the bytes the test sent and sent at least those it received (real
// counters of a real namespace; the frames' headers add to them).
func TestNetworkStatsThroughKubeconfig(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("web.yaml", webManifest("web", "hello"))
	pod := a.WaitPod("web-e2e", "running", running)

	stdout, stderr, code := a.cliSplit("kubeconfig")
	if code != 0 {
		t.Fatalf("nodekeeper kubeconfig: exit %d: %s", code, stderr)
	}
	if want := "server: " + a.URL + "\n"; !strings.Contains(stdout, want) {
		t.Errorf("kubeconfig:\n%s\nwant %q", stdout, want)
	}
	file := filepath.Join(a.Dir, "kubeconfig")
	if err := os.WriteFile(file, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	var pods v1.PodList
	if err := json.Unmarshal(rawget.Get(t, file, "/pods"), &pods); err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "web-e2e" {
		t.Errorf("/pods through the kubeconfig: %v, %d pods, want web-e2e", err, len(pods.Items))
	}
	summary := func() *statsapi.Summary {
		t.Helper()
		var s statsapi.Summary
		if err := json.Unmarshal(rawget.Get(t, file, "/stats/summary"), &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}

	// The pod answers on its IP (the bridge may take a moment).
	var read, written atomic.Int64
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, read: &read, written: &written}, nil
	}}}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/"
	a.Eventually("the pod answers on its IP", 30*time.Second, func() (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	before := summary()
	if before.Node.Network == nil || len(before.Node.Network.Interfaces) == 0 {
		t.Errorf("node network: %+v, want the host's interfaces", before.Node.Network)
	}
	net0 := podNetwork(before, "web-e2e")
	if net0 == nil || net0.Name != "eth0" || net0.RxBytes == nil || net0.TxBytes == nil {
		t.Fatalf("pod network before: %+v, want eth0 inline", net0)
	}
	read.Store(0)
	written.Store(0)
	for range 200 {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	sent, received := uint64(written.Load()), uint64(read.Load())
	net1 := podNetwork(summary(), "web-e2e")
	if net1 == nil || net1.RxBytes == nil || net1.TxBytes == nil {
		t.Fatalf("pod network after: %+v", net1)
	}
	t.Logf("sent %d, received %d bytes; pod eth0 rx %d -> %d, tx %d -> %d", sent, received, *net0.RxBytes, *net1.RxBytes, *net0.TxBytes, *net1.TxBytes)
	if *net1.RxBytes-*net0.RxBytes < sent {
		t.Errorf("pod eth0 received %d bytes, want at least the %d the test sent", *net1.RxBytes-*net0.RxBytes, sent)
	}
	if *net1.TxBytes-*net0.TxBytes < received {
		t.Errorf("pod eth0 sent %d bytes, want at least the %d the test received", *net1.TxBytes-*net0.TxBytes, received)
	}
}
