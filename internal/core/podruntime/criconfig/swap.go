package criconfig

import (
	"strconv"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// swapMaxFile is the cgroup v2 file of a cgroup's swap limit, set through
// LinuxContainerResources.Unified.
const swapMaxFile = "memory.swap.max"

// Swap is how the node's containers may use swap: the kubelet's
// memorySwap.swapBehavior, applied as its kuberuntime applies it
// (configureContainerSwapResources). The zero value sets no swap limit.
type Swap struct {
	// Controller is true where the kernel limits swap per cgroup
	// (memory.swap.max on cgroup v2, memory.memsw.limit_in_bytes on v1).
	// False: containers get no swap setting at all, as under the kubelet.
	Controller bool
	// CgroupV2 is true on a cgroup v2 (unified) node.
	CgroupV2 bool
	// Limited is memorySwap.swapBehavior LimitedSwap, honoured on cgroup v2
	// only; false is NoSwap.
	Limited bool
	// Capacity is the node's swap (SwapTotal), in bytes.
	Capacity int64
}

// applySwap sets r's swap limit for container c of pod. With LimitedSwap on
// cgroup v2, a container of a Burstable pod that is not critical, requests
// or limits memory, and whose memory request differs from its limit gets
// memory.swap.max = request / node memory * node swap (limitedSwap); every
// other container gets no swap: memory.swap.max 0 on v2, memory+swap equal
// to the memory limit on v1 (no limit when the memory is unlimited).
func applySwap(r *runtimeapi.LinuxContainerResources, pod *v1.Pod, c *v1.Container, memCapacity int64, s Swap) {
	if !s.Controller {
		return
	}
	if !s.CgroupV2 {
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
		return
	}
	limit := int64(0)
	if s.Limited && swapEligible(pod, c) {
		if l, ok := limitedSwap(c.Resources.Requests.Memory().Value(), memCapacity, s.Capacity); ok {
			limit = l
		}
	}
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[swapMaxFile] = strconv.FormatInt(limit, 10)
}

// swapEligible reports whether LimitedSwap gives container c of pod swap:
// the pod is Burstable and not critical (static, mirror, or of system
// critical priority), and c requests or limits memory with a request other
// than its limit (the kubelet's GetContainerSwapBehavior).
func swapEligible(pod *v1.Pod, c *v1.Container) bool {
	if qos.IsCritical(pod) || qos.Class(pod) != v1.PodQOSBurstable {
		return false
	}
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if req.IsZero() && lim.IsZero() {
		return false
	}
	return req.Cmp(*lim) != 0
}

// limitedSwap is the kubelet's LimitedSwap formula: a container's share of
// the node's swap is its share of the node's memory,
// request / memCapacity * swapCapacity, truncated to bytes. ok is false,
// and the container gets no swap, when memCapacity is not positive or the
// request exceeds it.
func limitedSwap(request, memCapacity, swapCapacity int64) (limit int64, ok bool) {
	if memCapacity <= 0 || request > memCapacity {
		return 0, false
	}
	return int64(float64(request) / float64(memCapacity) * float64(swapCapacity)), true
}
