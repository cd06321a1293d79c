package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// Reason is the pod status reason of an evicted pod and of a pod rejected under
// node pressure.
const Reason = "Evicted"

// Annotation keys of the eviction event, as the kubelet sets them. The pod keys
// are set only when the message has a pod sentence (see Message).
const (
	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	OffendingPodKey             = "offending_pod"
	OffendingPodUsageKey        = "offending_pod_usage"
	StarvedResourceKey          = "starved_resource"
)

// Message builds the kubelet's eviction message for pod evicted to reclaim r, and
// the event annotations naming the offending containers (no annotation at all
// for a pod without stats):
//
//	The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.
//	Container app was using 1800Mi, request is 1Gi, has larger consumption of memory.
//
// Every container the pod declares in spec.containers or spec.initContainers
// (sidecars included) whose usage exceeds its request is named, in the order of
// the pod's stats; ephemeral containers, which cannot declare requests, never are.
//
// Under memory pressure, a pod with a pod-level memory request (spec.resources,
// the PodLevelResources feature, on by default since Kubernetes 1.34) and pod
// memory stats gets a pod sentence before the container ones, and the
// offending_pod and offending_pod_usage annotations:
//
//	Pod web was using 900Mi, request is 512Mi, has larger consumption of memory.
//
// As in the kubelet, that sentence is written whether or not the pod's working
// set exceeds its request.
func Message(r v1.ResourceName, pod *v1.Pod, stats StatsFunc, met []Threshold, obs Observations) (string, map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %s. ", r)
	if q, avail := thresholdMetInfo(r, met, obs); q != nil {
		fmt.Fprintf(&b, "Threshold quantity: %s, available: %s. ", q, avail)
	}
	ps, ok := stats(pod)
	if !ok || ps == nil {
		// The kubelet sets no annotation at all, not even the starved resource,
		// for a pod the Summary has no stats for.
		return b.String(), map[string]string{}
	}
	ann := map[string]string{StarvedResourceKey: string(r)}
	if req, ok := podLevelRequest(pod, r); ok && r == v1.ResourceMemory && ps.Memory != nil {
		usage := resource.NewQuantity(0, resource.BinarySI)
		if ps.Memory.WorkingSetBytes != nil {
			usage = resource.NewQuantity(quantity.Int64Sat(*ps.Memory.WorkingSetBytes), resource.BinarySI)
		}
		fmt.Fprintf(&b, "Pod %s was using %s, request is %s, has larger consumption of %s. ", pod.Name, usage, &req, r)
		ann[OffendingPodKey] = pod.Name
		ann[OffendingPodUsageKey] = usage.String()
	}
	var names, usages []string
	for i := range ps.Containers {
		cs := &ps.Containers[i]
		c := declaredContainer(pod, cs.Name)
		if c == nil {
			continue
		}
		req := c.Resources.Requests[r]
		var usage *resource.Quantity
		switch r {
		case v1.ResourceEphemeralStorage:
			if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
				usage = resource.NewQuantity(quantity.AddSat(quantity.Int64Sat(*cs.Rootfs.UsedBytes), quantity.Int64Sat(*cs.Logs.UsedBytes)), resource.BinarySI)
			}
		case v1.ResourceMemory:
			if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
				usage = resource.NewQuantity(quantity.Int64Sat(*cs.Memory.WorkingSetBytes), resource.BinarySI)
			}
		}
		if usage != nil && usage.Cmp(req) > 0 {
			fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %s. ", c.Name, usage, &req, r)
			names = append(names, c.Name)
			usages = append(usages, usage.String())
		}
	}
	ann[OffendingContainersKey] = strings.Join(names, ",")
	ann[OffendingContainersUsageKey] = strings.Join(usages, ",")
	return b.String(), ann
}

// podLevelRequest returns pod's pod-level request of r (spec.resources.requests),
// if the pod sets one.
func podLevelRequest(pod *v1.Pod, r v1.ResourceName) (resource.Quantity, bool) {
	if pod.Spec.Resources == nil {
		return resource.Quantity{}, false
	}
	q, ok := pod.Spec.Resources.Requests[r]
	return q, ok
}

// declaredContainer returns the container of pod's spec.containers or
// spec.initContainers (restartable or not) named name, or nil. Names are unique
// across both lists in a valid pod.
func declaredContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
