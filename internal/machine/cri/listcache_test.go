package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// listServer is a CRI RuntimeService answering the two lists from its
// fields, which tests change between calls.
type listServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu         sync.Mutex // guards the fields below
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	err        error
	filters    []proto.Message // the filter of each call
}

func (s *listServer) ListPodSandbox(_ context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.filters = append(s.filters, r.GetFilter())
	if s.err != nil {
		return nil, s.err
	}
	var out []*runtimeapi.PodSandbox
	for _, sb := range s.sandboxes {
		if f := r.GetFilter(); f == nil || f.GetState() == nil || f.GetState().GetState() == sb.State {
			out = append(out, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (s *listServer) ListContainers(_ context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.filters = append(s.filters, r.GetFilter())
	if s.err != nil {
		return nil, s.err
	}
	return &runtimeapi.ListContainersResponse{Containers: s.containers}, nil
}

func serveLists(t *testing.T, srv runtimeapi.RuntimeServiceServer) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	c, err := New("unix://"+sock, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func sandbox(id string, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, State: state, CreatedAt: 7,
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "pod-" + id, Namespace: "ns", Uid: "uid-" + id},
		Labels:      map[string]string{"io.kubernetes.pod.uid": "uid-" + id, "b": "2", "a": "1"},
		Annotations: map[string]string{"kubernetes.io/config.source": "file"}}
}

func container(id string, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, PodSandboxId: "sb-" + id, State: state, CreatedAt: 9, ImageRef: "sha256:x",
		Metadata: &runtimeapi.ContainerMetadata{Name: "main", Attempt: 1},
		Image:    &runtimeapi.ImageSpec{Image: "testbox"},
		Labels:   map[string]string{"io.kubernetes.pod.uid": "uid-" + id}, Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"}}
}

// An unfiltered list returns what the runtime listed; an item listed again
// unchanged is the object decoded before, a changed one is decoded anew, and
// the cache holds only the latest list's items. A filtered list is not
// cached.
func TestListCache(t *testing.T) {
	t.Parallel()
	srv := &listServer{}
	c := serveLists(t, srv)
	ready, notReady := runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	running, exited := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED

	type step struct {
		name       string
		sandboxes  []*runtimeapi.PodSandbox
		containers []*runtimeapi.Container
		sameSb     []bool // per item: the same object as in the previous list
		sameCtr    []bool
	}
	var prevSb []*runtimeapi.PodSandbox
	var prevCtr []*runtimeapi.Container
	for _, st := range []step{
		{name: "first", sandboxes: []*runtimeapi.PodSandbox{sandbox("a", ready), sandbox("b", ready)},
			containers: []*runtimeapi.Container{container("a", running)}, sameSb: []bool{false, false}, sameCtr: []bool{false}},
		{name: "unchanged, another order", sandboxes: []*runtimeapi.PodSandbox{sandbox("b", ready), sandbox("a", ready)},
			containers: []*runtimeapi.Container{container("a", running)}, sameSb: []bool{true, true}, sameCtr: []bool{true}},
		{name: "b stopped, a container exited, one added", sandboxes: []*runtimeapi.PodSandbox{sandbox("a", ready), sandbox("b", notReady)},
			containers: []*runtimeapi.Container{container("a", exited), container("c", running)}, sameSb: []bool{true, false}, sameCtr: []bool{false, false}},
		{name: "b removed", sandboxes: []*runtimeapi.PodSandbox{sandbox("a", ready)},
			containers: []*runtimeapi.Container{container("c", running)}, sameSb: []bool{true}, sameCtr: []bool{true}},
		{name: "empty", sameSb: []bool{}, sameCtr: []bool{}},
	} {
		srv.mu.Lock()
		srv.sandboxes, srv.containers = st.sandboxes, st.containers
		srv.mu.Unlock()
		sbs, err := c.ListPodSandbox(t.Context(), nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		ctrs, err := c.ListContainers(t.Context(), nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.sandboxes, sbs, protocmp.Transform()); diff != "" {
			t.Errorf("%s: sandboxes (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.containers, ctrs, protocmp.Transform()); diff != "" {
			t.Errorf("%s: containers (-want +got):\n%s", st.name, diff)
		}
		gotSameSb, gotSameCtr := make([]bool, len(sbs)), make([]bool, len(ctrs))
		for i, sb := range sbs {
			for _, p := range prevSb {
				gotSameSb[i] = gotSameSb[i] || p == sb
			}
		}
		for i, ctr := range ctrs {
			for _, p := range prevCtr {
				gotSameCtr[i] = gotSameCtr[i] || p == ctr
			}
		}
		if diff := cmp.Diff(st.sameSb, gotSameSb); diff != "" {
			t.Errorf("%s: sandboxes reused (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.sameCtr, gotSameCtr); diff != "" {
			t.Errorf("%s: containers reused (-want +got):\n%s", st.name, diff)
		}
		if n, m := len(c.lists.sandboxes.items), len(c.lists.containers.items); n != len(sbs) || m != len(ctrs) {
			t.Errorf("%s: the caches hold %d sandboxes and %d containers, want %d and %d", st.name, n, m, len(sbs), len(ctrs))
		}
		prevSb, prevCtr = sbs, ctrs
	}

	// A filtered list is decoded afresh and leaves the cache alone.
	srv.mu.Lock()
	srv.sandboxes = []*runtimeapi.PodSandbox{sandbox("a", ready), sandbox("b", notReady)}
	srv.mu.Unlock()
	all, err := c.ListPodSandbox(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := c.ListPodSandbox(t.Context(), &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: ready}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*runtimeapi.PodSandbox{sandbox("a", ready)}, filtered, protocmp.Transform()); diff != "" {
		t.Errorf("filtered (-want +got):\n%s", diff)
	}
	if filtered[0] == all[0] || len(c.lists.sandboxes.items) != 2 {
		t.Errorf("a filtered list went through the cache (same object %v, %d cached)", filtered[0] == all[0], len(c.lists.sandboxes.items))
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	want := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: ready}}
	if diff := cmp.Diff(proto.Message(want), srv.filters[len(srv.filters)-1], protocmp.Transform()); diff != "" {
		t.Errorf("the filter the runtime got (-want +got):\n%s", diff)
	}
}

// The cached lists classify the runtime's errors as every call does.
func TestListCacheErrors(t *testing.T) {
	t.Parallel()
	srv := &listServer{err: status.Error(codes.Unavailable, "restarting")}
	c := serveLists(t, srv)
	if _, err := c.ListPodSandbox(t.Context(), nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ListPodSandbox: %v, want ErrUnavailable", err)
	}
	if _, err := c.ListContainers(t.Context(), nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ListContainers: %v, want ErrUnavailable", err)
	}
}

// decode skips fields other than the items, as unknown fields, and fails
// cleanly on a malformed reply.
func TestListDecode(t *testing.T) {
	t.Parallel()
	item, err := proto.Marshal(container("a", runtimeapi.ContainerState_CONTAINER_RUNNING))
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = protowire.AppendTag(b, 7, protowire.VarintType) // an unknown field
	b = protowire.AppendVarint(b, 42)
	b = protowire.AppendTag(b, listField, protowire.BytesType)
	b = protowire.AppendBytes(b, item)
	var cache itemCache[runtimeapi.Container, *runtimeapi.Container]
	got, err := cache.decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*runtimeapi.Container{container("a", runtimeapi.ContainerState_CONTAINER_RUNNING)}, got, protocmp.Transform()); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	for _, bad := range [][]byte{b[:len(b)-3], {0x0a, 0x05, 0xff}, {0x0a, 0x02, 0xff, 0xff}} {
		if _, err := cache.decode(bad); err == nil {
			t.Errorf("decode(%x) succeeded", bad)
		}
	}
}

// BenchmarkListContainers lists 100 containers as the relist does
// (unfiltered: cached) and filtered (decoded every time).
func BenchmarkListContainers(b *testing.B) {
	srv := &listServer{}
	for i := range 100 {
		c := container(fmt.Sprintf("c%03d", i), runtimeapi.ContainerState_CONTAINER_RUNNING)
		for j := range 10 {
			c.Labels[fmt.Sprintf("label-%d", j)] = "value"
			c.Annotations[fmt.Sprintf("annotation-%d", j)] = "value"
		}
		srv.containers = append(srv.containers, c)
	}
	sock := filepath.Join(b.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	c, err := New("unix://"+sock, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, bc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
	}{{"cached", nil}, {"filtered", &runtimeapi.ContainerFilter{}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.ListContainers(b.Context(), bc.filter); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A reply larger than gRPC's buffers (which arrives in several) decodes the
// same, and is cached the same.
func TestListCacheLargeReply(t *testing.T) {
	t.Parallel()
	srv := &listServer{}
	for i := range 300 {
		c := container(fmt.Sprintf("c%03d", i), runtimeapi.ContainerState_CONTAINER_RUNNING)
		c.Annotations["big"] = strings.Repeat("x", 1000+i)
		srv.containers = append(srv.containers, c)
	}
	c := serveLists(t, srv)
	first, err := c.ListContainers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(srv.containers, first, protocmp.Transform()); diff != "" {
		t.Errorf("first list (-want +got):\n%s", diff)
	}
	second, err := c.ListContainers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range second {
		if second[i] != first[i] {
			t.Fatalf("container %d decoded again though unchanged", i)
		}
	}
}

// decode is decodeLocked under the cache's lock.
func (c *itemCache[T, PT]) decode(b []byte) ([]*T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decodeLocked(b)
}
