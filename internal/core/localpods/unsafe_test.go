package localpods

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHandlerRefusesUnsafePods: a pod the API server would refuse for what
// it could reach on the node (a hostPath of type Bogus, with '..', or
// relative; a negative runAsUser) gets 400 over the root-only socket,
// naming the file, the field path and the value; the store and the agent
// get no pod (issue 26, item 12).
func TestHandlerRefusesUnsafePods(t *testing.T) {
	t.Parallel()
	ag := &fakeAgent{}
	s, _ := started(t, filepath.Join(t.TempDir(), FileName), ag, nil)
	sock := serveUnix(t, UnixConfig{}, s.Handler())
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: root}\nspec:\n  containers: [{name: c, image: i, %s}]\n  volumes: [{name: h, hostPath: {%s}}]\n"
	for _, tc := range []struct{ name, ctr, hostPath, msg string }{
		{"hostPath type Bogus", "volumeMounts: [{name: h, mountPath: /h}]", "path: /, type: Bogus",
			`bad.yaml: document 1: pod "root": spec.volumes[0].hostPath.type: "Bogus": want "", DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice or BlockDevice`},
		{"hostPath with ..", "volumeMounts: [{name: h, mountPath: /h}]", "path: /tmp/../etc",
			`bad.yaml: document 1: pod "root": spec.volumes[0].hostPath.path: "/tmp/../etc": must not contain '..'`},
		{"relative hostPath", "volumeMounts: [{name: h, mountPath: /h}]", "path: etc",
			`bad.yaml: document 1: pod "root": spec.volumes[0].hostPath.path: "etc": must be an absolute path`},
		{"negative runAsUser", "securityContext: {runAsUser: -1}", "path: /tmp",
			`bad.yaml: document 1: pod "root": spec.containers[0].securityContext.runAsUser: -1: must be between 0 and 2147483647, inclusive`},
	} {
		body := fmt.Sprintf(pod, tc.ctr, tc.hostPath)
		got := do(t, unixClient(sock), "POST", "http://local/pods?filename=bad.yaml", "application/yaml", body)
		want := reply{code: 400, reason: metav1.StatusReasonBadRequest, msg: tc.msg}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(reply{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	if n := len(s.Pods()); n != 0 {
		t.Errorf("the store holds %d pods, want none", n)
	}
	ag.mu.Lock()
	defer ag.mu.Unlock()
	for _, set := range ag.sets {
		if len(set) > 0 {
			t.Errorf("the agent got %d pods, want none", len(set))
		}
	}
}
