package kubenode

import (
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Labels and annotations the kubelet sets on its Node.
const (
	// labelBetaOS and labelBetaArch are the deprecated forms of
	// kubernetes.io/os and kubernetes.io/arch the kubelet still sets.
	labelBetaOS   = "beta.kubernetes.io/os"
	labelBetaArch = "beta.kubernetes.io/arch"
	// AttachDetachAnnotation tells the attach/detach controller that it, not
	// the node, attaches the node's volumes (the kubelet's default
	// enableControllerAttachDetach).
	AttachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"
)

// defaultLabels are the labels the controller owns on an existing Node: it
// sets them to its own values when it adopts the Node, as the kubelet does
// with its default labels. The configured node labels are set only at
// creation.
var defaultLabels = []string{v1.LabelHostname, v1.LabelOSStable, v1.LabelArchStable, labelBetaOS, labelBetaArch}

// DefaultLabels are the labels the kubelet gives its Node: the host name, the
// operating system and the architecture (also under the beta keys).
func DefaultLabels(hostname string) map[string]string {
	return map[string]string{
		v1.LabelHostname:   hostname,
		v1.LabelOSStable:   runtime.GOOS,
		v1.LabelArchStable: runtime.GOARCH,
		labelBetaOS:        runtime.GOOS,
		labelBetaArch:      runtime.GOARCH,
	}
}

// initialNode returns the Node to create: the default labels, then the
// configured ones (which win), the registration taints, the attach/detach
// annotation, and the status from src.
func (c *Config) initialNode(src *v1.Node, now time.Time) *v1.Node {
	labels := DefaultLabels(c.Hostname)
	maps.Copy(labels, c.Labels)
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.NodeName,
			Labels:      labels,
			Annotations: map[string]string{AttachDetachAnnotation: "true"},
		},
		Spec: v1.NodeSpec{Taints: slices.Clone(c.RegisterWithTaints)},
	}
	c.applyStatus(&node.Status, src, now)
	return node
}

// adopt returns existing changed as the kubelet reconciles a Node it finds
// already registered, and whether anything changed: the default labels take
// the initial Node's values, the attach/detach annotation is set, capacity
// and allocatable get the initial Node's when they are missing, and hugepage
// sizes the host no longer has are removed. existing is not modified.
func adopt(existing, initial *v1.Node) (*v1.Node, bool) {
	node := existing.DeepCopy()
	changed := false
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for _, k := range defaultLabels {
		v, ok := initial.Labels[k]
		if !ok {
			continue
		}
		if node.Labels[k] != v {
			node.Labels[k] = v
			changed = true
		}
		if v == "" {
			delete(node.Labels, k)
		}
	}
	if node.Annotations[AttachDetachAnnotation] != initial.Annotations[AttachDetachAnnotation] {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[AttachDetachAnnotation] = initial.Annotations[AttachDetachAnnotation]
		changed = true
	}
	if node.Status.Capacity == nil {
		node.Status.Capacity = initial.Status.Capacity.DeepCopy()
		changed = true
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = initial.Status.Allocatable.DeepCopy()
		changed = true
	}
	for k, v := range initial.Status.Capacity {
		if !isHugePages(k) {
			continue
		}
		if old, ok := node.Status.Capacity[k]; !ok || old.Cmp(v) != 0 {
			node.Status.Capacity[k] = v.DeepCopy()
			changed = true
		}
		a := initial.Status.Allocatable[k]
		if old, ok := node.Status.Allocatable[k]; !ok || old.Cmp(a) != 0 {
			node.Status.Allocatable[k] = a.DeepCopy()
			changed = true
		}
	}
	for k := range node.Status.Capacity {
		if _, ok := initial.Status.Capacity[k]; isHugePages(k) && !ok {
			delete(node.Status.Capacity, k)
			delete(node.Status.Allocatable, k)
			changed = true
		}
	}
	return node, changed
}

