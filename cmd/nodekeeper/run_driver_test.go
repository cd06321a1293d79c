package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// driverRuntime is a CRI runtime whose RuntimeConfig reports driver, or is
// Unimplemented (containerd 1.x) when driver is nil.
type driverRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	driver *runtimeapi.CgroupDriver
}

func (s driverRuntime) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	if s.driver == nil {
		return nil, status.Error(codes.Unimplemented, "unknown method RuntimeConfig")
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: *s.driver}}, nil
}

// serveDriverRuntime serves srv on a unix socket in a temp dir and returns
// its endpoint.
func serveDriverRuntime(t *testing.T, srv driverRuntime) string {
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
	return "unix://" + sock
}

// TestRunRefusesRuntimeCgroupDriver: with a containerRuntimeEndpoint whose
// runtime reports the systemd cgroup driver and cgroupDriver: cgroupfs in
// the file, run exits 2 before it touches anything, with one line naming the
// file, the field, its value and the runtime's driver. A runtime that agrees,
// or cannot say (Unimplemented), passes the check: the run goes on to its
// root directory, which the test made impossible (exit 1 naming it).
func TestRunRefusesRuntimeCgroupDriver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(file, "root") // MkdirAll fails: not a directory
	config := func(name, endpoint string) string {
		return writeConfig(t, dir, name, "failCgroupV1: false\nfailSwapOn: false\ncgroupDriver: cgroupfs\ncontainerRuntimeEndpoint: "+endpoint+"\n")
	}
	systemd, cgroupfs := runtimeapi.CgroupDriver_SYSTEMD, runtimeapi.CgroupDriver_CGROUPFS

	endpoint := serveDriverRuntime(t, driverRuntime{driver: &systemd})
	code, msg := runOnce(t, blocked, "--config", config("driver.yaml", endpoint))
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, msg)
	}
	if strings.Count(strings.TrimSpace(msg), "\n") != 0 {
		t.Errorf("stderr is not one line:\n%s", msg)
	}
	for _, w := range []string{"driver.yaml", `cgroupDriver: "cgroupfs"`, "uses the systemd cgroup driver", endpoint} {
		if !strings.Contains(msg, w) {
			t.Errorf("stderr %q does not name %s", msg, w)
		}
	}
	if strings.Contains(msg, "root directory") {
		t.Errorf("the refused agent went on to its root directory: %q", msg)
	}

	for name, srv := range map[string]driverRuntime{"agrees": {driver: &cgroupfs}, "unimplemented": {}} {
		code, msg := runOnce(t, blocked, "--config", config(name+".yaml", serveDriverRuntime(t, srv)))
		if code != 1 || !strings.Contains(msg, "root directory") {
			t.Errorf("runtime %s: exit %d, stderr %q; want exit 1 on the root directory", name, code, msg)
		}
	}
}
