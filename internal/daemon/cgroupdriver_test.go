package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

var _ runtimeConfigurer = (*cri.Client)(nil)

// configServer is a CRI RuntimeService whose RuntimeConfig answers its
// n-th call (from 1) with answer(n); the other calls are Unimplemented.
type configServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	calls  atomic.Int32
	answer func(n int) (*runtimeapi.RuntimeConfigResponse, error)
}

func (s *configServer) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return s.answer(int(s.calls.Add(1)))
}

// serveConfig serves srv on a unix socket in a temp dir and returns a CRI
// client of it and the endpoint.
func serveConfig(t *testing.T, srv *configServer) (*cri.Client, string) {
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
	c, err := cri.New("unix://"+sock, cri.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, "unix://" + sock
}

func linuxDriver(d runtimeapi.CgroupDriver) func(int) (*runtimeapi.RuntimeConfigResponse, error) {
	return func(int) (*runtimeapi.RuntimeConfigResponse, error) {
		return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}, nil
	}
}

// TestCgroupDriver: the start-time decision against a CRI server answering
// each case, as the kubelet 1.36 decides: the runtime's driver is taken when
// cgroupDriver is unset; a set one that differs is a ConfigError (exit 2)
// naming the file, the field, its value and the runtime's driver; a runtime
// without RuntimeConfig (containerd 1.x) or without a Linux answer leaves
// ours with one log line; a runtime still starting is asked again, at most
// three times; an unknown driver is an error of the runtime's.
func TestCgroupDriver(t *testing.T) {
	t.Parallel()
	unimplemented := func(int) (*runtimeapi.RuntimeConfigResponse, error) {
		return nil, status.Error(codes.Unimplemented, "unknown method RuntimeConfig for service runtime.v1.RuntimeService")
	}
	unavailable := func(int) (*runtimeapi.RuntimeConfigResponse, error) {
		return nil, status.Error(codes.Unavailable, "starting")
	}
	for _, tc := range []struct {
		name      string
		data      string // the configuration file's fields
		answer    func(n int) (*runtimeapi.RuntimeConfigResponse, error)
		want      string   // the driver used
		wantCalls int      // RuntimeConfig calls made
		wantLog   []string // the one log line names these
		wantErr   []string // nil: no error
		config    bool     // the error is a ConfigError (exit 2)
		class     error    // the error wraps this, when not nil
	}{
		{name: "unset takes systemd", answer: linuxDriver(runtimeapi.CgroupDriver_SYSTEMD),
			want: "systemd", wantCalls: 1, wantLog: []string{"received from the container runtime", "cgroupDriver=systemd"}},
		{name: "set cgroupfs agrees", data: "cgroupDriver: cgroupfs\n", answer: linuxDriver(runtimeapi.CgroupDriver_CGROUPFS),
			want: "cgroupfs", wantCalls: 1, wantLog: []string{"received from the container runtime", "cgroupDriver=cgroupfs"}},
		{name: "set cgroupfs, runtime systemd", data: "cgroupDriver: cgroupfs\n", answer: linuxDriver(runtimeapi.CgroupDriver_SYSTEMD),
			wantCalls: 1, wantErr: []string{"c.yaml", `cgroupDriver: "cgroupfs"`, "uses the systemd cgroup driver"}, config: true, class: config.ErrInvalid},
		{name: "unimplemented keeps ours", data: "cgroupDriver: cgroupfs\n", answer: unimplemented,
			want: "cgroupfs", wantCalls: 1, wantLog: []string{"cannot report its cgroup driver", "cgroupDriver=cgroupfs"}},
		{name: "no Linux answer keeps ours", answer: func(int) (*runtimeapi.RuntimeConfigResponse, error) {
			return &runtimeapi.RuntimeConfigResponse{}, nil
		}, want: "cgroupfs", wantCalls: 1, wantLog: []string{"no Linux configuration", "cgroupDriver=cgroupfs"}},
		{name: "starting runtime asked again", answer: func(n int) (*runtimeapi.RuntimeConfigResponse, error) {
			if n < 3 {
				return unavailable(n)
			}
			return linuxDriver(runtimeapi.CgroupDriver_SYSTEMD)(n)
		}, want: "systemd", wantCalls: 3, wantLog: []string{"received from the container runtime"}},
		{name: "unavailable after three tries", answer: unavailable,
			wantCalls: 3, wantErr: []string{"cgroup driver of the container runtime", "starting"}, class: cri.ErrUnavailable},
		{name: "unknown driver", answer: linuxDriver(runtimeapi.CgroupDriver(7)),
			wantCalls: 1, wantErr: []string{"unknown cgroup driver 7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse("c.yaml", []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+tc.data))
			if err != nil {
				t.Fatal(err)
			}
			srv := &configServer{answer: tc.answer}
			rt, endpoint := serveConfig(t, srv)
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			got, err := cgroupDriver(t.Context(), rt, time.Millisecond, "c.yaml", endpoint, c.Agent, log)
			if n := int(srv.calls.Load()); n != tc.wantCalls {
				t.Errorf("RuntimeConfig called %d times, want %d", n, tc.wantCalls)
			}
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("cgroupDriver = %q, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				if isConfig := errors.As(err, new(ConfigError)); isConfig != tc.config {
					t.Errorf("error %v: ConfigError %v, want %v", err, isConfig, tc.config)
				}
				if tc.class != nil && !errors.Is(err, tc.class) {
					t.Errorf("error %v does not wrap %v", err, tc.class)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("cgroupDriver = %q, %v; want %q", got, err, tc.want)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("logged %d lines, want 1:\n%s", len(lines), logs.String())
			}
			for _, w := range append(tc.wantLog, endpoint) {
				if !strings.Contains(lines[0], w) {
					t.Errorf("log line %q does not name %s", lines[0], w)
				}
			}
		})
	}
}

// TestCgroupDriverStopsWithCtx: a start cancelled while the runtime is
// still starting returns ctx's error at once, not after the tries.
func TestCgroupDriverStopsWithCtx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	srv := &configServer{answer: func(int) (*runtimeapi.RuntimeConfigResponse, error) {
		cancel()
		return nil, status.Error(codes.Unavailable, "starting")
	}}
	rt, endpoint := serveConfig(t, srv)
	_, err := cgroupDriver(ctx, rt, time.Hour, "c.yaml", endpoint, config.Default().Agent, slog.New(slog.DiscardHandler))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Errorf("RuntimeConfig called %d times after the cancel, want 1", n)
	}
}
