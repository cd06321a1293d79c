package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// rpcClient is the part of a plugin's API that allocation uses.
// pluginapi.DevicePluginClient satisfies it.
type rpcClient interface {
	GetPreferredAllocation(ctx context.Context, in *pluginapi.PreferredAllocationRequest, opts ...grpc.CallOption) (*pluginapi.PreferredAllocationResponse, error)
	Allocate(ctx context.Context, in *pluginapi.AllocateRequest, opts ...grpc.CallOption) (*pluginapi.AllocateResponse, error)
	PreStartContainer(ctx context.Context, in *pluginapi.PreStartContainerRequest, opts ...grpc.CallOption) (*pluginapi.PreStartContainerResponse, error)
}

// endpoint is one registration of a plugin. Its fields are set before it is
// published under Manager.mu and never change.
type endpoint struct {
	resource string
	socket   string
	client   rpcClient
	opts     *pluginapi.DevicePluginOptions
	// cancel stops the endpoint's goroutine; safe to call more than once.
	cancel context.CancelFunc
}

// dialPlugin connects to a plugin's socket; maxRecv bounds each message the
// plugin sends.
func dialPlugin(socket string, maxRecv int) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv)),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}))
	if err != nil {
		return nil, fmt.Errorf("dial device plugin %s: %w", socket, err)
	}
	return conn, nil
}

// runEndpoint connects to a registering plugin, answers its registration,
// then follows its ListAndWatch stream until the stream ends, the endpoint is
// replaced or removed, or ctx ends. As with the kubelet, a stream that ends is
// not re-dialled: the resource's devices are unhealthy from then on (and the
// resource leaves Capacity StopGracePeriod later) until the plugin registers
// again.
func (m *Manager) runEndpoint(ctx context.Context, r registration) {
	res := r.req.GetResourceName()
	socket := filepath.Join(m.cfg.Dir, r.req.GetEndpoint())
	log := m.log.With("resourceName", res, "endpoint", socket)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := dialPlugin(socket, m.cfg.MaxListAndWatchMessage)
	if err != nil {
		r.reply <- err
		return
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)

	// DialTimeout is a network deadline: a real-time context deadline, not
	// the Manager's clock.
	octx, ocancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	ocancel()
	if err != nil {
		r.reply <- fmt.Errorf("failed to get device plugin options of %q at %s: %w", res, socket, err)
		return
	}
	if opts == nil {
		opts = &pluginapi.DevicePluginOptions{}
	}
	ep := &endpoint{resource: res, socket: socket, client: client, opts: opts, cancel: cancel}
	m.install(ep)
	log.Info("Registered device plugin",
		"preStartRequired", opts.GetPreStartRequired(),
		"getPreferredAllocationAvailable", opts.GetGetPreferredAllocationAvailable())
	r.reply <- nil

	err = m.watch(ctx, ep, client)
	if ctx.Err() != nil {
		return
	}
	m.stopped(ep, m.clock.Now())
	if status.Code(errors.Unwrap(err)) == codes.ResourceExhausted {
		m.logOversized(log, res, err)
		return
	}
	log.Info("Device plugin stream ended; its devices are unhealthy until the plugin registers again", "err", err)
}

// watch runs the ListAndWatch stream and applies every message until the
// stream ends.
func (m *Manager) watch(ctx context.Context, ep *endpoint, client pluginapi.DevicePluginClient) error {
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return fmt.Errorf("list and watch: %w", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("list and watch: %w", err)
		}
		m.updateDevices(ep, resp.GetDevices())
	}
}

// logOversized reports a ListAndWatch message larger than
// MaxListAndWatchMessage: at ERROR the first time for the resource, then at
// DEBUG until the plugin's list fits again, so a plugin that keeps sending
// it does not flood the log.
func (m *Manager) logOversized(log *slog.Logger, res string, err error) {
	m.mu.Lock()
	first := !m.oversized[res]
	m.oversized[res] = true
	m.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelError
	}
	log.Log(context.Background(), level,
		"Device plugin's device list is larger than the largest accepted message; its devices stay unhealthy until the plugin registers again",
		"maxBytes", m.cfg.MaxListAndWatchMessage, "err", err)
}

// install makes ep the resource's endpoint, stopping the one it replaces.
func (m *Manager) install(ep *endpoint) {
	m.mu.Lock()
	rs := m.resources[ep.resource]
	if rs == nil {
		rs = newResourceState()
		m.resources[ep.resource] = rs
	}
	old := rs.ep
	rs.ep, rs.stoppedAt = ep, time.Time{}
	m.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	m.notify()
}

// ifCurrent calls set on ep's resource state under m.mu if ep is still the
// resource's endpoint, and reports whether it did: the stream of a replaced
// or removed endpoint can still deliver a message or end, and neither may
// touch the resource.
func (m *Manager) ifCurrent(ep *endpoint, set func(*resourceState)) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.resources[ep.resource]
	if rs == nil || rs.ep != ep {
		return false
	}
	set(rs)
	return true
}

// updateDevices applies a ListAndWatch message from ep, if ep is still the
// resource's endpoint. The message is read before taking m.mu.
func (m *Manager) updateDevices(ep *endpoint, devs []*pluginapi.Device) {
	ds := newDeviceSets(devs)
	health := false
	if !m.ifCurrent(ep, func(rs *resourceState) {
		before := m.inUseHealth(ep.resource)
		rs.setDevices(ds)
		health = m.noteHealth(ep.resource, before)
		delete(m.oversized, ep.resource)
	}) {
		return
	}
	if health {
		m.signalHealth()
	}
	if ds.dropped > 0 {
		m.log.Warn("Device plugin sent devices without an ID; ignored them", "resourceName", ep.resource, "count", ds.dropped)
	}
	m.log.Debug("Device plugin pushed device state", "resourceName", ep.resource,
		"healthy", ds.healthy.Len(), "unhealthy", ds.unhealthy.Len())
	m.notify()
}

// stopped marks ep's resource unhealthy from now, if ep is still current.
func (m *Manager) stopped(ep *endpoint, now time.Time) {
	health := false
	if m.ifCurrent(ep, func(rs *resourceState) {
		before := m.inUseHealth(ep.resource)
		rs.setUnhealthy(now)
		health = m.noteHealth(ep.resource, before)
	}) {
		m.notify()
	}
	if health {
		m.signalHealth()
	}
}

// errStopped is returned for an RPC to a resource with no live plugin.
func errStopped(res string) error {
	return classed(ErrUnavailable, "endpoint %s has been stopped", res)
}
