package admission

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/qos"
)

// The predicate names and descriptions the kubelet reports for non-resource
// admission failures.
const (
	PredicateNodeAffinity    = "NodeAffinity"
	PredicateNodeName        = "NodeName"
	PredicateNodePorts       = "NodePorts"
	PredicateTaintToleration = "TaintToleration"

	reasonNodeAffinity    = "node(s) didn't match Pod's node affinity/selector"
	reasonNodeName        = "node(s) didn't match the requested node name"
	reasonNodePorts       = "node(s) didn't have free ports for the requested pod ports"
	reasonTaintToleration = "node(s) had taints that the pod didn't tolerate"
)

// PredicateFailure is an admission failure that is not about resources: the pod can
// not run on this node whatever is preempted. Its Error is the kubelet's admission
// message, "Predicate <Name> failed"; Name is the pod's rejection reason.
type PredicateFailure struct {
	// Name is the predicate, one of the Predicate* constants.
	Name string
	// Description says what did not match, as the scheduler words it.
	Description string
}

// Error returns the kubelet's message for the failure.
func (e *PredicateFailure) Error() string { return "Predicate " + e.Name + " failed" }

// Node is what the fit check knows about the node.
type Node struct {
	// Allocatable is the node's allocatable resources, pods included (see
	// NodeAllocatable). A missing pods entry allows no pods.
	Allocatable v1.ResourceList
	// Object, when set, is the node itself: its name, labels and taints are checked
	// against the pod's spec.nodeName, node selector, required node affinity and
	// tolerations. When nil those checks are skipped.
	Object *v1.Node
}

// Fit checks whether pod can be admitted next to others (the node's active pods, not
// including pod) as the kubelet's general predicates do, and returns every failure,
// in this order: resource failures (*preemption.InsufficientResource: pods, cpu,
// memory, ephemeral-storage, then the other resources by name), then
// *PredicateFailure for node affinity, node name, host ports and NoExecute taints.
// An empty result means the pod fits.
//
// Requests are effective requests (init containers, sidecars, pod-level resources,
// overhead). A resource the pod requests none of is not checked, except pods: every
// pod takes one. As in the kubelet, extended resources (domain-prefixed names outside
// kubernetes.io) that the node does not list in Allocatable are ignored, because they
// may be cluster-level resources; hugepages and the native resources are checked
// against zero when absent. Taints are not checked for static pods. Fit is pure and
// modifies nothing.
func Fit(pod *v1.Pod, others []*v1.Pod, node Node) []error {
	var failures []error
	alloc := node.Allocatable

	allowedPods := quantityOf(alloc, v1.ResourcePods)
	if int64(len(others))+1 > allowedPods {
		failures = append(failures, &preemption.InsufficientResource{
			ResourceName: v1.ResourcePods, Requested: 1, Used: int64(len(others)), Capacity: allowedPods,
		})
	}

	want := requests(pod)
	for name := range want {
		if nodeapi.IsExtendedResourceName(name) {
			if _, ok := alloc[name]; !ok {
				delete(want, name)
			}
		}
	}
	var names []v1.ResourceName
	for name, v := range want {
		if v > 0 {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		slices.SortFunc(names, func(a, b v1.ResourceName) int { return compareResources(a, b) })
		used := map[v1.ResourceName]int64{}
		for _, o := range others {
			r := nodeapi.PodRequests(o)
			for _, name := range names {
				used[name] = quantity.AddSat(used[name], nodeapi.RequestIn(r, name))
			}
		}
		for _, name := range names {
			capacity := quantityOf(alloc, name)
			if want[name] > capacity-used[name] { // both in [0, MaxInt64]: no overflow
				failures = append(failures, &preemption.InsufficientResource{
					ResourceName: name, Requested: want[name], Used: used[name], Capacity: capacity,
				})
			}
		}
	}

	if node.Object != nil {
		if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node.Object); !ok || err != nil {
			failures = append(failures, &PredicateFailure{Name: PredicateNodeAffinity, Description: reasonNodeAffinity})
		}
		if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Object.Name {
			failures = append(failures, &PredicateFailure{Name: PredicateNodeName, Description: reasonNodeName})
		}
	}
	if hostPortConflict(pod, others) {
		failures = append(failures, &PredicateFailure{Name: PredicateNodePorts, Description: reasonNodePorts})
	}
	if node.Object != nil && !qos.IsStatic(pod) && untoleratedNoExecute(pod, node.Object) {
		failures = append(failures, &PredicateFailure{Name: PredicateTaintToleration, Description: reasonTaintToleration})
	}
	return failures
}

