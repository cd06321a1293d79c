package kubeletserver

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// TestAgainstAPIServer serves the kubelet API with the kubelet's default
// authentication and authorization (client CA, TokenReview,
// SubjectAccessReview) against a real kube-apiserver: the API server's own
// kubelet client reads a container's log through `pods/log`, and service
// account tokens get what RBAC gives them.
func TestAgainstAPIServer(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	ctx := t.Context()
	admin := api.Admin()
	const nodeName = "node-1"
	nodeConfig, err := clientcmd.BuildConfigFromFlags("", api.NodeKubeconfig(t, nodeName))
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		t.Fatal(err)
	}

	logFile := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(logFile, []byte(line(t0, "stdout", "F", "hello from the node")), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "app", Image: "app:1"}}},
	}
	local := pod.DeepCopy()
	local.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", ContainerID: "containerd://c1", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
	rt := fakeRuntime{status: func(id string) (*runtimeapi.ContainerStatusResponse, error) {
		return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, LogPath: logFile, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, nil
	}}
	certDir := t.TempDir()
	s, err := New(Config{
		NodeName: nodeName, Address: "127.0.0.1", CertDir: certDir, Hostname: "localhost", NodeIPs: loopback,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:    kubeletv1beta1.KubeletX509Authentication{ClientCAFile: api.ClientCAFile()},
			Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
	}, Deps{Pods: func() []*v1.Pod { return []*v1.Pod{local} }, Runtime: rt, Shared: sharedOK, TokenReviews: nodeClient.AuthenticationV1().TokenReviews(),
		SubjectAccessReviews: nodeClient.AuthorizationV1().SubjectAccessReviews(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	port := basePort(t, base)

	// The Node, with the server as its kubelet endpoint, and the pod bound to it.
	if _, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("API server reads logs through the node", func(t *testing.T) {
		b, err := admin.CoreV1().Pods("default").GetLogs("web", &v1.PodLogOptions{Container: "app"}).Do(ctx).Raw()
		if err != nil {
			t.Fatalf("pods/log through the API server: %v", err)
		}
		if got, want := string(b), "hello from the node\n"; got != want {
			t.Errorf("log = %q, want %q", got, want)
		}
	})

	// Service account tokens: one without rights, one that may read stats.
	token := func(name string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	nobody, reader := token("nobody"), token("stats-reader")
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "node-stats-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/stats"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "node-stats-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "node-stats-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "stats-reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubeletCert, kubeletKey := api.KubeletClientCert()
	apiClient := httpsClientFor(t, &rest.Config{Host: base, TLSClientConfig: rest.TLSClientConfig{
		CAFile: filepath.Join(certDir, selfSignedCert), CertFile: kubeletCert, KeyFile: kubeletKey,
	}})
	other := newTestCA(t, "not-the-cluster-ca")
	otherClient := httpsClient(t, certDir, ptr.To(other.issue(t, "kube-apiserver-kubelet-client")))
	plain := httpsClient(t, certDir, nil)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	for _, tc := range []struct {
		name     string
		c        func(path string) (int, string)
		path     string
		wantCode int
		wantBody string
	}{
		{"kubelet client cert, logs", func(p string) (int, string) { return get(t, apiClient, base+p) }, "/containerLogs/default/web/app", 200, "hello from the node\n"},
		{"kubelet client cert, stats", func(p string) (int, string) { return get(t, apiClient, base+p) }, "/stats/summary", 200, "shared /stats/summary"},
		{"cert of another CA", func(p string) (int, string) { return get(t, otherClient, base+p) }, "/stats/summary", 401, "Unauthorized"},
		{"no credentials", func(p string) (int, string) { return get(t, plain, base+p) }, "/stats/summary", 401, "Unauthorized"},
		{"bad token", func(p string) (int, string) { return get(t, plain, base+p, bearer("not-a-token")...) }, "/stats/summary", 401, "Unauthorized"},
		{"token without rights", func(p string) (int, string) { return get(t, plain, base+p, bearer(nobody)...) }, "/stats/summary", 403,
			"Forbidden (user=system:serviceaccount:default:nobody, verb=get, resource=nodes, subresource(s)=[stats])\n"},
		{"token without rights, logs", func(p string) (int, string) { return get(t, plain, base+p, bearer(nobody)...) }, "/containerLogs/default/web/app", 403,
			"Forbidden (user=system:serviceaccount:default:nobody, verb=get, resource=nodes, subresource(s)=[proxy])\n"},
		{"stats reader, stats", func(p string) (int, string) { return get(t, plain, base+p, bearer(reader)...) }, "/stats/summary", 200, "shared /stats/summary"},
		{"stats reader, logs", func(p string) (int, string) { return get(t, plain, base+p, bearer(reader)...) }, "/containerLogs/default/web/app", 403,
			"Forbidden (user=system:serviceaccount:default:stats-reader, verb=get, resource=nodes, subresource(s)=[proxy])\n"},
		{"stats reader, pods", func(p string) (int, string) { return get(t, plain, base+p, bearer(reader)...) }, "/pods", 403,
			"Forbidden (user=system:serviceaccount:default:stats-reader, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"},
	} {
		if code, body := tc.c(tc.path); code != tc.wantCode || body != tc.wantBody {
			t.Errorf("%s: GET %s = %d %q, want %d %q", tc.name, tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
}

// basePort is the port of a base URL.
func basePort(t *testing.T, base string) int {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestThroughAPIServer runs exec and port-forward the way kubectl does:
// through a real kube-apiserver, which reaches this server (on a real
// containerd) with its kubelet client certificate.
func TestThroughAPIServer(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	ctx := t.Context()
	admin := api.Admin()
	nodeConfig, err := clientcmd.BuildConfigFromFlags("", api.NodeKubeconfig(t, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(cfg *Config, deps *Deps) {
		cfg.Authentication.X509.ClientCAFile = api.ClientCAFile()
		cfg.Authentication.Webhook.Enabled = ptr.To(true)
		cfg.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
		deps.TokenReviews, deps.SubjectAccessReviews = nodeClient.AuthenticationV1().TokenReviews(), nodeClient.AuthorizationV1().SubjectAccessReviews()
		deps.Authorizer = nil
	})
	if _, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(basePort(t, n.base))
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.PodSpec{NodeName: "node-1", Containers: []v1.Container{{Name: "app", Image: helperRef}}}}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	execURL := admin.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("web").SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: "app", Command: []string{"/helper", "say", "via api", "err", "4"}, Stdout: true, Stderr: true},
			scheme.ParameterCodec).URL()
	for _, proto := range []struct {
		name string
		ex   func() (remotecommand.Executor, error)
	}{
		{"spdy", func() (remotecommand.Executor, error) {
			return remotecommand.NewSPDYExecutor(api.AdminConfig(), "POST", execURL)
		}},
		{"websocket", func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(api.AdminConfig(), "GET", execURL.String())
		}},
	} {
		t.Run("exec/"+proto.name, func(t *testing.T) {
			ex, err := proto.ex()
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
			if got := exitCode(err); got != 4 || out.String() != "via api" || errOut.String() != "err" {
				t.Errorf("exec through the API server = exit %d (%v), %q, %q; want 4, %q, %q", got, err, out.String(), errOut.String(), "via api", "err")
			}
		})
	}

	t.Run("portForward", func(t *testing.T) {
		u := admin.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("web").SubResource("portforward").URL()
		tr, up, err := spdy.RoundTripperFor(api.AdminConfig())
		if err != nil {
			t.Fatal(err)
		}
		stop, ready := make(chan struct{}), make(chan struct{})
		var out, errOut bytes.Buffer
		fw, err := portforward.NewOnAddresses(spdy.NewDialer(up, &http.Client{Transport: tr}, "POST", u), []string{"127.0.0.1"},
			[]string{"0:" + strconv.Itoa(n.port)}, stop, ready, &out, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- fw.ForwardPorts() }()
		defer func() {
			close(stop)
			<-done
		}()
		select {
		case <-ready:
		case err := <-done:
			done <- err
			t.Fatalf("port-forward ended: %v (%s)", err, errOut.String())
		case <-time.After(20 * time.Second):
			t.Fatal("port-forward not ready in 20s")
		}
		ports, err := fw.GetPorts()
		if err != nil || len(ports) != 1 {
			t.Fatalf("ports = %v, %v", ports, err)
		}
		conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(conn, "via api\n"); err != nil {
			t.Fatal(err)
		}
		if l, err := bufio.NewReader(conn).ReadString('\n'); err != nil || l != "via api\n" {
			t.Fatalf("echo = %q, %v", l, err)
		}
	})
}