// update returns server (the Node as last read from the API server) with
// the status of src applied and the os and arch labels enforced, and whether
// anything but heartbeat times differs from server. server is not modified.
func (c *Config) update(server, src *v1.Node, now time.Time) (*v1.Node, bool) {
	node := server.DeepCopy()
	labelsChanged := false
	for _, l := range []struct{ key, value string }{{v1.LabelOSStable, runtime.GOOS}, {v1.LabelArchStable, runtime.GOARCH}} {
		if node.Labels[l.key] != l.value {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[l.key] = l.value
			labelsChanged = true
		}
	}
	c.applyStatus(&node.Status, src, now)
	return node, labelsChanged || statusChanged(&server.Status, &node.Status)
}

// applyStatus sets in st what the controller reports: capacity (src's
// resources; others already there, such as extended resources an operator
// advertised, are kept), allocatable (src's, else the capacity; extended
// resources no longer in capacity are removed), src's conditions (by type,
// others kept; a condition whose status is unchanged keeps its
// lastTransitionTime), the addresses, the daemon endpoint and nodeInfo.
func (c *Config) applyStatus(st *v1.NodeStatus, src *v1.Node, now time.Time) {
	if st.Capacity == nil {
		st.Capacity = v1.ResourceList{}
	}
	for k, v := range src.Status.Capacity {
		st.Capacity[k] = v.DeepCopy()
	}
	if st.Allocatable == nil {
		st.Allocatable = v1.ResourceList{}
	}
	for k := range st.Allocatable {
		if _, ok := st.Capacity[k]; !ok && nodeapi.IsExtendedResourceName(k) {
			delete(st.Allocatable, k)
		}
	}
	for k, v := range st.Capacity {
		if a, ok := src.Status.Allocatable[k]; ok {
			v = a
		}
		st.Allocatable[k] = v.DeepCopy()
	}
	for _, sc := range src.Status.Conditions {
		nc := sc
		if nc.LastHeartbeatTime.IsZero() {
			nc.LastHeartbeatTime = metav1.NewTime(now)
		}
		if nc.LastTransitionTime.IsZero() {
			nc.LastTransitionTime = metav1.NewTime(now)
		}
		i := slices.IndexFunc(st.Conditions, func(x v1.NodeCondition) bool { return x.Type == sc.Type })
		if i < 0 {
			st.Conditions = append(st.Conditions, nc)
			continue
		}
		if old := st.Conditions[i]; old.Status == nc.Status && !old.LastTransitionTime.IsZero() {
			nc.LastTransitionTime = old.LastTransitionTime
		}
		st.Conditions[i] = nc
	}
	st.Addresses = c.addresses()
	st.DaemonEndpoints = v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: c.KubeletPort}}
	info := c.SystemInfo
	info.KubeletVersion = c.Version
	info.OperatingSystem, info.Architecture = runtime.GOOS, runtime.GOARCH
	st.NodeInfo = info
}

// addresses are the Node's: InternalIP (when set) and Hostname.
func (c *Config) addresses() []v1.NodeAddress {
	var a []v1.NodeAddress
	if c.NodeIP != "" {
		a = append(a, v1.NodeAddress{Type: v1.NodeInternalIP, Address: c.NodeIP})
	}
	return append(a, v1.NodeAddress{Type: v1.NodeHostName, Address: c.Hostname})
}

// statusChanged reports whether two node statuses differ in anything but
// their conditions' heartbeat times (conditions compared by type, in any
// order; quantities by value).
func statusChanged(a, b *v1.NodeStatus) bool {
	if len(a.Conditions) != len(b.Conditions) {
		return true
	}
	strip := func(cs []v1.NodeCondition) []v1.NodeCondition {
		out := slices.Clone(cs)
		for i := range out {
			out[i].LastHeartbeatTime = metav1.Time{}
		}
		slices.SortStableFunc(out, func(x, y v1.NodeCondition) int { return strings.Compare(string(x.Type), string(y.Type)) })
		return out
	}
	if !equality.Semantic.DeepEqual(strip(a.Conditions), strip(b.Conditions)) {
		return true
	}
	ac, bc := *a, *b
	ac.Conditions, bc.Conditions = nil, nil
	return !equality.Semantic.DeepEqual(ac, bc)
}

// isHugePages reports whether a resource is a hugepages size.
func isHugePages(name v1.ResourceName) bool {
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}
