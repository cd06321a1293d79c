// Package plugintest is a device plugin for tests: it serves the v1beta1
// DevicePlugin API on a Unix socket, registers with a kubelet (or
// nodekeeper) socket, and lets a test change its devices, drop its streams
// and script its RPC answers.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Funcs script the plugin's RPCs. A nil field gives the default answer.
// They are called on the gRPC server's goroutines.
type Funcs struct {
	Allocate  func(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	Preferred func(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
	PreStart  func(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error)
}

// Stub is a test device plugin. Create it with New, then Start, Register,
// and Stop. Its methods are safe for concurrent use.
type Stub struct {
	pluginapi.UnimplementedDevicePluginServer
	socket string
	opts   *pluginapi.DevicePluginOptions
	funcs  Funcs

	// watches receives the number of the ListAndWatch stream that just
	// started (1, 2, ...); buffered, values are dropped when full.
	watches chan int

	// mu guards the fields below.
	mu      sync.Mutex
	devs    []*pluginapi.Device
	gen     chan struct{} // closed and replaced on every device change
	drop    chan struct{} // closed and replaced to end the open streams
	streams int
	server  *grpc.Server
}

// New returns a stub that will serve on socket with these devices and options.
func New(socket string, devs []*pluginapi.Device, opts *pluginapi.DevicePluginOptions, funcs Funcs) *Stub {
	if opts == nil {
		opts = &pluginapi.DevicePluginOptions{}
	}
	return &Stub{
		socket:  socket,
		opts:    opts,
		funcs:   funcs,
		devs:    cloneDevs(devs),
		gen:     make(chan struct{}),
		drop:    make(chan struct{}),
		watches: make(chan int, 64),
	}
}

func cloneDevs(devs []*pluginapi.Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out
}

// Socket is the stub's socket path.
func (s *Stub) Socket() string { return s.socket }

// Start listens on the socket (replacing a stale file) and serves in the
// background until Stop.
func (s *Stub) Start() error {
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s)
	s.mu.Lock()
	s.server = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// Stop ends the server and its streams and removes the socket. Idempotent.
func (s *Stub) Stop() {
	s.mu.Lock()
	srv := s.server
	s.server = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(s.socket)
}

// Register registers the stub for resource with the registration server on
// kubeletSocket, naming its socket relative to that socket's directory.
func (s *Stub) Register(ctx context.Context, kubeletSocket, resource string) error {
	return RegisterAs(ctx, kubeletSocket, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     baseName(s.socket),
		ResourceName: resource,
		Options:      s.opts,
	})
}

// RegisterAs sends an arbitrary registration request, for testing rejections.
func RegisterAs(ctx context.Context, kubeletSocket string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("passthrough:///"+kubeletSocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", kubeletSocket)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("register %s: %w", req.GetResourceName(), err)
	}
	return nil
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// SetDevices replaces the device list and pushes it to every open stream.
func (s *Stub) SetDevices(devs []*pluginapi.Device) {
	s.mu.Lock()
	s.devs = cloneDevs(devs)
	close(s.gen)
	s.gen = make(chan struct{})
	s.mu.Unlock()
}

// DropStreams ends every open ListAndWatch stream; the server keeps serving.
func (s *Stub) DropStreams() {
	s.mu.Lock()
	close(s.drop)
	s.drop = make(chan struct{})
	s.mu.Unlock()
}

// Watches delivers the sequence number of each ListAndWatch stream as it
// starts.
func (s *Stub) Watches() <-chan int { return s.watches }

// GetDevicePluginOptions implements the DevicePlugin service.
func (s *Stub) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.opts, nil
}

// ListAndWatch implements the DevicePlugin service: it sends the devices,
// then again after every SetDevices, until DropStreams, Stop or the client
// goes away.
func (s *Stub) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	s.mu.Lock()
	s.streams++
	n := s.streams
	drop := s.drop
	s.mu.Unlock()
	select {
	case s.watches <- n:
	default:
	}
	for {
		s.mu.Lock()
		devs, gen := s.devs, s.gen
		s.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-gen:
		case <-drop:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation implements the DevicePlugin service. By default it
// prefers the must-include devices and then the last available ones, so a
// test can tell its choice from the manager's default (the first ones).
func (s *Stub) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	if s.funcs.Preferred != nil {
		return s.funcs.Preferred(ctx, req)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		ids := append([]string(nil), cr.MustIncludeDeviceIDs...)
		must := map[string]bool{}
		for _, id := range ids {
			must[id] = true
		}
		for i := len(cr.AvailableDeviceIDs) - 1; i >= 0 && len(ids) < int(cr.AllocationSize); i-- {
			if id := cr.AvailableDeviceIDs[i]; !must[id] {
				ids = append(ids, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate implements the DevicePlugin service. By default each device
// becomes a device node /dev/<id>, an environment variable and a mount.
func (s *Stub) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if s.funcs.Allocate != nil {
		return s.funcs.Allocate(ctx, req)
	}
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		for _, id := range cr.DevicesIds {
			r.Envs["DEV_"+id] = id
			r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/" + id, Permissions: "rw"})
		}
		r.Mounts = []*pluginapi.Mount{{ContainerPath: "/usr/local/stub", HostPath: "/opt/stub", ReadOnly: true}}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// PreStartContainer implements the DevicePlugin service.
func (s *Stub) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if s.funcs.PreStart != nil {
		return s.funcs.PreStart(ctx, req)
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}
