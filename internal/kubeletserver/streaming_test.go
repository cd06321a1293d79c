package kubeletserver

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/cri"
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
