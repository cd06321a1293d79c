package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/quantity"
)

// Reason is the pod status reason of an evicted pod and of a pod rejected under
// node pressure.
const Reason = "Evicted"

// Annotation keys of the eviction event, as the kubelet sets them.
const (
	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	StarvedResourceKey          = "starved_resource"
)

// Message builds the kubelet's eviction message for pod evicted to reclaim r, and
// the event annotations naming the offending containers:
//
//	The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.
//	Container app was using 1800Mi, request is 1Gi, has larger consumption of memory.
//
// Every container the pod declares in spec.containers or spec.initContainers
// (sidecars included) whose usage exceeds its request is named, in the order of
// the pod's stats; ephemeral containers, which cannot declare requests, never are.
func Message(r v1.ResourceName, pod *v1.Pod, stats StatsFunc, met []Threshold, obs Observations) (string, map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %s. ", r)
	if q, avail := thresholdMetInfo(r, met, obs); q != nil {
		fmt.Fprintf(&b, "Threshold quantity: %s, available: %s. ", q, avail)
	}
	var names, usages []string
	if ps, ok := stats(pod); ok && ps != nil {
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
	}
	return b.String(), map[string]string{
		OffendingContainersKey:      strings.Join(names, ","),
		OffendingContainersUsageKey: strings.Join(usages, ","),
		StarvedResourceKey:          string(r),
	}
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
