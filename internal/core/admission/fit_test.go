package admission

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/qos"
)

type podOpt func(*v1.Pod)

func newPod(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func list(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func withRequests(kv ...string) podOpt {
	return func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = list(kv...) }
}

func static() podOpt {
	return func(p *v1.Pod) { p.Annotations = map[string]string{qos.ConfigSourceAnnotation: "file"} }
}

func hostPortOpt(port int32, ip string, proto v1.Protocol) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{ContainerPort: 80, HostPort: port, HostIP: ip, Protocol: proto})
	}
}

func insufficient(name v1.ResourceName, requested, used, capacity int64) error {
	return &preemption.InsufficientResource{ResourceName: name, Requested: requested, Used: used, Capacity: capacity}
}

func TestNodeAllocatable(t *testing.T) {
	t.Parallel()
	q := resource.MustParse
	hard := func(s eviction.Signal, v eviction.Value) eviction.Threshold {
		return eviction.Threshold{Signal: s, Operator: eviction.OpLessThan, Value: v}
	}
	abs := func(s string) eviction.Value { v := q(s); return eviction.Value{Quantity: &v} }
	tests := []struct {
		name                string
		capacity, kube, sys v1.ResourceList
		thresholds          []eviction.Threshold
		want                v1.ResourceList
	}{
		{
			name:     "no reservations",
			capacity: list("cpu", "4", "memory", "8Gi", "pods", "110"),
			want:     list("cpu", "4", "memory", "8Gi", "pods", "110"),
		},
		{
			name:       "kube and system reserved and the kubelet's default hard thresholds",
			capacity:   list("cpu", "4", "memory", "8Gi", "ephemeral-storage", "100Gi", "pods", "110"),
			kube:       list("cpu", "500m", "memory", "1Gi"),
			sys:        list("cpu", "250m", "memory", "512Mi", "ephemeral-storage", "10Gi"),
			thresholds: []eviction.Threshold{hard(eviction.SignalMemoryAvailable, abs("100Mi")), hard(eviction.SignalNodeFsAvailable, eviction.Value{Percentage: 0.1}), hard(eviction.SignalImageFsAvailable, eviction.Value{Percentage: 0.15})},
			// memory 8192-1024-512-100 = 6556Mi; storage 100Gi-10Gi-10% of 100Gi,
			// the percentage being a float32 as in the kubelet.
			want: v1.ResourceList{
				"cpu": q("3250m"), "memory": q("6556Mi"), "pods": q("110"),
				"ephemeral-storage": *resource.NewQuantity(90<<30-int64(float64(100<<30)*float64(float32(0.1))), resource.BinarySI),
			},
		},
		{
			name:       "soft thresholds reserve nothing",
			capacity:   list("memory", "1Gi"),
			thresholds: []eviction.Threshold{{Signal: eviction.SignalMemoryAvailable, Operator: eviction.OpLessThan, Value: abs("500Mi"), GracePeriod: 1}},
			want:       list("memory", "1Gi"),
		},
		{
			name:       "percentage of memory capacity",
			capacity:   list("memory", "10Gi"),
			thresholds: []eviction.Threshold{hard(eviction.SignalMemoryAvailable, eviction.Value{Percentage: 0.05})},
			want:       v1.ResourceList{"memory": *resource.NewQuantity(10<<30-int64(float64(10<<30)*float64(float32(0.05))), resource.BinarySI)},
		},
		{
			name:     "huge pages come out of memory",
			capacity: list("memory", "8Gi", "hugepages-2Mi", "1Gi", "hugepages-1Gi", "2Gi"),
			kube:     list("hugepages-2Mi", "512Mi"),
			want:     list("memory", "5Gi", "hugepages-2Mi", "512Mi", "hugepages-1Gi", "2Gi"),
		},
		{
			name:     "clamped at zero; reservations of absent resources ignored",
			capacity: list("cpu", "1", "memory", "1Gi"),
			kube:     list("cpu", "2", "example.com/gpu", "1"),
			want:     list("cpu", "0", "memory", "1Gi"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := NodeAllocatable(tc.capacity, tc.kube, tc.sys, tc.thresholds)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("allocatable (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFit(t *testing.T) {
	t.Parallel()
	alloc := list("cpu", "4", "memory", "8Gi", "ephemeral-storage", "20Gi", "pods", "3", "hugepages-2Mi", "100Mi", "example.com/gpu", "2")
	node := Node{Allocatable: alloc}
	running := []*v1.Pod{
		newPod("a", withRequests("cpu", "2", "memory", "4Gi", "example.com/gpu", "1")),
		newPod("b", withRequests("cpu", "1500m", "memory", "2Gi", "ephemeral-storage", "15Gi")),
	}
	nodeObj := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute}, {Key: "soft", Effect: v1.TaintEffectNoSchedule}}},
	}
	tolerateDedicated := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute}}
	}
	tests := []struct {
		name   string
		pod    *v1.Pod
		others []*v1.Pod
		node   Node
		want   []error
	}{
		{name: "fits", pod: newPod("new", withRequests("cpu", "500m", "memory", "1Gi")), others: running, node: node},
		{name: "requests nothing", pod: newPod("new"), others: running, node: node},
		{
			name:   "cpu",
			pod:    newPod("new", withRequests("cpu", "600m")),
			others: running, node: node,
			want: []error{insufficient("cpu", 600, 3500, 4000)},
		},
		{
			name:   "every resource, in order",
			pod:    newPod("new", withRequests("example.com/gpu", "2", "memory", "3Gi", "cpu", "1", "ephemeral-storage", "6Gi", "hugepages-2Mi", "200Mi")),
			others: running, node: Node{Allocatable: list("cpu", "4", "memory", "8Gi", "ephemeral-storage", "20Gi", "pods", "2", "hugepages-2Mi", "100Mi", "example.com/gpu", "2")},
			want: []error{
				insufficient("pods", 1, 2, 2),
				insufficient("cpu", 1000, 3500, 4000),
				insufficient("memory", 3<<30, 6<<30, 8<<30),
				insufficient("ephemeral-storage", 6<<30, 15<<30, 20<<30),
				insufficient("example.com/gpu", 2, 1, 2),
				insufficient("hugepages-2Mi", 200<<20, 0, 100<<20),
			},
		},
		{
			name:   "too many pods even without requests",
			pod:    newPod("new"),
			others: running, node: Node{Allocatable: list("pods", "2")},
			want: []error{insufficient("pods", 1, 2, 2)},
		},
		{
			name:   "no pods entry allows no pods",
			pod:    newPod("new"),
			others: nil, node: Node{Allocatable: list("cpu", "1")},
			want: []error{insufficient("pods", 1, 0, 0)},
		},
		{
			name:   "extended resource unknown to the node is ignored",
			pod:    newPod("new", withRequests("vendor.io/fpga", "1")),
			others: running, node: node,
		},
		{
			name:   "hugepages unknown to the node fail",
			pod:    newPod("new", withRequests("hugepages-1Gi", "1Gi")),
			others: running, node: node,
			want: []error{insufficient("hugepages-1Gi", 1<<30, 0, 0)},
		},
		{
			name: "init containers, sidecars and overhead count",
			pod: newPod("new", withRequests("cpu", "100m"), func(p *v1.Pod) {
				always := v1.ContainerRestartPolicyAlways
				p.Spec.InitContainers = []v1.Container{{Name: "side", RestartPolicy: &always, Resources: v1.ResourceRequirements{Requests: list("cpu", "300m")}}}
				p.Spec.Overhead = list("cpu", "150m")
			}),
			others: running, node: node,
			want: []error{insufficient("cpu", 550, 3500, 4000)},
		},
		{
			name: "used counts the others' init containers",
			pod:  newPod("new", withRequests("cpu", "1")),
			others: []*v1.Pod{newPod("x", withRequests("cpu", "100m"), func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Requests: list("cpu", "3500m")}}}
			})},
			node: node,
			want: []error{insufficient("cpu", 1000, 3500, 4000)},
		},
		{
			// 7Ei each fits an int64; the sum does not, and wrapped it would fit the node.
			name: "effective request beyond int64 saturates",
			pod: newPod("new", withRequests("memory", "7Ei"), func(p *v1.Pod) {
				p.Spec.Overhead = list("memory", "7Ei")
			}),
			others: running, node: node,
			want: []error{insufficient("memory", math.MaxInt64, 6<<30, 8<<30)},
		},
		{
			name:   "quantity beyond int64 saturates",
			pod:    newPod("new", withRequests("memory", "1e30", "cpu", "1e17")),
			others: running, node: node,
			want: []error{insufficient("cpu", math.MaxInt64, 3500, 4000), insufficient("memory", math.MaxInt64, 6<<30, 8<<30)},
		},
		{
			name: "used beyond int64 saturates",
			pod:  newPod("new", withRequests("memory", "1Gi")),
			others: []*v1.Pod{
				newPod("x", withRequests("memory", "5Ei")),
				newPod("y", withRequests("memory", "5Ei")),
			},
			node: Node{Allocatable: list("memory", "7Ei", "pods", "10")},
			want: []error{insufficient("memory", 1<<30, math.MaxInt64, 7<<60)},
		},
		{
			name:   "host port conflict",
			pod:    newPod("new", hostPortOpt(8080, "", "")),
			others: []*v1.Pod{newPod("x", hostPortOpt(8080, "10.0.0.1", v1.ProtocolTCP))},
			node:   node,
			want:   []error{&PredicateFailure{Name: "NodePorts", Description: reasonNodePorts}},
		},
		{
			name:   "host ports on other IPs or protocols do not conflict",
			pod:    newPod("new", hostPortOpt(8080, "10.0.0.2", ""), hostPortOpt(53, "", v1.ProtocolUDP)),
			others: []*v1.Pod{newPod("x", hostPortOpt(8080, "10.0.0.1", ""), hostPortOpt(53, "", v1.ProtocolTCP))},
			node:   node,
		},
		{
			name:   "node selector, node name and NoExecute taint",
			pod:    newPod("new", withRequests("cpu", "1"), func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"}; p.Spec.NodeName = "n2" }),
			others: running,
			node:   Node{Allocatable: alloc, Object: nodeObj},
			want: []error{
				insufficient("cpu", 1000, 3500, 4000),
				&PredicateFailure{Name: "NodeAffinity", Description: reasonNodeAffinity},
				&PredicateFailure{Name: "NodeName", Description: reasonNodeName},
				&PredicateFailure{Name: "TaintToleration", Description: reasonTaintToleration},
			},
		},
		{
			name:   "matching node, tolerated taint",
			pod:    newPod("new", tolerateDedicated, func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"}; p.Spec.NodeName = "n1" }),
			others: running,
			node:   Node{Allocatable: alloc, Object: nodeObj},
		},
		{
			name:   "static pods ignore taints",
			pod:    newPod("new", static()),
			others: running,
			node:   Node{Allocatable: alloc, Object: nodeObj},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Fit(tc.pod, tc.others, tc.node)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b error) bool { return a.Error() == b.Error() })); diff != "" {
				t.Errorf("failures (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFitMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		failure             error
		wantReason, wantMsg string
	}{
		{insufficient("cpu", 600, 3500, 4000), "OutOfcpu", "Node didn't have enough resource: cpu, requested: 600, used: 3500, capacity: 4000"},
		{insufficient("pods", 1, 110, 110), "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"},
		{insufficient("example.com/gpu", 1, 0, 0), "OutOfexample.com/gpu", "Node didn't have enough resource: example.com/gpu, requested: 1, used: 0, capacity: 0"},
		{&PredicateFailure{Name: "NodeAffinity", Description: reasonNodeAffinity}, "NodeAffinity", "Predicate NodeAffinity failed"},
		{errUnknown{}, "UnexpectedPredicateFailureType", "GeneralPredicates failed due to odd, which is unexpected."},
	}
	for _, tc := range tests {
		reason, msg := reasonFor(tc.failure)
		if reason != tc.wantReason || msg != tc.wantMsg {
			t.Errorf("reasonFor(%v) = %q, %q; want %q, %q", tc.failure, reason, msg, tc.wantReason, tc.wantMsg)
		}
	}
}

type errUnknown struct{}

func (errUnknown) Error() string { return "odd" }
