package devicemanager

import (
	"cmp"
	"slices"
	"strings"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
)

// ContainerDevices returns the devices assigned to the container in the
// pod-resources API's terms, as the kubelet reports them: one entry per
// resource and NUMA node, with no topology for devices that reported none.
// Entries are sorted by resource, then NUMA node. It returns nil when the
// container holds no devices.
func (m *Manager) ContainerDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesapi.ContainerDevices
	byRes := m.pods[podUID][containerName]
	for _, res := range sortedKeys(byRes) {
		a := byRes[res]
		nodes := make([]int64, 0, len(a.devices))
		for n := range a.devices {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		for _, n := range nodes {
			ids := a.devices[n]
			if len(ids) == 0 {
				continue
			}
			out = append(out, &podresourcesapi.ContainerDevices{
				ResourceName: res, DeviceIds: slices.Clone(ids), Topology: topology(n),
			})
		}
	}
	return out
}

// AllocatableDevices returns the healthy devices the plugins reported, as the
// kubelet's pod-resources GetAllocatableResources does (v1.36: the devices it
// knows filtered by the healthy ones, so none of a plugin whose stream ended):
// one entry per device and NUMA node, sorted by resource, device and node.
func (m *Manager) AllocatableDevices() []*podresourcesapi.ContainerDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesapi.ContainerDevices
	for _, res := range sortedKeys(m.resources) {
		rs := m.resources[res]
		ids := rs.healthy.UnsortedList()
		slices.Sort(ids)
		for _, id := range ids {
			nodes := rs.numa[id]
			if len(nodes) == 0 {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id}, Topology: topology(n)})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *podresourcesapi.ContainerDevices) int {
		return cmp.Or(strings.Compare(a.ResourceName, b.ResourceName), strings.Compare(a.DeviceIds[0], b.DeviceIds[0]))
	})
	return out
}

// topology is the pod-resources topology of NUMA node n; nil for devices
// without topology.
func topology(n int64) *podresourcesapi.TopologyInfo {
	if n == checkpoint.NodeWithoutTopology {
		return nil
	}
	return &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: n}}}
}
