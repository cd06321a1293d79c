package qos

import (
	"fmt"
	"math/bits"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// The oom_score_adj values the kubelet uses. The kernel accepts -1000 (never
// kill) to 1000 (kill first).
const (
	// KubeletOOMScoreAdj is the oom_score_adj of the kubelet process; nodekeeper
	// gives itself the same.
	KubeletOOMScoreAdj = -999
	// KubeProxyOOMScoreAdj is the oom_score_adj of kube-proxy.
	KubeProxyOOMScoreAdj = -999
	// GuaranteedOOMScoreAdj is the oom_score_adj of every container of a
	// Guaranteed or node-critical pod.
	GuaranteedOOMScoreAdj = -997
	// BestEffortOOMScoreAdj is the oom_score_adj of every container of a
	// BestEffort pod that is not node-critical.
	BestEffortOOMScoreAdj = 1000
)

const (
	// burstableMinOOMScoreAdj keeps Burstable containers above Guaranteed ones even
	// when a Guaranteed container uses all of the node's memory (the kernel adds
	// up to 1000 for usage).
	burstableMinOOMScoreAdj = 1000 + GuaranteedOOMScoreAdj
	// burstableMaxOOMScoreAdj keeps Burstable containers below BestEffort ones.
	burstableMaxOOMScoreAdj = BestEffortOOMScoreAdj - 1
)

// OOMScoreAdj returns the oom_score_adj the kubelet gives container, one of
// pod's init or regular containers, on a node with memoryCapacity bytes of memory.
//
//   - Node-critical pods (IsNodeCritical) and Guaranteed pods: GuaranteedOOMScoreAdj.
//   - BestEffort pods: BestEffortOOMScoreAdj.
//   - Burstable pods: 1000 - (1000*request)/memoryCapacity in integer arithmetic,
//     where request is the container's memory request in bytes (defaulted from
//     its limit when absent). Below 3 the result is 3 and exactly 1000 becomes
//     999, so Burstable always sits strictly between the other two classes.
//   - When the pod has pod-level requests (pod.Spec.Resources.Requests), the
//     pod's memory request minus the containers' aggregated memory requests,
//     divided equally (integer division) among all init and regular containers,
//     is added to each container's request first.
//   - A restartable init (sidecar) container is capped at the score of the
//     regular container with the smallest memory request (plus the pod-level
//     share above), which is the highest regular-container score: a sidecar is
//     never a likelier victim than every container it serves.
//
// The pod's spec is read as given: while a resize is in progress the caller
// should pass the pod with its allocated resources in the spec, as the kubelet
// does. container is matched to pod's containers by identity, else by name; a
// container that is in neither list is scored as a regular container. A
// negative effective request, possible only for a pod the API server would
// reject, counts as zero, which keeps the result within the kernel's range.
//
// memoryCapacity must be positive for Burstable pods; OOMScoreAdj panics
// otherwise. pod and container must not be nil and are not modified.
func OOMScoreAdj(pod *v1.Pod, container *v1.Container, memoryCapacity int64) int {
	if IsNodeCritical(pod) {
		return GuaranteedOOMScoreAdj
	}
	p := withDefaults(pod)
	switch class(p) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		panic(fmt.Sprintf("qos: OOMScoreAdj: memory capacity %d is not positive", memoryCapacity))
	}

	ctr, sidecar := locate(pod, p, container)
	share := unassignedMemoryShare(p)
	score := linearScore(memoryRequest(ctr)+share, memoryCapacity)
	if sidecar && len(p.Spec.Containers) > 0 {
		smallest := memoryRequest(&p.Spec.Containers[0])
		for i := range p.Spec.Containers[1:] {
			smallest = min(smallest, memoryRequest(&p.Spec.Containers[i+1]))
		}
		score = min(score, linearScore(smallest+share, memoryCapacity))
	}
	return int(min(max(score, burstableMinOOMScoreAdj), burstableMaxOOMScoreAdj))
}

// locate returns the defaulted copy in p of container, which the caller took from
// orig (p is withDefaults(orig)), and whether it is a restartable init container.
func locate(orig, p *v1.Pod, container *v1.Container) (*v1.Container, bool) {
	for i := range orig.Spec.InitContainers {
		if &orig.Spec.InitContainers[i] == container {
			return &p.Spec.InitContainers[i], nodeapi.IsSidecar(container)
		}
	}
	for i := range orig.Spec.Containers {
		if &orig.Spec.Containers[i] == container {
			return &p.Spec.Containers[i], false
		}
	}
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == container.Name {
			return &p.Spec.InitContainers[i], nodeapi.IsSidecar(&p.Spec.InitContainers[i])
		}
	}
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == container.Name {
			return &p.Spec.Containers[i], false
		}
	}
	alone, _ := defaultContainers([]v1.Container{*container})
	return &alone[0], false
}

// memoryRequest returns c's memory request in bytes, rounded up.
func memoryRequest(c *v1.Container) int64 {
	return c.Resources.Requests.Memory().Value()
}

// unassignedMemoryShare returns the part of pod's pod-level memory request that
// no container requests, divided equally among its init and regular containers;
// 0 without a pod-level memory request.
func unassignedMemoryShare(pod *v1.Pod) int64 {
	if !resourcehelper.IsPodLevelRequestsSet(pod) {
		return 0
	}
	podReq := pod.Spec.Resources.Requests.Memory()
	n := int64(len(pod.Spec.InitContainers) + len(pod.Spec.Containers))
	if podReq.IsZero() || n == 0 {
		return 0
	}
	aggregated := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	return (podReq.Value() - aggregated.Memory().Value()) / n
}

// linearScore returns 1000 - (1000*request)/capacity for capacity > 0, with a
// negative request counted as zero. Results below 0 are returned as 0: callers
// only compare and then raise them to burstableMinOOMScoreAdj, so this loses
// nothing, and it keeps 1000*request from overflowing.
func linearScore(request, capacity int64) int64 {
	if request <= 0 {
		return 1000
	}
	hi, lo := bits.Mul64(1000, uint64(request))
	if hi >= uint64(capacity) {
		return 0 // the quotient does not fit in 64 bits: far more than 1000
	}
	quo, _ := bits.Div64(hi, lo, uint64(capacity))
	if quo >= 1000 {
		return 0
	}
	return 1000 - int64(quo)
}
