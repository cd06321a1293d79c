package cri

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// statsServer is a CRI RuntimeService answering the stats calls: container
// "c1" exists, sandbox stats are not implemented (as in containerd 1.6).
type statsServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	filters chan *runtimeapi.ContainerStatsFilter
}

var c1 = &runtimeapi.ContainerStats{
	Attributes:    &runtimeapi.ContainerAttributes{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
	Cpu:           &runtimeapi.CpuUsage{Timestamp: 5, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 7}},
	Memory:        &runtimeapi.MemoryUsage{Timestamp: 5, WorkingSetBytes: &runtimeapi.UInt64Value{Value: 4096}},
	WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{Value: 8192}},
}

func (s *statsServer) ContainerStats(_ context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if r.ContainerId != "c1" {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	return &runtimeapi.ContainerStatsResponse{Stats: c1}, nil
}

func (s *statsServer) ListContainerStats(_ context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	s.filters <- r.Filter
	return &runtimeapi.ListContainerStatsResponse{Stats: []*runtimeapi.ContainerStats{c1}}, nil
}

func serveRuntime(t *testing.T, srv runtimeapi.RuntimeServiceServer) *Client {
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

func TestStatsCalls(t *testing.T) {
	t.Parallel()
	srv := &statsServer{filters: make(chan *runtimeapi.ContainerStatsFilter, 1)}
	c := serveRuntime(t, srv)
	ctx := t.Context()

	filter := &runtimeapi.ContainerStatsFilter{PodSandboxId: "s1"}
	got, err := c.ListContainerStats(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*runtimeapi.ContainerStats{c1}, got, protocmp.Transform()); diff != "" {
		t.Errorf("ListContainerStats (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(filter, <-srv.filters, protocmp.Transform()); diff != "" {
		t.Errorf("filter sent (-want +got):\n%s", diff)
	}

	one, err := c.ContainerStats(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c1, one, protocmp.Transform()); diff != "" {
		t.Errorf("ContainerStats (-want +got):\n%s", diff)
	}
	if _, err := c.ContainerStats(ctx, "c2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ContainerStats of a missing container: %v, want ErrNotFound", err)
	}
	if _, err := c.PodSandboxStats(ctx, "s1"); !errors.Is(err, ErrUnimplemented) {
		t.Errorf("PodSandboxStats: %v, want ErrUnimplemented", err)
	}
	if _, err := c.ListPodSandboxStats(ctx, nil); !errors.Is(err, ErrUnimplemented) {
		t.Errorf("ListPodSandboxStats: %v, want ErrUnimplemented", err)
	}
}
