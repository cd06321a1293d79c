package podsource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/qos"
)

func parseOne(t *testing.T, file, data, node string) *v1.Pod {
	t.Helper()
	pods, errs := ParseManifest(file, []byte(data), node)
	if len(errs) > 0 || len(pods) != 1 {
		t.Fatalf("ParseManifest(%s) = %d pods, errors %v; want one pod", file, len(pods), errs)
	}
	return pods[0]
}

func TestMakeStatic(t *testing.T) {
	t.Parallel()
	const file = "/etc/kubernetes/manifests/web.yaml"
	in := strings.Replace(okPod, "metadata:\n", "metadata:\n  annotations:\n    team: a\n", 1) +
		"  tolerations:\n  - operator: Exists\n    effect: NoExecute\n    tolerationSeconds: 5\n  - key: k\n    operator: Exists\n"
	got := parseOne(t, file, in, "Worker-1.Example")

	uid := got.UID
	if len(uid) != 32 {
		t.Errorf("UID %q: want 32 hex digits", uid)
	}
	want := &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-worker-1.example", Namespace: "default", UID: uid,
			Annotations: map[string]string{"team": "a", ConfigHashAnnotation: string(uid), qos.ConfigSourceAnnotation: "file"},
		},
		Spec:   defaultedSpec([]v1.Container{defaultedContainer(v1.Container{Name: "c", Image: "busybox:1.36"})}, nil),
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	want.Spec.NodeName = "Worker-1.Example"
	want.Spec.Tolerations = []v1.Toleration{
		{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}, // replaces the manifest's, without tolerationSeconds
		{Key: "k", Operator: v1.TolerationOpExists},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("static pod (-want +got):\n%s", d)
	}
	if !qos.IsStatic(got) || !qos.IsCritical(got) {
		t.Errorf("IsStatic = %v, IsCritical = %v; want both true", qos.IsStatic(got), qos.IsCritical(got))
	}
}

func TestStaticUID(t *testing.T) {
	t.Parallel()
	const file = "/m/web.yaml"
	base := parseOne(t, file, okPod, "node").UID
	// Pinned: the UID of a pod must not change between versions of the agent,
	// or a restarted agent would not find the pods it runs.
	if want := types.UID("1fbe04a58b1fc1eb9a8db6ac81c17007"); base != want {
		t.Errorf("UID = %q, want %q", base, want)
	}
	for _, tc := range []struct {
		name, file, data, node string
		same                   bool
	}{
		{name: "same input", file: file, data: okPod, node: "node", same: true},
		{name: "same pod spelled differently", file: file, data: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"image":"busybox:1.36","name":"c"}]}}`, node: "node", same: true},
		{name: "untyped list item", file: file, data: `{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"web"},"spec":{"containers":[{"image":"busybox:1.36","name":"c"}]}}]}`, node: "node", same: true},
		{name: "defaults written out", file: file, data: okPod + "    imagePullPolicy: IfNotPresent\n", node: "node", same: true},
		{name: "other node", file: file, data: okPod, node: "node2"},
		{name: "other file", file: "/m/web2.yaml", data: okPod, node: "node"},
		{name: "other content", file: file, data: strings.Replace(okPod, "busybox:1.36", "busybox:1.37", 1), node: "node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseOne(t, tc.file, tc.data, tc.node).UID
			if (got == base) != tc.same {
				t.Errorf("UID %q, base %q: same = %v, want %v", got, base, got == base, tc.same)
			}
		})
	}
	given := parseOne(t, file, strings.Replace(okPod, "name: web", "name: web\n  uid: given-uid", 1), "node")
	if given.UID != "given-uid" || given.Annotations[ConfigHashAnnotation] != "given-uid" {
		t.Errorf("a UID in the manifest: UID %q, hash %q; want both given-uid", given.UID, given.Annotations[ConfigHashAnnotation])
	}
}
