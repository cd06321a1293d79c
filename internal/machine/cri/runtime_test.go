package cri

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeServer is a CRI RuntimeService answering Status, PodSandboxStatus and
// UpdateContainerResources from its fields.
type runtimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	sandboxes map[string]*runtimeapi.PodSandboxStatus
	updated   chan *runtimeapi.UpdateContainerResourcesRequest
	linux     *runtimeapi.LinuxRuntimeConfiguration // RuntimeConfig's answer; nil: Unimplemented
}

func (s *runtimeServer) RuntimeConfig(ctx context.Context, r *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	if s.linux == nil {
		return s.UnimplementedRuntimeServiceServer.RuntimeConfig(ctx, r)
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: s.linux}, nil
}

func (s *runtimeServer) Status(_ context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: r.Verbose},
	}}}, nil
}

func (s *runtimeServer) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	st, ok := s.sandboxes[r.PodSandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", r.PodSandboxId)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st}, nil
}

func (s *runtimeServer) UpdateContainerResources(_ context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	s.updated <- r
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func TestRuntimeCalls(t *testing.T) {
	t.Parallel()
	sb := &runtimeapi.PodSandboxStatus{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0.5"}}
	srv := &runtimeServer{sandboxes: map[string]*runtimeapi.PodSandboxStatus{"sb1": sb}, updated: make(chan *runtimeapi.UpdateContainerResourcesRequest, 1)}
	c := serveRuntime(t, srv)
	ctx := t.Context()

	st, err := c.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(st.GetStatus().GetConditions()); got != 2 || !st.Status.Conditions[1].Status {
		t.Errorf("Status conditions = %v, want 2 with NetworkReady true (verbose passed)", st.GetStatus().GetConditions())
	}

	got, err := c.PodSandboxStatus(ctx, "sb1", false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sb, got.GetStatus(), protocmp.Transform()); diff != "" {
		t.Errorf("PodSandboxStatus (-want +got):\n%s", diff)
	}
	if _, err := c.PodSandboxStatus(ctx, "nope", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("PodSandboxStatus(absent) error = %v, want ErrNotFound", err)
	}

	res := &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}
	if err := c.UpdateContainerResources(ctx, "c1", res); err != nil {
		t.Fatal(err)
	}
	req := <-srv.updated
	if req.ContainerId != "c1" || req.GetLinux().GetCpuShares() != 512 {
		t.Errorf("UpdateContainerResources sent %v", req)
	}
}

// TestRuntimeConfig: the runtime's cgroup driver comes back as it answered,
// and a runtime without the call (containerd 1.x) gives ErrUnimplemented.
func TestRuntimeConfig(t *testing.T) {
	t.Parallel()
	linux := &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	got, err := serveRuntime(t, &runtimeServer{linux: linux}).RuntimeConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(linux, got.GetLinux(), protocmp.Transform()); diff != "" {
		t.Errorf("RuntimeConfig Linux (-want +got):\n%s", diff)
	}
	if _, err := serveRuntime(t, &runtimeServer{}).RuntimeConfig(t.Context()); !errors.Is(err, ErrUnimplemented) {
		t.Errorf("RuntimeConfig of a runtime without it: error = %v, want ErrUnimplemented", err)
	}
}
