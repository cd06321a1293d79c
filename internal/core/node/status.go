package node

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conditionTexts are the reason and message the kubelet gives each node
// condition, when true and when false.
var conditionTexts = []struct {
	typ                       v1.NodeConditionType
	trueReason, trueMessage   string
	falseReason, falseMessage string
}{
	{v1.NodeMemoryPressure, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
	{v1.NodeDiskPressure, "KubeletHasDiskPressure", "kubelet has disk pressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
	{v1.NodePIDPressure, "KubeletHasInsufficientPID", "kubelet has insufficient PID available", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
}

// transitions remembers since when each node condition has had its status,
// and which device resources Object has reported.
type transitions struct {
	// start is the agent's start, since when a condition has had the
	// status Object first sees it with; set by New, then only read.
	start   time.Time
	mu      sync.Mutex                           // guards since and devices
	since   map[v1.NodeConditionType]statusSince // by condition
	devices map[v1.ResourceName]bool             // every device resource reported so far
}

// goneDevices notes the device resources in capacity as reported and returns,
// sorted, those reported before that capacity no longer has: their plugin
// has been gone past its grace period.
func (t *transitions) goneDevices(capacity v1.ResourceList) []v1.ResourceName {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.devices == nil {
		t.devices = map[v1.ResourceName]bool{}
	}
	for k := range capacity {
		t.devices[k] = true
	}
	var gone []v1.ResourceName
	for k := range t.devices {
		if _, ok := capacity[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	return gone
}

type statusSince struct {
	status v1.ConditionStatus
	since  time.Time
}

// at returns since when condition c has had status s, noting a change at now.
func (t *transitions) at(c v1.NodeConditionType, s v1.ConditionStatus, now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.since == nil {
		t.since = map[v1.NodeConditionType]statusSince{}
	}
	old, ok := t.since[c]
	cur := statusAt(old, ok, s, t.start, now)
	t.since[c] = cur
	return cur.since
}

// statusAt is since when a condition has had status s, seen at now, when it
// was last noted as prev (seen false: never before): prev while the status
// is prev's, now from a change, and for a condition first seen the agent's
// start, the time it has had that status since as far as anything tells
// (the agent looks at its conditions every nodeStatusUpdateFrequency from
// its start on, as the kubelet computes its Node's status); now when start
// is zero or later than now.
func statusAt(prev statusSince, seen bool, s v1.ConditionStatus, start, now time.Time) statusSince {
	switch {
	case seen && prev.status == s:
		return prev
	case !seen && !start.IsZero() && !start.After(now):
		return statusSince{status: s, since: start}
	}
	return statusSince{status: s, since: now}
}

// Object returns the node's Node object as the kubelet would post it: name,
// the pressure conditions the eviction manager holds and Ready (false with
// notReady's message when it is set), capacity and allocatable (with the
// device plugins' resources). A device resource Object reported before and
// the device manager no longer has (its plugin gone past the stop grace
// period) is reported with capacity and allocatable 0, as the kubelet does,
// so the scheduler sees it gone rather than keeping the Node's last count. A
// condition's lastTransitionTime is when Object first saw its current status,
// or the agent's start (Collaborators.Start) for the status Object first saw.
// It may be called from any goroutine.
func (n *Node) Object(name string, notReady error, now time.Time) (*v1.Node, error) {
	capacity, err := n.capacity()
	if err != nil {
		return nil, err
	}
	capacity = capacity.DeepCopy() // added to below
	alloc, err := n.allocatable(n.cfg, n.capacity, nil)()
	if err != nil {
		return nil, err
	}
	if _, ok := capacity[v1.ResourcePods]; !ok {
		capacity[v1.ResourcePods] = alloc.Allocatable[v1.ResourcePods]
	}
	if n.Devices != nil {
		devCap, _, _ := n.Devices.Capacity()
		for k, v := range devCap {
			capacity[k] = v
		}
		for _, k := range n.transitions.goneDevices(devCap) {
			capacity[k] = *resource.NewQuantity(0, resource.DecimalSI)
			alloc.Allocatable[k] = *resource.NewQuantity(0, resource.DecimalSI)
		}
	}
	pressure := n.Eviction.Conditions()
	obj := &v1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     v1.NodeStatus{Capacity: capacity, Allocatable: alloc.Allocatable},
	}
	heartbeat := metav1.NewTime(now)
	add := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, message string) {
		obj.Status.Conditions = append(obj.Status.Conditions, v1.NodeCondition{
			Type: t, Status: s, Reason: reason, Message: message,
			LastHeartbeatTime: heartbeat, LastTransitionTime: metav1.NewTime(n.transitions.at(t, s, now)),
		})
	}
	for _, c := range conditionTexts {
		if slices.Contains(pressure, c.typ) {
			add(c.typ, v1.ConditionTrue, c.trueReason, c.trueMessage)
		} else {
			add(c.typ, v1.ConditionFalse, c.falseReason, c.falseMessage)
		}
	}
	if notReady != nil {
		add(v1.NodeReady, v1.ConditionFalse, "KubeletNotReady", notReady.Error())
	} else {
		add(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
	}
	return obj, nil
}
