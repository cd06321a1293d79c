package admission

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/eviction"
)

// NodeAllocatable returns what a node may give to pods, as the kubelet computes its
// status.allocatable from its configuration: for every resource in capacity,
//
//	capacity - systemReserved - kubeReserved - hard eviction reservation
//
// where the hard eviction reservation is the hard memory.available threshold for
// memory and the hard nodefs.available threshold for ephemeral-storage (a percentage
// resolved against that resource's capacity; soft thresholds reserve nothing). The
// capacity of every hugepages-* resource is then taken from memory as well, since
// pre-allocated huge pages cannot back ordinary memory. Negative results are clamped
// to zero. Reservations for resources absent from capacity are ignored.
// The inputs are not modified.
func NodeAllocatable(capacity, kubeReserved, systemReserved v1.ResourceList, thresholds []eviction.Threshold) v1.ResourceList {
	evictionReserved := v1.ResourceList{}
	for _, t := range thresholds {
		if !t.Hard() || (t.Operator != "" && t.Operator != eviction.OpLessThan) {
			continue
		}
		var name v1.ResourceName
		switch t.Signal {
		case eviction.SignalMemoryAvailable:
			name = v1.ResourceMemory
		case eviction.SignalNodeFsAvailable:
			name = v1.ResourceEphemeralStorage
		default:
			continue
		}
		c := capacity[name]
		evictionReserved[name] = *t.Value.Of(&c)
	}
	out := v1.ResourceList{}
	for name, c := range capacity {
		v := c.DeepCopy()
		for _, r := range []v1.ResourceList{systemReserved, kubeReserved, evictionReserved} {
			if q, ok := r[name]; ok {
				v.Sub(q)
			}
		}
		out[name] = clamp(v)
	}
	if mem, ok := out[v1.ResourceMemory]; ok {
		for name, c := range capacity {
			if isHugePages(name) {
				mem.Sub(c)
			}
		}
		out[v1.ResourceMemory] = clamp(mem)
	}
	return out
}

func clamp(q resource.Quantity) resource.Quantity {
	if q.Sign() < 0 {
		return *resource.NewQuantity(0, q.Format)
	}
	return q
}

func isHugePages(name v1.ResourceName) bool {
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}
