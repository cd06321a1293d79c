package apiservertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// clientFor returns a clientset for the kubeconfig file at path.
func clientFor(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pod returns a pod bound to node that runs as the default service account.
func pod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none:1"}},
		},
	}
}

// TestServer proves the harness gives a cluster where a node identity has a
// kubelet's rights and no more, the admin has all, and Stop/Restart keeps
// the data.
func TestServer(t *testing.T) {
	s := Start(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	admin := s.Admin()
	nodeA := clientFor(t, s.NodeKubeconfig(t, "node-a"))

	// It reports the version it is built from.
	v, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"v1.36.3", "1", "36"}, []string{v.GitVersion, v.Major, v.Minor}); diff != "" {
		t.Errorf("server version (-want +got):\n%s", diff)
	}

	// A watch sees a change to a resource nothing changed since the start
	// (informers depend on it; with Debian's etcd 3.4 the watch cache's
	// resource version stays behind and the watch ends "Too large resource
	// version").
	w, err := admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watched := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "watched"}, Spec: v1.PodSpec{
		AutomountServiceAccountToken: new(false), Containers: []v1.Container{{Name: "c", Image: "example.com/none"}}}}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, watched, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if p, ok := ev.Object.(*v1.Pod); ev.Type != watch.Added || !ok || p.Name != "watched" {
			t.Errorf("watch event %s %+v, want ADDED watched", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Error("no watch event")
	}
	w.Stop()
	if err := admin.CoreV1().Pods("default").Delete(ctx, "watched", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}

	// The namespace "default" is prepared as the controllers would.
	if _, err := admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("default service account: %v", err)
	}
	cm, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kube-root-ca.crt: %v", err)
	}
	if diff := cmp.Diff(string(s.CAPEM()), cm.Data["ca.crt"]); diff != "" {
		t.Errorf("kube-root-ca.crt ca.crt (-want +got):\n%s", diff)
	}
	caFile, err := os.ReadFile(s.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(s.CAPEM()), string(caFile)); diff != "" {
		t.Errorf("CAFile (-want +got):\n%s", diff)
	}

	// A node may create its own Node object, not another's.
	if _, err := nodeA.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-a creates its Node: %v", err)
	}
	_, err = nodeA.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a creates node-b's Node: got %v, want Forbidden", err)
	}

	// Its Lease in kube-node-lease too, at once.
	if _, err := nodeA.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), LeaseDurationSeconds: ptr.To[int32](40)},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("node-a creates its Lease: %v", err)
	}

	// It may update its Node's status.
	n, err := nodeA.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node-a reads its Node: %v", err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test"}}
	if _, err := nodeA.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Errorf("node-a updates its Node's status: %v", err)
	}

	// It may create a mirror pod bound to itself and owned by its Node, not
	// a plain pod.
	mirror := pod("static-node-a", "node-a")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	mirror.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID, Controller: ptr.To(true),
	}}
	if _, err := nodeA.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Errorf("node-a creates a mirror pod: %v", err)
	}
	_, err = nodeA.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, pod("plain", "node-a"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a creates a plain pod: got %v, want Forbidden", err)
	}

	// The admin may do anything: make a namespace (prepared by Namespace)
	// and pods bound to either node.
	s.Namespace(t, "team")
	s.Namespace(t, "team") // idempotent
	mine, err := admin.CoreV1().Pods("team").Create(ctx, pod("mine", "node-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin creates a pod: %v", err)
	}
	if _, err := admin.CoreV1().Pods("team").Create(ctx, pod("theirs", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin creates a pod: %v", err)
	}
	if got := mine.Spec.ServiceAccountName; got != "default" {
		t.Errorf("pod service account %q, want default", got)
	}

	// A node may read the pods bound to it, and list them by node name.
	if _, err := nodeA.CoreV1().Pods("team").Get(ctx, "mine", metav1.GetOptions{}); err != nil {
		t.Errorf("node-a reads its pod: %v", err)
	}
	list, err := nodeA.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
	if err != nil {
		t.Fatalf("node-a lists its pods: %v", err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if diff := cmp.Diff([]string{"kube-system/static-node-a", "team/mine"}, names); diff != "" {
		t.Errorf("node-a's pods (-want +got):\n%s", diff)
	}

	// A node may mint a token for its pod's service account, bound to the pod,
	// for the audience of the pod's projected token volume (the API server's
	// own, none named, for the injected kube-api-access volume); not for an
	// audience no volume of the pod names, nor for a pod bound elsewhere.
	bound := func(p *corev1.Pod) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}
	tr, err := nodeA.CoreV1().ServiceAccounts("team").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound(mine)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node-a requests a token for its pod: %v", err)
	}
	_, err = nodeA.CoreV1().ServiceAccounts("team").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}, BoundObjectRef: bound(mine)},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a requests a token for an audience its pod does not name: got %v, want Forbidden", err)
	}
	if tr.Status.Token == "" {
		t.Error("empty token")
	}
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := review.Status.User.Username, "system:serviceaccount:team:default"; !review.Status.Authenticated || got != want {
		t.Errorf("token review: authenticated %v as %q, want %q (%s)", review.Status.Authenticated, got, want, review.Status.Error)
	}
	theirs, err := admin.CoreV1().Pods("team").Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = nodeA.CoreV1().ServiceAccounts("team").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound(theirs)},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a requests a token for node-b's pod: got %v, want Forbidden", err)
	}

	// The API server's kubelet client may use the kubelet API (logs, exec),
	// and its certificate verifies against ClientCAFile.
	sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               KubeletClientUser,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "nodes", Subresource: "proxy", Name: "node-a"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !sar.Status.Allowed {
		t.Errorf("%s may not create nodes/proxy: %s", KubeletClientUser, sar.Status.Reason)
	}
	certFile, keyFile := s.KubeletClientCert()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := os.ReadFile(s.ClientCAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(clientCA)
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client certificate against ClientCAFile: %v", err)
	}
	if got := pair.Leaf.Subject.CommonName; got != KubeletClientUser {
		t.Errorf("kubelet client certificate CN %q, want %q", got, KubeletClientUser)
	}

	// Stop takes the API server away; Restart brings it back on the same
	// URL with the data.
	url := s.URL()
	s.Stop(t)
	if _, err := nodeA.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
		t.Error("node-a reads its Node while the API server is stopped")
	}
	s.Restart(t)
	if s.URL() != url {
		t.Errorf("URL after Restart %s, want %s", s.URL(), url)
	}
	if _, err := nodeA.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("node-a reads its Node after Restart: %v", err)
	}
	if _, err := admin.CoreV1().Pods("team").Get(ctx, "mine", metav1.GetOptions{}); err != nil {
		t.Errorf("admin reads the pod after Restart: %v", err)
	}
}
