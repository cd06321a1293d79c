package nodeapi

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// PodMemoryLimit returns the memory limit in bytes of pod's cgroup as the
// kubelet sets it: the pod's effective limit (the larger of its regular and
// sidecar containers' sum and its largest init container with the sidecars
// started before it, pod-level resources.limits in place of the containers'
// when set, overhead added), and ok only when that limit binds: every
// container, init containers included, declares a non-zero memory limit, or
// the pod has a pod-level one. The amount saturates at math.MaxInt64 as
// [Amount] does. It does not modify pod.
func PodMemoryLimit(pod *v1.Pod) (limit int64, ok bool) {
	declared := true
	for _, ctrs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range ctrs {
			if ctrs[i].Resources.Limits.Memory().IsZero() {
				declared = false
			}
		}
	}
	if pl := pod.Spec.Resources; pl != nil && !pl.Limits.Memory().IsZero() {
		declared = true
	}
	if !declared {
		return 0, false
	}
	lim := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	m := Amount(v1.ResourceMemory, *lim.Memory())
	return m, m > 0
}

// TmpfsSize returns the size in bytes of a tmpfs that holds a volume of pod:
// a memory-backed emptyDir (medium Memory, sizeLimit its sizeLimit) or the
// tmpfs of a secret, projected or downwardAPI volume (sizeLimit nil). It is
// the kubelet's rule since SizeMemoryBackedVolumes (GA in 1.32; KEP-1967: the
// volume is sized as the pod's cgroup bounds what it may write): the smallest
// of allocatable (the node's memory for pods), the pod's memory limit when it
// has one ([PodMemoryLimit]), and sizeLimit when set and positive. So a
// sizeLimit above the pod's limit gives the pod's limit, and a pod without
// limits or sizeLimit gets allocatable.
func TmpfsSize(pod *v1.Pod, sizeLimit *resource.Quantity, allocatable int64) int64 {
	size := allocatable
	if l, ok := PodMemoryLimit(pod); ok && l < size {
		size = l
	}
	if sizeLimit != nil {
		if l := Amount(v1.ResourceMemory, *sizeLimit); l > 0 && l < size {
			size = l
		}
	}
	return size
}