// requests returns pod's effective requests of the resources the fit check knows,
// in the units of preemption.InsufficientResource, with nodeapi's overflow policy
// (a pod's effective request sums its containers and overhead, which can exceed
// int64: it saturates).
func requests(pod *v1.Pod) map[v1.ResourceName]int64 {
	out := map[v1.ResourceName]int64{}
	r := nodeapi.PodRequests(pod)
	for name := range r {
		if checked(name) {
			out[name] = nodeapi.RequestIn(r, name)
		}
	}
	return out
}

// quantityOf reads an allocatable amount in fit units (0 when absent), with
// nodeapi's overflow policy.
func quantityOf(alloc v1.ResourceList, name v1.ResourceName) int64 {
	return nodeapi.Amount(name, alloc[name])
}

// checked reports whether the fit check compares name against allocatable: cpu,
// memory, ephemeral-storage and the scalar resources (hugepages, extended resources,
// kubernetes.io/-prefixed resources and attachable volumes). pods is checked apart.
func checked(name v1.ResourceName) bool {
	switch name {
	case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return true
	case v1.ResourcePods:
		return false
	}
	s := string(name)
	return isHugePages(name) || nodeapi.IsExtendedResourceName(name) ||
		strings.Contains(s, v1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(s, "attachable-volumes-")
}

// compareResources orders cpu, memory, ephemeral-storage first, then by name.
func compareResources(a, b v1.ResourceName) int {
	rank := func(n v1.ResourceName) int {
		switch n {
		case v1.ResourceCPU:
			return 0
		case v1.ResourceMemory:
			return 1
		case v1.ResourceEphemeralStorage:
			return 2
		}
		return 3
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(string(a), string(b))
}

// hostPort is one (ip, protocol, port) binding on the node.
type hostPort struct {
	ip, protocol string
	port         int32
}

const bindAll = "0.0.0.0"

// hostPorts returns the host ports pod binds: those of its containers and of its
// restartable init containers (sidecars), which run for the pod's whole life.
func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	add := func(c *v1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: string(p.Protocol), port: p.HostPort}
			if hp.ip == "" {
				hp.ip = bindAll
			}
			if hp.protocol == "" {
				hp.protocol = string(v1.ProtocolTCP)
			}
			out = append(out, hp)
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if nodeapi.IsSidecar(c) {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// hostPortConflict reports whether pod wants a host port another pod holds: the same
// protocol and port, on the same IP or where either side binds 0.0.0.0.
func hostPortConflict(pod *v1.Pod, others []*v1.Pod) bool {
	want := hostPorts(pod)
	if len(want) == 0 {
		return false
	}
	for _, o := range others {
		for _, held := range hostPorts(o) {
			for _, w := range want {
				if w.port == held.port && w.protocol == held.protocol &&
					(w.ip == held.ip || w.ip == bindAll || held.ip == bindAll) {
					return true
				}
			}
		}
	}
	return false
}

// untoleratedNoExecute reports whether node has a NoExecute taint pod does not
// tolerate; the kubelet ignores the other effects at admission.
func untoleratedNoExecute(pod *v1.Pod, node *v1.Node) bool {
	for i := range node.Spec.Taints {
		taint := &node.Spec.Taints[i]
		if taint.Effect != v1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for j := range pod.Spec.Tolerations {
			if pod.Spec.Tolerations[j].ToleratesTaint(klog.Background(), taint, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return true
		}
	}
	return false
}
