package cgroups

import (
	"math"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodekeeper/nodekeeper/qos"
)

// The kubelet's cpu constants.
const (
	minShares   = 2
	maxShares   = 262144
	quotaPeriod = 100000 // µs, cpu.cfs_period_us
	minQuota    = 1000   // µs
)

// resources are the values written on a cgroup. A negative quota, memory or
// pids means no limit.
type resources struct {
	shares uint64
	quota  int64 // µs per quotaPeriod
	memory int64 // bytes
	pids   int64
	// hugepages maps a page size to the limit in bytes for pods (nil: leave
	// hugetlb alone); a size the machine supports and the map lacks gets 0.
	hugepages map[int64]int64
}

// milliToShares converts millicores to cpu shares: milli*1024/1000, clamped to
// [2, 262144].
func milliToShares(milli int64) uint64 {
	if milli <= 0 {
		return minShares
	}
	s := milli * 1024 / 1000
	return uint64(min(max(s, minShares), maxShares))
}

// milliToQuota converts a cpu limit in millicores to a CFS quota per
// quotaPeriod, at least minQuota; no limit (-1) for zero.
func milliToQuota(milli int64) int64 {
	if milli <= 0 {
		return -1
	}
	return max(milli*quotaPeriod/1000, minQuota)
}

// sharesToWeight converts v1 cpu shares to a v2 cpu.weight as the kubelet
// does for pod and QoS cgroups since 1.35 (opencontainers/cgroups, runc
// 1.3.2, crun 1.23; kubernetes/kubernetes#131216): 2 shares (and less) is
// weight 1, 262144 is 10000, and in between 10^((l² + 125l)/612 − 7/34)
// rounded up, l = log2(shares), a curve through both ends and the defaults
// (1024 shares: weight 100). The older linear map, 1 + (shares−2)·9999/262142,
// gave a 1-cpu pod weight 39, less than a default-weight system service.
func sharesToWeight(shares uint64) uint64 {
	switch {
	case shares <= minShares:
		return 1
	case shares >= maxShares:
		return 10000
	}
	l := math.Log2(float64(shares))
	return uint64(math.Ceil(math.Pow(10, (l*l+125*l)/612-7.0/34)))
}

// podResources computes the pod cgroup values of pod (see the package doc).
func podResources(pod *v1.Pod, pidsLimit int64) resources {
	r := resources{shares: minShares, quota: -1, memory: -1, pids: -1, hugepages: hugepageLimits(pod)}
	if pidsLimit > 0 {
		r.pids = pidsLimit
	}
	class := qos.Class(pod)
	if class == v1.PodQOSBestEffort {
		return r
	}
	pod = withDefaultRequests(pod)
	lim := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuDeclared, memDeclared := limitsDeclared(pod)
	r.shares = milliToShares(podCPURequest(pod))
	if class == v1.PodQOSGuaranteed || cpuDeclared {
		r.quota = milliToQuota(lim.Cpu().MilliValue())
	}
	if class == v1.PodQOSGuaranteed || memDeclared {
		if m := lim.Memory().Value(); m > 0 {
			r.memory = m
		}
	}
	return r
}

// podCPURequest is the pod's effective cpu request in millicores (init
// containers, sidecars and overhead counted as the scheduler counts them).
func podCPURequest(pod *v1.Pod) int64 {
	req := resourcehelper.PodRequests(withDefaultRequests(pod), resourcehelper.PodResourcesOptions{})
	return req.Cpu().MilliValue()
}

// hugepageLimits returns the pod's hugepages-<size> requests (which equal
// its limits) by page size in bytes; never nil.
func hugepageLimits(pod *v1.Pod) map[int64]int64 {
	out := map[int64]int64{}
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		size, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
		if !ok {
			continue
		}
		if s, err := resource.ParseQuantity(size); err == nil && s.Value() > 0 {
			out[s.Value()] = q.Value()
		}
	}
	return out
}

// limitsDeclared reports whether every container (init ones too) has a cpu,
// and a memory, limit; pod-level limits count for all of them.
func limitsDeclared(pod *v1.Pod) (cpu, memory bool) {
	cpu, memory = true, true
	for _, ctrs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range ctrs {
			l := ctrs[i].Resources.Limits
			if l.Cpu().IsZero() {
				cpu = false
			}
			if l.Memory().IsZero() {
				memory = false
			}
		}
	}
	if pl := pod.Spec.Resources; pl != nil {
		if !pl.Limits.Cpu().IsZero() {
			cpu = true
		}
		if !pl.Limits.Memory().IsZero() {
			memory = true
		}
	}
	return cpu, memory
}

// withDefaultRequests returns pod, or a copy of it in which a container's
// absent cpu or memory request is its limit, as the API server defaults it.
func withDefaultRequests(pod *v1.Pod) *v1.Pod {
	var out *v1.Pod
	for _, init := range []bool{true, false} {
		ctrs := pod.Spec.Containers
		if init {
			ctrs = pod.Spec.InitContainers
		}
		for i := range ctrs {
			for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
				lim, ok := ctrs[i].Resources.Limits[name]
				if _, has := ctrs[i].Resources.Requests[name]; has || !ok {
					continue
				}
				if out == nil {
					out = pod.DeepCopy()
				}
				c := &out.Spec.Containers[i]
				if init {
					c = &out.Spec.InitContainers[i]
				}
				if c.Resources.Requests == nil {
					c.Resources.Requests = v1.ResourceList{}
				}
				c.Resources.Requests[name] = lim.DeepCopy()
			}
		}
	}
	if out == nil {
		return pod
	}
	return out
}
