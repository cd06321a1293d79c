package devicemanager

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

func TestPodResourcesDevices(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	numa := func(id string, health string, nodes ...int64) *pluginapi.Device {
		d := &pluginapi.Device{ID: id, Health: health}
		if len(nodes) > 0 {
			d.Topology = &pluginapi.TopologyInfo{}
			for _, n := range nodes {
				d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
			}
		}
		return d
	}
	env.plugin("g.sock", gpu, []*pluginapi.Device{
		numa("d1", pluginapi.Healthy, 1), numa("d0", pluginapi.Healthy, 0), numa("d2", pluginapi.Unhealthy, 0, 1),
	}, nil, plugintest.Funcs{})
	env.plugin("n.sock", "example.com/nic", devices(pluginapi.Healthy, "n0"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{3, 2})
	env.waitCounts("example.com/nic", counts{1, 1})

	topo := func(n int64) *podresourcesapi.TopologyInfo {
		return &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: n}}}
	}
	want := []*podresourcesapi.ContainerDevices{
		{ResourceName: gpu, DeviceIds: []string{"d0"}, Topology: topo(0)},
		{ResourceName: gpu, DeviceIds: []string{"d1"}, Topology: topo(1)},
		// d2 is unhealthy: not allocatable (the node e2e spec "POD Resources
		// API ... with CPU manager None policy" expects no device once the
		// plugins of earlier specs are gone).
		{ResourceName: "example.com/nic", DeviceIds: []string{"n0"}},
	}
	if diff := cmp.Diff(want, env.m.AllocatableDevices(), protocmp.Transform()); diff != "" {
		t.Errorf("AllocatableDevices (-want +got):\n%s", diff)
	}

	c := ctr("app", map[string]int64{gpu: 2, "example.com/nic": 1})
	p := pod("p", nil, c)
	*env.active = []*v1.Pod{p}
	if err := env.m.AllocatePod(testCtx(t), p); err != nil {
		t.Fatal(err)
	}
	wantCtr := []*podresourcesapi.ContainerDevices{
		{ResourceName: gpu, DeviceIds: []string{"d0"}, Topology: topo(0)},
		{ResourceName: gpu, DeviceIds: []string{"d1"}, Topology: topo(1)},
		{ResourceName: "example.com/nic", DeviceIds: []string{"n0"}},
	}
	if diff := cmp.Diff(wantCtr, env.m.ContainerDevices("p", "app"), protocmp.Transform()); diff != "" {
		t.Errorf("ContainerDevices (-want +got):\n%s", diff)
	}
	if got := env.m.ContainerDevices("p", "other"); got != nil {
		t.Errorf("ContainerDevices of a container without devices = %v, want nil", got)
	}
}
