package volumes

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// TestAPIServerNodeRestriction runs against a real kube-apiserver with the
// node's identity (system:node:node1, Node authorizer and NodeRestriction):
// the node reads the Secret and ConfigMap of a pod bound to it and mints its
// token, including the kube-api-access volume the API server added, and is
// refused those of a pod bound to another node.
func TestAPIServerNodeRestriction(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	s.Namespace(t, "ns")
	ctx := t.Context()
	admin := s.Admin()
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := admin.CoreV1().ServiceAccounts("ns").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{})
	mustCreate(err)
	for _, name := range []string{"mine", "theirs"} {
		_, err = admin.CoreV1().Secrets("ns").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"pass": name + "-pass"}}, metav1.CreateOptions{})
		mustCreate(err)
	}
	_, err = admin.CoreV1().ConfigMaps("ns").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	mustCreate(err)
	newPod := func(name, node, secret string) *v1.Pod {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: v1.PodSpec{
				NodeName: node, ServiceAccountName: "robot",
				Containers: []v1.Container{{Name: "app", Image: "example.com/app:1"}},
				Volumes: []v1.Volume{
					{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: secret}}},
					{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
				},
			},
		}
		got, err := admin.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{})
		mustCreate(err)
		return got
	}
	mine := newPod("p1", "node1", "mine")
	theirs := newPod("p2", "node2", "theirs")

	var access *v1.Volume
	for i := range mine.Spec.Volumes {
		if strings.HasPrefix(mine.Spec.Volumes[i].Name, "kube-api-access-") {
			access = &mine.Spec.Volumes[i]
		}
	}
	if access == nil {
		t.Fatalf("the API server added no kube-api-access volume: %+v", mine.Spec.Volumes)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", s.NodeKubeconfig(t, "node1"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{PodsDir: filepath.Join(t.TempDir(), "pods"), MemoryCapacity: 1 << 30, OnDisk: true},
		Deps{API: kubeclient.PodObjects{Client: clientgo.Wrap(node)}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}

	// The Node authorizer learns of the pod's binding from a watch: retry
	// until it allows, within a deadline.
	deadline := time.Now().Add(30 * time.Second)
	var failed []*SetUpError
	for {
		if failed = m.SetUp(ctx, mine, nil); len(failed) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if len(failed) > 0 {
		t.Fatalf("SetUp of the node's own pod: %v", failed)
	}
	read := func(v *v1.Volume, file string) string {
		t.Helper()
		dir, ready := m.HostPath(mine, v)
		if !ready {
			t.Fatalf("volume %s not ready", v.Name)
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(&mine.Spec.Volumes[0], "pass"); got != "mine-pass" {
		t.Errorf("secret pass = %q", got)
	}
	if got := read(&mine.Spec.Volumes[1], "k"); got != "v" {
		t.Errorf("configMap k = %q", got)
	}
	if got := read(access, "namespace"); got != "ns" {
		t.Errorf("kube-api-access namespace = %q", got)
	}
	if got := read(access, "ca.crt"); got != string(s.CAPEM()) {
		t.Errorf("kube-api-access ca.crt is not the cluster's CA")
	}
	// The token is the robot's, bound to the pod.
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: read(access, "token")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := review.Status; !st.Authenticated || st.User.Username != "system:serviceaccount:ns:robot" || strings.Join(st.User.Extra["authentication.kubernetes.io/pod-name"], "") != "p1" {
		t.Errorf("token review: %+v", st)
	}

	// The environment: the kubernetes Service's variables.
	env, err := m.EnvObjects(ctx, mine, &mine.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if env.ServiceEnv["KUBERNETES_SERVICE_HOST"] != svc.Spec.ClusterIP || env.ServiceEnv["KUBERNETES_SERVICE_PORT"] != "443" {
		t.Errorf("service env %v, want the kubernetes service at %s:443", env.ServiceEnv, svc.Spec.ClusterIP)
	}

	// Another node's pod: its Secret and token are refused.
	failed = m.SetUp(ctx, theirs, nil)
	byVolume := map[string]error{}
	for _, f := range failed {
		byVolume[f.Volume] = f.Err
	}
	if err := byVolume["creds"]; !apierrors.IsForbidden(err) {
		t.Errorf("secret of another node's pod: %v, want Forbidden", err)
	}
	for name, err := range byVolume {
		if strings.HasPrefix(name, "kube-api-access-") && !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("token of another node's pod: %v, want forbidden", err)
		}
	}
	// cfg is allowed: the node's own pod refers to it too.
	if len(byVolume) != 2 {
		t.Errorf("failures for another node's pod: %v, want creds and kube-api-access", byVolume)
	}
	ttl := int64(600)
	_, err = kubeclient.PodObjects{Client: clientgo.Wrap(node)}.CreateToken(ctx, "ns", "robot", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &ttl,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: theirs.Name, UID: theirs.UID},
	}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("token bound to another node's pod: %v, want Forbidden", err)
	}
}
