package devicemanager

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeClient answers allocation RPCs in memory: benchmarks measure the
// manager, not gRPC or a plugin.
type fakeClient struct{}

func (fakeClient) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest, ...grpc.CallOption) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (fakeClient) Allocate(_ context.Context, r *pluginapi.AllocateRequest, _ ...grpc.CallOption) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"X": "y"}})
	}
	return resp, nil
}

func (fakeClient) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest, ...grpc.CallOption) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func benchDevices(n int, numa bool) []*pluginapi.Device {
	out := make([]*pluginapi.Device, n)
	for i := range out {
		out[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%04d", i), Health: pluginapi.Healthy}
		if numa {
			out[i].Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % 2)}}}
		}
	}
	return out
}

// benchManager runs a Manager with resources fake resources of devs
// devices each, served by fakeClient. diskWrites chooses between the real
// checkpoint file (fsync included) and an in-memory sink.
func benchManager(b *testing.B, resources, devs int, diskWrites bool) (*Manager, []*endpoint) {
	b.Helper()
	m, err := New(Config{Dir: b.TempDir()}, Deps{ActivePods: func() []*v1.Pod { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	if !diskWrites {
		m.writeFile = func(string, []byte, fs.FileMode) error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	<-m.started
	var eps []*endpoint
	for i := range resources {
		ep := &endpoint{resource: fmt.Sprintf("example.com/r%d", i), client: fakeClient{},
			opts: &pluginapi.DevicePluginOptions{}, cancel: func() {}}
		m.install(ep)
		m.updateDevices(ep, benchDevices(devs, true))
		eps = append(eps, ep)
	}
	return m, eps
}

// BenchmarkAllocate is one container taking 4 of 1,000 devices through the
// manager, with the plugin RPC answered in memory. Each pod is freed by the
// next allocation (ActivePods is empty), as on a node with pod churn.
func BenchmarkAllocate(b *testing.B) {
	for _, disk := range []bool{false, true} {
		b.Run(fmt.Sprintf("checkpointOnDisk=%v", disk), func(b *testing.B) {
			m, _ := benchManager(b, 1, 1000, disk)
			runAllocations(b, m)
		})
	}
}

// BenchmarkAllocateWhilePluginsPush is BenchmarkAllocate while 100 other
// plugins, 1,000 devices each, each push a full ListAndWatch update every
// interval. On a 2-core machine the 1ms case saturates the CPU with the
// pushers' own work; pushes/s reports the rate actually reached.
func BenchmarkAllocateWhilePluginsPush(b *testing.B) {
	for _, every := range []time.Duration{100 * time.Millisecond, 10 * time.Millisecond, time.Millisecond} {
		b.Run(fmt.Sprintf("plugins=100/every=%v", every), func(b *testing.B) {
			m, eps := benchManager(b, 101, 1000, false)
			stop := startPushers(eps[1:], every, m)
			runAllocations(b, m)
			b.ReportMetric(stop(), "pushes/s")
		})
	}
}

// BenchmarkCapacity is the node-status read of the device resources:
// Capacity over resources plugins of 1,000 devices each, idle or while
// every plugin pushes a full ListAndWatch update every 10ms.
func BenchmarkCapacity(b *testing.B) {
	for _, tc := range []struct {
		resources int
		every     time.Duration // 0: no pushes
	}{{1, 0}, {100, 0}, {100, 10 * time.Millisecond}} {
		b.Run(fmt.Sprintf("plugins=%d/every=%v", tc.resources, tc.every), func(b *testing.B) {
			m, eps := benchManager(b, tc.resources, 1000, false)
			stop := func() float64 { return 0 }
			if tc.every > 0 {
				stop = startPushers(eps, tc.every, m)
			}
			b.ReportAllocs()
			for b.Loop() {
				if c, _, _ := m.Capacity(); len(c) != tc.resources {
					b.Fatalf("capacity lists %d resources, want %d", len(c), tc.resources)
				}
			}
			if tc.every > 0 {
				b.ReportMetric(stop(), "pushes/s")
			}
		})
	}
}

// startPushers has each endpoint push its 1,000 devices every interval until
// the returned stop is called; stop returns the pushes per second reached.
func startPushers(eps []*endpoint, every time.Duration, m *Manager) (stop func() float64) {
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var total atomic.Int64
	for _, ep := range eps {
		msg := benchDevices(1000, true)
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					m.updateDevices(ep, msg)
					total.Add(1)
				}
			}
		})
	}
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(total.Load()) / time.Since(start).Seconds()
	}
}

func runAllocations(b *testing.B, m *Manager) {
	ctx := context.Background()
	c := ctr("app", map[string]int64{"example.com/r0": 4})
	pods := make([]*v1.Pod, 1024)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("uid-%d", i), nil, c)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		p := pods[i%len(pods)]
		i++
		if err := m.Allocate(ctx, p, &p.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// preferLastClient is fakeClient whose GetPreferredAllocation prefers the
// last AllocationSize available devices.
type preferLastClient struct{ fakeClient }

func (preferLastClient) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest, _ ...grpc.CallOption) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		ids := c.AvailableDeviceIDs
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids[len(ids)-int(c.AllocationSize):]})
	}
	return resp, nil
}

// BenchmarkAllocateLarge is one container taking half of a resource's
// devices (5,000 to 50,000, two NUMA nodes), with the plugin's preferred
// allocation (the last half) or without (the first half); the checkpoint
// goes to memory. Each pod is freed by the next allocation.
func BenchmarkAllocateLarge(b *testing.B) {
	for _, n := range []int{5000, 10000, 50000} {
		for _, prefer := range []bool{false, true} {
			b.Run(fmt.Sprintf("devices=%d/preferred=%v", n, prefer), func(b *testing.B) {
				m, err := New(Config{Dir: b.TempDir()}, Deps{ActivePods: func() []*v1.Pod { return nil }})
				if err != nil {
					b.Fatal(err)
				}
				m.writeFile = func(string, []byte, fs.FileMode) error { return nil }
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- m.Run(ctx) }()
				b.Cleanup(func() { cancel(); <-done })
				<-m.started
				ep := &endpoint{resource: "example.com/r0", client: fakeClient{},
					opts: &pluginapi.DevicePluginOptions{}, cancel: func() {}}
				if prefer {
					ep.client = preferLastClient{}
					ep.opts.GetPreferredAllocationAvailable = true
				}
				m.install(ep)
				m.updateDevices(ep, benchDevices(n, true))
				c := ctr("app", map[string]int64{"example.com/r0": int64(n / 2)})
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p := pod(fmt.Sprintf("uid-%d", i), nil, c)
					i++
					if err := m.Allocate(ctx, p, &p.Spec.Containers[0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
