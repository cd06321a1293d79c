package kubeclient_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// TestAgainstAPIServer makes every call of the client once against a real
// kube-apiserver, in protobuf as the agent does.
func TestAgainstAPIServer(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	ctx := t.Context()
	cfg := api.AdminConfig()
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = 50, 100
	c, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Nodes: create, get, patch the status.
	_, err = c.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	must("create node", err)
	_, err = c.Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}`),
		metav1.PatchOptions{}, "status")
	must("patch node status", err)
	n, err := c.Nodes().Get(ctx, "n1", metav1.GetOptions{})
	must("get node", err)
	if diff := cmp.Diff([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}, n.Status.Addresses); diff != "" {
		t.Errorf("node addresses (-want +got)\n%s", diff)
	}

	// Pods: watch, create, list by field, update the status, get, delete.
	pods := c.Pods("default")
	w, err := c.Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	must("watch pods", err)
	defer w.Stop()
	_, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "img"}}}}, metav1.CreateOptions{})
	must("create pod", err)
	select {
	case ev := <-w.ResultChan():
		if p, ok := ev.Object.(*corev1.Pod); ev.Type != watch.Added || !ok || p.Name != "p" {
			t.Errorf("watch event %v %T, want the pod added", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Error("no watch event in 30s")
	}
	l, err := c.Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	must("list pods", err)
	if len(l.Items) != 1 {
		t.Errorf("listed %d pods, want 1", len(l.Items))
	}
	p := l.Items[0].DeepCopy()
	p.Status.Phase = corev1.PodRunning
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must("update pod status", err)
	got, err := pods.Get(ctx, "p", metav1.GetOptions{})
	must("get pod", err)
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %q, want Running", got.Status.Phase)
	}
	must("delete pod", pods.Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))

	// Events: create, update, patch.
	ev, err := c.Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1"}, Reason: "R", Message: "m", Count: 1}, metav1.CreateOptions{})
	must("create event", err)
	ev.Count = 2
	_, err = c.Events("default").Update(ctx, ev, metav1.UpdateOptions{})
	must("update event", err)
	ev, err = c.Events("default").Patch(ctx, "e", types.StrategicMergePatchType, []byte(`{"count":3}`), metav1.PatchOptions{})
	must("patch event", err)
	if ev.Count != 3 {
		t.Errorf("event count %d, want 3", ev.Count)
	}

	// ConfigMaps, Secrets, Services, service account tokens: made by the
	// admin, read through the client.
	admin := api.Admin()
	_, err = admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	must("admin: create configmap", err)
	cm, err := c.ConfigMaps("default").Get(ctx, "cm", metav1.GetOptions{})
	must("get configmap", err)
	if cm.Data["k"] != "v" {
		t.Errorf("configmap data %v", cm.Data)
	}
	_, err = admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{})
	must("admin: create secret", err)
	sec, err := c.Secrets("default").Get(ctx, "s", metav1.GetOptions{})
	must("get secret", err)
	if string(sec.Data["k"]) != "v" {
		t.Errorf("secret data %v", sec.Data)
	}
	_, err = admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	must("admin: create service", err)
	_, err = c.Services("default").Get(ctx, "svc", metav1.GetOptions{})
	must("get service", err)
	svcs, err := c.Services("default").List(ctx, metav1.ListOptions{})
	must("list services", err)
	if len(svcs.Items) < 2 { // svc and the API server's kubernetes
		t.Errorf("listed %d services, want at least 2", len(svcs.Items))
	}
	_, err = admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}}, metav1.CreateOptions{})
	must("admin: create service account", err)
	tr, err := c.ServiceAccounts("default").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	must("create token", err)
	if tr.Status.Token == "" {
		t.Fatal("empty token")
	}

	// Leases: create, get, update.
	_, err = c.Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1")}}, metav1.CreateOptions{})
	must("create lease", err)
	lease, err := c.Leases("default").Get(ctx, "l", metav1.GetOptions{})
	must("get lease", err)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](40)
	_, err = c.Leases("default").Update(ctx, lease, metav1.UpdateOptions{})
	must("update lease", err)

	// Reviews: the token just made authenticates; the admin may do anything.
	rev, err := c.TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	must("token review", err)
	if !rev.Status.Authenticated || rev.Status.User.Username != "system:serviceaccount:default:sa" {
		t.Errorf("token review status %+v", rev.Status)
	}
	sar, err := c.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:default:sa", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}}}, metav1.CreateOptions{})
	must("subject access review", err)
	if sar.Status.Allowed {
		t.Error("a service account may delete nodes")
	}
}
