package eviction

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Local-storage limit kinds, as the kubelet labels them in its eviction metric.
const (
	LimitEmptyDir           = "emptydirfs.limit"
	LimitPodEphemeral       = "ephemeralpodfs.limit"
	LimitContainerEphemeral = "ephemeralcontainerfs.limit"
)

// Violation is a pod that broke a local-storage limit and must be evicted.
type Violation struct {
	Pod     *v1.Pod
	Limit   string // LimitEmptyDir, LimitPodEphemeral or LimitContainerEphemeral
	Message string
}

// LocalStorageViolations checks each pod's emptyDir sizeLimits, its total
// ephemeral-storage usage against the sum of its containers' limits, and each
// container's rootfs+logs against its limit (rootfs is not counted when images
// and writable layers live on a dedicated image filesystem). It reports at most
// one violation per pod, the first of those checks that fails.
func LocalStorageViolations(pods []*v1.Pod, stats StatsFunc, layout DiskLayout) []Violation {
	var out []Violation
	for _, pod := range pods {
		if !hasLocalStorageLimit(pod) {
			continue // nothing to violate; and no stats looked up
		}
		ps, ok := stats(pod)
		if !ok || ps == nil {
			continue
		}
		if msg, bad := emptyDirViolation(pod, ps); bad {
			out = append(out, Violation{Pod: pod, Limit: LimitEmptyDir, Message: msg})
			continue
		}
		if msg, bad := podEphemeralViolation(pod, ps); bad {
			out = append(out, Violation{Pod: pod, Limit: LimitPodEphemeral, Message: msg})
			continue
		}
		if msg, bad := containerEphemeralViolation(pod, ps, layout); bad {
			out = append(out, Violation{Pod: pod, Limit: LimitContainerEphemeral, Message: msg})
		}
	}
	return out
}

func emptyDirViolation(pod *v1.Pod, ps *statsapi.PodStats) (string, bool) {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
			continue
		}
		for i := range ps.VolumeStats {
			vs := &ps.VolumeStats[i]
			if vs.Name != v.Name || vs.UsedBytes == nil {
				continue
			}
			used := resource.NewQuantity(int64(*vs.UsedBytes), resource.BinarySI)
			if used.Cmp(*v.EmptyDir.SizeLimit) > 0 {
				return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, v.EmptyDir.SizeLimit.String()), true
			}
		}
	}
	return "", false
}

func podEphemeralViolation(pod *v1.Pod, ps *statsapi.PodStats) (string, bool) {
	if !hasEphemeralLimit(pod) {
		return "", false // the common case, without PodLimits' cost
	}
	limit, found := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	if !found {
		return "", false
	}
	// The Summary's pod ephemeral-storage figure already adds rootfs, logs, local
	// volumes and /etc/hosts; fall back to our own sum when it is absent.
	var b uint64
	if es := ps.EphemeralStorage; es != nil && es.UsedBytes != nil {
		b = *es.UsedBytes
	} else {
		b = podDiskUsage(ps, pod, fsStats{rootfs: true, logs: true, localVolumes: true}, false)
	}
	used := resource.NewQuantity(int64(b), resource.BinarySI)
	if used.Cmp(limit) > 0 {
		return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), true
	}
	return "", false
}

func containerEphemeralViolation(pod *v1.Pod, ps *statsapi.PodStats, layout DiskLayout) (string, bool) {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		limit, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]
		if !ok || limit.IsZero() { // the kubelet ignores a zero limit
			continue
		}
		for j := range ps.Containers {
			cs := &ps.Containers[j]
			if cs.Name != c.Name {
				continue
			}
			var b uint64
			if layout != DedicatedImageFs && cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil {
				b += *cs.Rootfs.UsedBytes
			}
			if cs.Logs != nil && cs.Logs.UsedBytes != nil {
				b += *cs.Logs.UsedBytes
			}
			if resource.NewQuantity(int64(b), resource.BinarySI).Cmp(limit) > 0 {
				return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.Name, limit.String()), true
			}
		}
	}
	return "", false
}

// hasLocalStorageLimit reports whether LocalStorageViolations may find pod
// in violation: it has an ephemeral-storage limit or an emptyDir sizeLimit.
func hasLocalStorageLimit(pod *v1.Pod) bool {
	if hasEphemeralLimit(pod) {
		return true
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero() {
			return true
		}
	}
	return false
}

// hasEphemeralLimit reports whether any container, init container or the pod
// itself sets an ephemeral-storage limit.
func hasEphemeralLimit(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[v1.ResourceEphemeralStorage]; ok {
				return true
			}
		}
	}
	if r := pod.Spec.Resources; r != nil {
		if _, ok := r.Limits[v1.ResourceEphemeralStorage]; ok {
			return true
		}
	}
	return false
}
