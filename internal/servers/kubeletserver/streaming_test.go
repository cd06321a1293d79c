package kubeletserver

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

func TestParseStreamOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query   string
		want    streamOptions
		wantErr bool
	}{
		{query: "output=1", want: streamOptions{stdout: true}},
		{query: "input=1&output=1&error=1", want: streamOptions{stdin: true, stdout: true, stderr: true}},
		{query: "input=true&output=true", want: streamOptions{stdin: true, stdout: true}},
		{query: "output=1&error=1&tty=1", want: streamOptions{stdout: true, tty: true}}, // tty merges stderr
		{query: "input=0&output=0", wantErr: true},
		{query: "stdout=1&stderr=1", wantErr: true}, // the PodExecOptions names are not the kubelet's
		{query: "", wantErr: true},
	}
	for _, tc := range tests {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseStreamOptions(q)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseStreamOptions(%q) err = %v, want error %v", tc.query, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(streamOptions{})); !tc.wantErr && diff != "" {
			t.Errorf("parseStreamOptions(%q) (-want +got)\n%s", tc.query, diff)
		}
	}
}

func TestRunningContainer(t *testing.T) {
	t.Parallel()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: v1.PodStatus{
		InitContainerStatuses: []v1.ContainerStatus{{Name: "init", ContainerID: "containerd://i1", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}}},
		ContainerStatuses: []v1.ContainerStatus{
			{Name: "app", ContainerID: "containerd://a1", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
			{Name: "starting", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
		},
		EphemeralContainerStatuses: []v1.ContainerStatus{{Name: "debug", ContainerID: "containerd://d1", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
	}}
	for name, want := range map[string]string{"app": "a1", "debug": "d1", "init": "", "starting": "", "nope": ""} {
		if got := runningContainer(pod, name); got != want {
			t.Errorf("runningContainer(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestSharedPathsAreReadOnly routes only reads to the shared handler: a pod
// change (POST /pods) is never taken on this port.
func TestSharedPathsAreReadOnly(t *testing.T) {
	t.Parallel()
	certDir := t.TempDir()
	s, err := New(Config{NodeName: "n", Address: "127.0.0.1", CertDir: certDir, NodeIPs: loopback,
		Authentication: kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
	}, Deps{Pods: noPods, Runtime: fakeRuntime{}, Shared: sharedOK})
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	c := httpsClient(t, certDir, nil)
	for _, p := range []string{"/pods", "/stats/summary", "/metrics", "/metrics/resource", "/metrics/cadvisor", "/healthz", "/healthz/syncloop", "/configz"} {
		if code, body := get(t, c, base+p); code != 200 || body != "shared "+p {
			t.Errorf("GET %s = %d %q, want the shared handler's", p, code, body)
		}
	}
	for _, m := range []string{"POST", "DELETE"} {
		req, _ := http.NewRequestWithContext(t.Context(), m, base+"/pods", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /pods = %d, want 405", m, resp.StatusCode)
		}
	}
}

func TestStreamStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("cri Exec: %w", cri.ErrNotFound), 404},
		{status.Error(codes.NotFound, "no such container"), 404},
		{status.Error(codes.ResourceExhausted, "maximum number of in-flight requests exceeded"), 429},
		{status.Error(codes.Internal, "boom"), 500},
		{errors.New("plain"), 500},
	}
	for _, tc := range tests {
		if got := streamStatus(tc.err); got != tc.want {
			t.Errorf("streamStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestDebuggingHandlersOff: with enableDebuggingHandlers false, logs, exec,
// attach and port-forward are not served; the shared reads still are.
func TestDebuggingHandlersOff(t *testing.T) {
	t.Parallel()
	certDir := t.TempDir()
	s, err := New(Config{NodeName: "n", Address: "127.0.0.1", CertDir: certDir, NodeIPs: loopback, DisableDebuggingHandlers: true,
		Authentication: kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
	}, Deps{Pods: noPods, Runtime: fakeRuntime{}, Shared: sharedOK})
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	c := httpsClient(t, certDir, nil)
	for _, p := range []string{"/containerLogs/ns/p/c", "/exec/ns/p/c?command=ls&output=1", "/attach/ns/p/c?output=1", "/portForward/ns/p"} {
		// The mux's own 404, not the handlers' "pod not found".
		if code, body := get(t, c, base+p); code != http.StatusNotFound || body != "404 page not found\n" {
			t.Errorf("GET %s = %d %q, want the mux's 404 with the debugging handlers off", p, code, body)
		}
	}
	if code, _ := get(t, c, base+"/pods"); code != 200 {
		t.Errorf("GET /pods = %d, want 200", code)
	}
}

// TestProxyUpgrade: the proxy to the runtime's streaming server. An upgrade
// the runtime accepts carries bytes both ways; the runtime's error reaches
// the client; a request for no upgrade, or a runtime answering one with
// neither a switch nor an error, is refused with 500, as by the kubelet.
func TestProxyUpgrade(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string // what the runtime was asked
	streaming := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Upgrade"))
		mu.Unlock()
		switch r.URL.Path {
		case "/portforward/gone":
			http.Error(w, "session expired", http.StatusNotFound)
		case "/portforward/plain":
			fmt.Fprint(w, "no upgrade here")
		case "/portforward/echo":
			conn, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			fmt.Fprint(rw, "echo "+line)
			rw.Flush()
		}
	}))
	t.Cleanup(streaming.Close)
	var path atomic.Value
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	rt := fakeRuntime{
		sandboxes: func(*runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
			return []*runtimeapi.PodSandbox{{Id: "sb1"}}, nil
		},
		portForward: func(*runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
			return &runtimeapi.PortForwardResponse{Url: streaming.URL + path.Load().(string)}, nil
		},
	}
	s, err := New(Config{NodeName: "n", Address: "127.0.0.1", CertDir: t.TempDir(), NodeIPs: loopback,
		Authentication: kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
	}, Deps{Pods: func() []*v1.Pod { return []*v1.Pod{pod} }, Runtime: rt, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(runServer(t, s))

	// request sends a POST to the pod's portForward, asking for an upgrade
	// when upgrade is set, and returns the response and the connection.
	request := func(t *testing.T, upgrade bool) (*http.Response, *bufio.ReadWriter, net.Conn) {
		t.Helper()
		conn, err := tls.Dial("tcp", base.Host, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		headers := "Content-Length: 0\r\n"
		if upgrade {
			headers = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
		}
		fmt.Fprintf(conn, "POST /portForward/ns/p HTTP/1.1\r\nHost: %s\r\n%s\r\n", base.Host, headers)
		rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
		resp, err := http.ReadResponse(rw.Reader, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, rw, conn
	}
	body := func(resp *http.Response) string {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.TrimSpace(string(b))
	}

	for _, tc := range []struct {
		name     string
		path     string
		upgrade  bool
		wantCode int
		wantBody string
		wantSeen []string
	}{
		{"no upgrade asked", "/portforward/echo", false, http.StatusInternalServerError, "Upgrade request required", nil},
		{"runtime refuses", "/portforward/gone", true, http.StatusNotFound, "session expired", []string{"POST /portforward/gone SPDY/3.1"}},
		{"runtime does not switch", "/portforward/plain", true, http.StatusInternalServerError, "invalid upgrade response: status code 200",
			[]string{"POST /portforward/plain SPDY/3.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			path.Store(tc.path)
			resp, _, _ := request(t, tc.upgrade)
			if got := body(resp); resp.StatusCode != tc.wantCode || !strings.Contains(got, tc.wantBody) {
				t.Errorf("%d %q, want %d and %q", resp.StatusCode, got, tc.wantCode, tc.wantBody)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tc.wantSeen, seen); diff != "" {
				t.Errorf("requests the runtime saw (-want +got)\n%s", diff)
			}
		})
	}

	t.Run("runtime switches", func(t *testing.T) {
		path.Store("/portforward/echo")
		resp, rw, _ := request(t, true)
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "SPDY/3.1" {
			t.Fatalf("%s, Upgrade %q; want 101 to SPDY/3.1", resp.Status, resp.Header.Get("Upgrade"))
		}
		fmt.Fprint(rw, "ping\n")
		rw.Flush()
		if got, err := rw.ReadString('\n'); got != "echo ping\n" {
			t.Errorf("through the upgraded connection: %q, %v; want %q", got, err, "echo ping\n")
		}
		// The runtime closed its end: so does the proxy.
		if n, err := rw.Read(make([]byte, 1)); err == nil {
			t.Errorf("read %d more bytes after the runtime closed", n)
		}
	})
}
