package kubeletserver

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	gwebsocket "github.com/gorilla/websocket"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestResizes: the JSON sizes of the resize channel reach the session in
// order, and the queue ends with the channel.
func TestResizes(t *testing.T) {
	t.Parallel()
	sizes := make(chan remotecommand.TerminalSize)
	go resizes(t.Context().Done(), strings.NewReader(`{"Width":80,"Height":24}{"Width":120,"Height":40}`), sizes)
	q := sizeQueue(sizes)
	var got []remotecommand.TerminalSize
	for s := q.Next(); s != nil; s = q.Next() {
		got = append(got, *s)
	}
	want := []remotecommand.TerminalSize{{Width: 80, Height: 24}, {Width: 120, Height: 40}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	want := metav1.Status{
		Status: metav1.StatusFailure, Reason: "NonZeroExitCode", Message: "command terminated with non-zero exit code: exit status 3",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "ExitCode", Message: "3"}}},
	}
	if diff := cmp.Diff(want, exitStatus(3)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// TestTunnelRefused: when the runtime's streaming server refuses the SPDY
// upgrade, the WebSocket client gets its status and body.
func TestTunnelRefused(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var upgrades []string // the Upgrade and protocol headers the runtime saw
	streaming := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upgrades = append(upgrades, r.Method+" "+r.Header.Get("Upgrade")+" "+strings.Join(r.Header.Values("X-Stream-Protocol-Version"), ","))
		mu.Unlock()
		http.Error(w, "session expired", http.StatusNotFound)
	}))
	t.Cleanup(streaming.Close)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	rt := fakeRuntime{
		sandboxes: func(*runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
			return []*runtimeapi.PodSandbox{{Id: "sb1"}}, nil
		},
		portForward: func(*runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
			return &runtimeapi.PortForwardResponse{Url: streaming.URL + "/portforward/token"}, nil
		},
	}
	certDir := t.TempDir()
	s, err := New(Config{NodeName: "n", Address: "127.0.0.1", CertDir: certDir, NodeIPs: loopback,
		Authentication: kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
	}, Deps{Pods: func() []*v1.Pod { return []*v1.Pod{pod} }, Runtime: rt, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	wsURL := "wss" + strings.TrimPrefix(base, "https") + "/portForward/ns/p"
	for _, tc := range []struct {
		name      string
		protocols []string
		wantCode  int
		wantBody  string
	}{
		{"runtime refuses", []string{"SPDY/3.1+portforward.k8s.io"}, http.StatusNotFound, "session expired\n"},
	} {
		d := gwebsocket.Dialer{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Subprotocols: tc.protocols}
		conn, resp, err := d.DialContext(t.Context(), wsURL, nil)
		if err == nil {
			conn.Close()
			t.Errorf("%s: the WebSocket upgrade succeeded", tc.name)
			continue
		}
		if resp == nil {
			t.Errorf("%s: %v, no response", tc.name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.wantCode || string(body) != tc.wantBody {
			t.Errorf("%s: %d %q, want %d %q", tc.name, resp.StatusCode, body, tc.wantCode, tc.wantBody)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"POST SPDY/3.1 portforward.k8s.io"}, upgrades); diff != "" {
		t.Errorf("upgrades the runtime saw (-want +got)\n%s", diff)
	}
}
