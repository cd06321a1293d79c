package podruntime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// TestIntegrationRealAPIServer runs a pod made through a real kube-apiserver
// (which adds its kube-api-access volume) on a real containerd, the node
// reading the API as system:node:node1: the container sees the Secret, the
// cluster CA and a token of its service account bound to it, and the
// kubernetes Service's variables.
func TestIntegrationRealAPIServer(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	s.Namespace(t, "ns")
	n := startNode(t)
	ctx := t.Context()
	admin := s.Admin()
	if _, err := admin.CoreV1().Secrets("ns").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"pass": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dirType := v1.HostPathDirectory
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	spec := hostPod("real", "", func(p *v1.Pod) {
		p.Spec.NodeName = "node1"
		p.Spec.Volumes = []v1.Volume{
			{Name: "out", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}},
		}
		p.Spec.Containers[0] = v1.Container{
			Name: "app", Image: appImage, Command: []string{"/tools/probe"},
			Args:         []string{"files", "/out/files", sa + "/token", sa + "/ca.crt", sa + "/namespace"},
			Env:          []v1.EnvVar{{Name: "PASS", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "pass"}}}},
			VolumeMounts: []v1.VolumeMount{{Name: "out", MountPath: "/out"}, {Name: "tools", MountPath: "/tools", ReadOnly: true}},
		}
	})
	spec.ResourceVersion = ""
	pod, err := admin.CoreV1().Pods("ns").Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.NodeKubeconfig(t, "node1"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logger := testLogger(t)
	if n.m, err = New(n.m.cfg, Deps{Runtime: n.ctd.CRI, Logger: logger, Recorder: nodeapi.LogRecorder{Logger: logger}, KubeAPI: kubeclient.PodObjects{Client: clientgo.Wrap(client)}}); err != nil {
		t.Fatal(err)
	}
	n.runUntil(t, pod, "Running", running1)

	report := filepath.Join(emptyDirPath(n.m.cfg.PodsDir, string(pod.UID), "out"), "files")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var b []byte
	for {
		if b, err = os.ReadFile(report); err == nil && len(b) > 0 {
			break
		}
		select {
		case <-rctx.Done():
			t.Fatalf("no report at %s: %v", report, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	svc, err := admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PASS=s3cret\n", "KUBERNETES_SERVICE_HOST=" + svc.Spec.ClusterIP + "\n", "KUBERNETES_SERVICE_PORT=443\n", "file " + sa + "/namespace 644 \"ns\"\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
	// The files as the container read them, checked against the cluster.
	dir := ""
	for i := range pod.Spec.Volumes {
		if strings.HasPrefix(pod.Spec.Volumes[i].Name, "kube-api-access-") {
			dir, _ = n.m.vols.HostPath(pod, &pod.Spec.Volumes[i])
		}
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(ca) != string(s.CAPEM()) {
		t.Error("ca.crt is not the cluster's CA")
	}
	if !strings.Contains(string(b), "token 644 \""+string(token)+"\"") {
		t.Error("the container's token is not the one on the host")
	}
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(token)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := review.Status; !st.Authenticated || st.User.Username != "system:serviceaccount:ns:default" || strings.Join(st.User.Extra["authentication.kubernetes.io/pod-uid"], "") != string(pod.UID) {
		t.Errorf("token review: %+v", st)
	}
	if err := n.m.KillPod(ctx, pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(ctx, n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
}
