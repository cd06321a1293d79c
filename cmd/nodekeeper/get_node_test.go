package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

// get node reads /node from our own server and prints status, conditions
// and resources.
func TestGetNodeFromServer(t *testing.T) {
	t.Parallel()
	since := metav1.NewTime(time.Now().Add(-90 * time.Minute))
	node := &v1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{
			Capacity:    v1.ResourceList{v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourceCPU: resource.MustParse("2")},
			Allocatable: v1.ResourceList{v1.ResourceMemory: resource.MustParse("3996Mi"), v1.ResourceCPU: resource.MustParse("2"), v1.ResourcePods: resource.MustParse("110")},
			Conditions: []v1.NodeCondition{
				{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue, Reason: "KubeletHasInsufficientMemory", Message: "kubelet has insufficient memory available", LastTransitionTime: since},
				{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
			},
		},
	}
	deps := server.Deps{Node: func(context.Context) (*v1.Node, error) { return node, nil }}
	base := serve(t, deps)
	root, sock := serveSocket(t, deps)
	code, out, errOut := runCLI(t, "get", "node", "--server", base)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"--root-dir", root}, {"--socket", sock}} {
		c, o, e := runCLI(t, append([]string{"get", "node"}, args...)...)
		if c != 0 || o != out {
			t.Errorf("get node %v: exit %d, stdout %q, stderr %q; want what --server printed", args, c, o, e)
		}
	}
	want := `NAME   STATUS
n1     Ready

CONDITION        STATUS   REASON                         SINCE       MESSAGE
MemoryPressure   True     KubeletHasInsufficientMemory   90m         kubelet has insufficient memory available
Ready            True     KubeletReady                   <unknown>   kubelet is posting ready status

RESOURCE   CAPACITY   ALLOCATABLE
cpu        2          2
memory     4Gi        3996Mi
pods       <none>     110
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}

	failing := serve(t, server.Deps{Node: func(context.Context) (*v1.Node, error) { return nil, errors.New("no capacity") }})
	if code, _, errOut := runCLI(t, "get", "node", "--server", failing); code == 0 || errOut == "" {
		t.Errorf("a failing /node: exit %d, stderr %q; want a failure", code, errOut)
	}
}

// serve runs our server with deps until the test ends and returns its URL.
func serve(t *testing.T, deps server.Deps) string {
	t.Helper()
	srv, err := server.New(server.Config{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-srv.Ready()
	return "http://" + srv.Addr()
}

// serveSocket serves our server's Handler with deps on a unix socket,
// ROOT/nodekeeper.sock in a new root directory, as the agent does, until the
// test ends, and returns the root directory and the socket.
func serveSocket(t *testing.T, deps server.Deps) (root, sock string) {
	t.Helper()
	srv, err := server.New(server.Config{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: a unix socket's path must fit in 108 bytes.
	root, err = os.MkdirTemp("", "nk-cli-")
	if err != nil {
		t.Fatal(err)
	}
	sock = filepath.Join(root, localpods.SocketName)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- localpods.ServeUnix(ctx, localpods.UnixConfig{Path: sock}, srv.Handler(), ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		os.RemoveAll(root)
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	return root, sock
}
