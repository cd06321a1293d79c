package preemption

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// InsufficientResource is an admission failure: the node does not have enough of one
// resource for the pod. It carries the same fields as the kubelet's
// InsufficientResourceError, in the same units: millicores for cpu, a count for pods,
// and the quantity's integer value (bytes for memory, ephemeral-storage and
// hugepages) for everything else.
//
// A *InsufficientResource is an error; its message is the kubelet's, so operators can
// grep logs and pod statuses of both agents the same way.
type InsufficientResource struct {
	// ResourceName is the resource the node lacks.
	ResourceName v1.ResourceName
	// Requested is what the pod being admitted requests.
	Requested int64
	// Used is the sum of the requests of the pods already on the node.
	Used int64
	// Capacity is the node's allocatable amount.
	Capacity int64
}

// Error returns the kubelet's message for the failure.
func (e *InsufficientResource) Error() string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		e.ResourceName, e.Requested, e.Used, e.Capacity)
}

// Insufficient returns how much of the resource must be freed for the pod to fit:
// Requested - (Capacity - Used).
func (e *InsufficientResource) Insufficient() int64 {
	if free := e.Capacity - e.Used; free < 0 { // over-committed: saturate, never wrap
		return quantity.AddSat(e.Requested, -free)
	}
	return e.Requested - (e.Capacity - e.Used)
}

// Requirement is an amount of one resource that preemption must free, in the units
// of [InsufficientResource].
type Requirement struct {
	Resource v1.ResourceName
	Quantity int64
}

// Requirements is a list of requirements in the order the failures were reported.
// The order matters: it is the order in which distances are summed.
type Requirements []Requirement

// String renders the list as the kubelet does in its preemption errors, for example
// "[(res: cpu, q: 500), ]".
func (rs Requirements) String() string {
	var b strings.Builder
	b.WriteString("[")
	for _, r := range rs {
		fmt.Fprintf(&b, "(res: %s, q: %d), ", r.Resource, r.Quantity)
	}
	b.WriteString("]")
	return b.String()
}

// Request returns how much of name pod requests, in the units of
// [InsufficientResource]: 1 for pods, millicores for cpu, the integer value
// otherwise. Requests are effective requests (component-helpers PodRequests: init
// containers, sidecars, pod-level resources and overhead), with nodeapi's one
// overflow policy: a negative request counts as zero and one beyond int64 as
// math.MaxInt64. It is [nodeapi.PodRequest]; Request is safe for concurrent use and
// does not modify pod.
func Request(pod *v1.Pod, name v1.ResourceName) int64 {
	return nodeapi.PodRequest(pod, name)
}

// requestsOf stores in out[i] what pod requests of names[i], as Request does, and
// computes the pod's effective requests only once. Pods without init containers,
// overhead or pod-level resources, the common case, take a path that allocates
// nothing: their effective request is the sum of their containers' requests, which
// is what nodeapi.PodRequests computes for them.
func requestsOf(pod *v1.Pod, names []v1.ResourceName, out []int64) {
	if len(pod.Spec.InitContainers) > 0 || pod.Spec.Overhead != nil || pod.Spec.Resources != nil {
		r := nodeapi.PodRequests(pod)
		for i, name := range names {
			out[i] = nodeapi.RequestIn(r, name)
		}
		return
	}
	for i, name := range names {
		if name == v1.ResourcePods {
			out[i] = 1
			continue
		}
		var sum resource.Quantity
		for c := range pod.Spec.Containers {
			if q, ok := pod.Spec.Containers[c].Resources.Requests[name]; ok {
				sum.Add(q)
			}
		}
		out[i] = nodeapi.Amount(name, sum)
	}
}
