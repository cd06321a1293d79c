package kubenode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// strategicNodeStatusPatch is nodeStatusPatch as it was written with the API
// machinery's strategicpatch package, the reference the differential tests
// hold the package's own implementation to.
func strategicNodeStatusPatch(old, updated *v1.Node) ([]byte, error) {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	replaceAddresses := len(old.Status.Addresses) > 0 && !equality.Semantic.DeepEqual(old.Status.Addresses, updated.Status.Addresses)
	target := updated.DeepCopy()
	target.Spec = old.Spec
	if replaceAddresses {
		target.Status.Addresses = old.Status.Addresses
	}
	newJSON, err := json.Marshal(target)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
	if err != nil || !replaceAddresses {
		return patch, err
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	status, _ := m["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		m["status"] = status
	}
	addrs := make([]any, 0, len(updated.Status.Addresses)+1)
	for _, a := range updated.Status.Addresses {
		addrs = append(addrs, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	status["addresses"] = append(addrs, map[string]any{"$patch": "replace"})
	return json.Marshal(m)
}

// smpBaseNode is a Node with every field of the status and the metadata
// the patch covers set.
func smpBaseNode() *v1.Node {
	t0 := metav1.NewTime(time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(time.Date(2025, 3, 1, 10, 5, 0, 0, time.UTC))
	cond := func(typ v1.NodeConditionType, status v1.ConditionStatus, reason string) v1.NodeCondition {
		return v1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: "m " + reason,
			LastHeartbeatTime: t1, LastTransitionTime: t0}
	}
	rl := func(cpu, mem, pods string) v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem),
			v1.ResourcePods: resource.MustParse(pods), "hugepages-2Mi": resource.MustParse("0")}
	}
	return &v1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "n1", UID: "u-1", ResourceVersion: "42", CreationTimestamp: t0,
			Labels:          map[string]string{v1.LabelHostname: "n1", v1.LabelOSStable: "linux", "team": "a"},
			Annotations:     map[string]string{AttachDetachAnnotation: "true", "note": "x"},
			Finalizers:      []string{"f/a", "f/b"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "X", Name: "x", UID: "o-1"}},
		},
		Spec: v1.NodeSpec{PodCIDR: "10.0.0.0/24", ProviderID: "p://1"},
		Status: v1.NodeStatus{
			Capacity:    rl("4", "8Gi", "110"),
			Allocatable: rl("3900m", "7Gi", "110"),
			Phase:       v1.NodeRunning,
			Conditions: []v1.NodeCondition{
				cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory"),
				cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure"),
				cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID"),
				cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady"),
			},
			Addresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "n1"}},
			DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: 10250}},
			NodeInfo: v1.NodeSystemInfo{MachineID: "m", SystemUUID: "s", BootID: "b1", KernelVersion: "6.1",
				OSImage: "Debian", ContainerRuntimeVersion: "containerd://2.0", KubeletVersion: "v1.37.2",
				OperatingSystem: "linux", Architecture: "amd64", Swap: &v1.NodeSwapStatus{Capacity: ptr[int64](0)}},
			Images: []v1.ContainerImage{{Names: []string{"img/a@sha256:1", "img/a:1"}, SizeBytes: 100},
				{Names: []string{"img/b:2"}, SizeBytes: 2000}},
			VolumesInUse:    []v1.UniqueVolumeName{"vol/1", "vol/2"},
			VolumesAttached: []v1.AttachedVolume{{Name: "vol/1", DevicePath: "/dev/a"}},
			Config: &v1.NodeConfigStatus{Active: &v1.NodeConfigSource{ConfigMap: &v1.ConfigMapNodeConfigSource{
				Namespace: "kube-system", Name: "c", KubeletConfigKey: "k"}}},
			RuntimeHandlers: []v1.NodeRuntimeHandler{{Name: "", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr(true)}},
				{Name: "runc"}},
			Features:         &v1.NodeFeatures{SupplementalGroupsPolicy: ptr(true)},
			DeclaredFeatures: []string{"A", "B"},
		},
	}
}

// smpCase is a change of a Node, applied to a copy of old.
type smpCase struct {
	name   string
	old    *v1.Node
	change func(n *v1.Node)
}

func smpCases() []smpCase {
	base := smpBaseNode()
	later := metav1.NewTime(time.Date(2025, 3, 1, 10, 6, 0, 0, time.UTC))
	cases := []smpCase{
		{"nothing", base, func(*v1.Node) {}},
		{"spec only", base, func(n *v1.Node) { n.Spec.PodCIDR = "10.9.0.0/24"; n.Spec.Unschedulable = true }},
		{"one condition", base, func(n *v1.Node) { n.Status.Conditions[3].Status = v1.ConditionFalse }},
		{"heartbeats", base, func(n *v1.Node) {
			for i := range n.Status.Conditions {
				n.Status.Conditions[i].LastHeartbeatTime = later
			}
		}},
		{"condition message emptied", base, func(n *v1.Node) { n.Status.Conditions[1].Message = "" }},
		{"condition added", base, func(n *v1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse})
		}},
		{"condition added first", base, func(n *v1.Node) {
			n.Status.Conditions = append([]v1.NodeCondition{{Type: "Custom", Status: v1.ConditionUnknown}}, n.Status.Conditions...)
		}},
		{"condition removed", base, func(n *v1.Node) { n.Status.Conditions = slices.Delete(n.Status.Conditions, 1, 2) }},
		{"two conditions removed", base, func(n *v1.Node) { n.Status.Conditions = n.Status.Conditions[2:3] }},
		{"conditions reordered", base, func(n *v1.Node) { slices.Reverse(n.Status.Conditions) }},
		{"conditions reordered and changed", base, func(n *v1.Node) {
			slices.Reverse(n.Status.Conditions)
			n.Status.Conditions[0].Reason = "Other"
		}},
		{"conditions cleared", base, func(n *v1.Node) { n.Status.Conditions = nil }},
		{"capacity key added", base, func(n *v1.Node) { n.Status.Capacity["example.com/gpu"] = resource.MustParse("2") }},
		{"capacity key removed", base, func(n *v1.Node) { delete(n.Status.Capacity, "hugepages-2Mi") }},
		{"allocatable changed", base, func(n *v1.Node) { n.Status.Allocatable[v1.ResourceMemory] = resource.MustParse("6Gi") }},
		{"capacity cleared", base, func(n *v1.Node) { n.Status.Capacity = nil }},
		{"address changed", base, func(n *v1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }},
		{"addresses of one type", base, func(n *v1.Node) {
			n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeInternalIP, Address: "fd00::2"}}
		}},
		{"addresses cleared", base, func(n *v1.Node) { n.Status.Addresses = nil }},
		{"addresses and a condition", base, func(n *v1.Node) {
			n.Status.Addresses = n.Status.Addresses[1:]
			n.Status.Conditions[0].Status = v1.ConditionTrue
		}},
		{"images changed", base, func(n *v1.Node) { n.Status.Images[1].SizeBytes = 2001 }},
		{"image added", base, func(n *v1.Node) {
			n.Status.Images = append(n.Status.Images, v1.ContainerImage{Names: []string{"img/c:3"}})
		}},
		{"images cleared", base, func(n *v1.Node) { n.Status.Images = nil }},
		{"nodeInfo changed", base, func(n *v1.Node) {
			n.Status.NodeInfo.BootID = "b2"
			n.Status.NodeInfo.KernelVersion = "6.2"
		}},
		{"nodeInfo swap removed", base, func(n *v1.Node) { n.Status.NodeInfo.Swap = nil }},
		{"daemon port", base, func(n *v1.Node) { n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10251 }},
		{"daemon endpoints cleared", base, func(n *v1.Node) { n.Status.DaemonEndpoints = v1.NodeDaemonEndpoints{} }},
		{"volumes in use", base, func(n *v1.Node) { n.Status.VolumesInUse = []v1.UniqueVolumeName{"vol/2", "vol/3"} }},
		{"volumes attached cleared", base, func(n *v1.Node) { n.Status.VolumesAttached = nil }},
		{"config error", base, func(n *v1.Node) { n.Status.Config.Error = "bad" }},
		{"config cleared", base, func(n *v1.Node) { n.Status.Config = nil }},
		{"runtime handler features", base, func(n *v1.Node) {
			n.Status.RuntimeHandlers[1].Features = &v1.NodeRuntimeHandlerFeatures{UserNamespaces: ptr(true)}
		}},
		{"features off", base, func(n *v1.Node) { n.Status.Features.SupplementalGroupsPolicy = ptr(false) }},
		{"features cleared", base, func(n *v1.Node) { n.Status.Features = nil }},
		{"declared features", base, func(n *v1.Node) { n.Status.DeclaredFeatures = []string{"B"} }},
		{"phase cleared", base, func(n *v1.Node) { n.Status.Phase = "" }},
		{"label added, changed and removed", base, func(n *v1.Node) {
			n.Labels[v1.LabelArchStable] = "amd64"
			n.Labels[v1.LabelOSStable] = "windows"
			delete(n.Labels, "team")
		}},
		{"annotation removed", base, func(n *v1.Node) { delete(n.Annotations, "note") }},
		{"labels cleared", base, func(n *v1.Node) { n.Labels = nil }},
		{"finalizer added", base, func(n *v1.Node) { n.Finalizers = append(n.Finalizers, "f/c") }},
		{"finalizer removed", base, func(n *v1.Node) { n.Finalizers = n.Finalizers[1:] }},
		{"finalizers cleared", base, func(n *v1.Node) { n.Finalizers = nil }},
		{"owner reference added", base, func(n *v1.Node) {
			n.OwnerReferences = append(n.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Y", Name: "y", UID: "o-2"})
		}},
		{"everything", base, func(n *v1.Node) {
			n.Status = v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}
			n.Labels = map[string]string{"only": "one"}
		}},
	}
	empty := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"}}
	full := smpBaseNode()
	cases = append(cases,
		smpCase{"from an empty node", empty, func(n *v1.Node) { n.ObjectMeta, n.Status = full.ObjectMeta, full.Status }},
		smpCase{"to an empty node", full, func(n *v1.Node) { n.ObjectMeta, n.Status = empty.ObjectMeta, empty.Status }},
	)
	return cases
}

// smpRandomCases are count seeded random combinations of the changes the
// controller makes to a Node.
func smpRandomCases(count int) []smpCase {
	rng := rand.New(rand.NewPCG(1, 2))
	mutations := []func(n *v1.Node){
		func(n *v1.Node) { // a condition's status
			if len(n.Status.Conditions) > 0 {
				c := &n.Status.Conditions[rng.IntN(len(n.Status.Conditions))]
				c.Status = []v1.ConditionStatus{v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown}[rng.IntN(3)]
				c.LastTransitionTime = metav1.NewTime(time.Unix(1_740_000_000+rng.Int64N(1000), 0))
			}
		},
		func(n *v1.Node) { // a condition removed
			if len(n.Status.Conditions) > 0 {
				i := rng.IntN(len(n.Status.Conditions))
				n.Status.Conditions = slices.Delete(n.Status.Conditions, i, i+1)
			}
		},
		func(n *v1.Node) { // a condition added where it is not
			typ := v1.NodeConditionType(fmt.Sprintf("Extra%d", rng.IntN(4)))
			if !slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == typ }) {
				i := rng.IntN(len(n.Status.Conditions) + 1)
				n.Status.Conditions = slices.Insert(n.Status.Conditions, i, v1.NodeCondition{Type: typ, Status: v1.ConditionTrue, Reason: "R"})
			}
		},
		func(n *v1.Node) { // conditions shuffled
			rng.Shuffle(len(n.Status.Conditions), func(i, j int) {
				n.Status.Conditions[i], n.Status.Conditions[j] = n.Status.Conditions[j], n.Status.Conditions[i]
			})
		},
		func(n *v1.Node) { // a resource added, changed or removed
			name := v1.ResourceName([]string{"cpu", "memory", "pods", "hugepages-2Mi", "example.com/x"}[rng.IntN(5)])
			list := &n.Status.Capacity
			if rng.IntN(2) == 0 {
				list = &n.Status.Allocatable
			}
			if *list == nil {
				*list = v1.ResourceList{}
			}
			if rng.IntN(3) == 0 {
				delete(*list, name)
			} else {
				(*list)[name] = *resource.NewQuantity(rng.Int64N(100), resource.DecimalSI)
			}
		},
		func(n *v1.Node) { // a label added, changed or removed
			k := []string{"team", "zone", v1.LabelOSStable}[rng.IntN(3)]
			if rng.IntN(3) == 0 {
				delete(n.Labels, k)
			} else {
				if n.Labels == nil {
					n.Labels = map[string]string{}
				}
				n.Labels[k] = fmt.Sprint(rng.IntN(3))
			}
		},
		func(n *v1.Node) { // an address changed (the list is replaced)
			n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", rng.IntN(3))}}
		},
		func(n *v1.Node) { n.Status.Images = n.Status.Images[:rng.IntN(len(n.Status.Images)+1)] },
		func(n *v1.Node) { n.Status.NodeInfo.BootID = fmt.Sprint(rng.IntN(3)) },
		func(n *v1.Node) {
			n.Status.VolumesInUse = n.Status.VolumesInUse[rng.IntN(len(n.Status.VolumesInUse)+1):]
		},
		func(n *v1.Node) { n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(10250 + rng.IntN(2)) },
	}
	cases := make([]smpCase, 0, count)
	for i := range count {
		old := smpBaseNode()
		for range rng.IntN(3) { // the old node is itself a changed one
			mutations[rng.IntN(len(mutations))](old)
		}
		steps := make([]int, 1+rng.IntN(4))
		for j := range steps {
			steps[j] = rng.IntN(len(mutations))
		}
		cases = append(cases, smpCase{fmt.Sprintf("random %d %v", i, steps), old, func(n *v1.Node) {
			for _, s := range steps {
				mutations[s](n)
			}
		}})
	}
	return cases
}

// applyNodePatch applies the strategic merge patch to old and decodes the
// result.
func applyNodePatch(t *testing.T, old *v1.Node, patch []byte) *v1.Node {
	t.Helper()
	oldJSON, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := strategicpatch.StrategicMergePatch(oldJSON, patch, v1.Node{})
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	var n v1.Node
	if err := json.Unmarshal(patched, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// roundTrip is n as the API server would read it back from JSON.
func roundTrip(t *testing.T, n *v1.Node) *v1.Node {
	t.Helper()
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	var out v1.Node
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// repeatedAddressType reports whether n has two addresses of a type.
func repeatedAddressType(n *v1.Node) bool {
	seen := map[v1.NodeAddressType]bool{}
	for _, a := range n.Status.Addresses {
		if seen[a.Type] {
			return true
		}
		seen[a.Type] = true
	}
	return false
}

// nodeJSON is n in JSON, for messages.
func nodeJSON(t *testing.T, n *v1.Node) []byte {
	t.Helper()
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestNodeStatusPatchMatchesStrategicPatch holds nodeStatusPatch to the API
// machinery's strategic merge patch: the same bytes as the implementation
// built on it, and applied to the old Node, the updated Node (spec aside),
// as the two-way patch strategicpatch computes gives it.
func TestNodeStatusPatchMatchesStrategicPatch(t *testing.T) {
	t.Parallel()
	cases := append(smpCases(), smpRandomCases(300)...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			updated := tc.old.DeepCopy()
			tc.change(updated)
			got, err := nodeStatusPatch(tc.old, updated)
			if err != nil {
				t.Fatal(err)
			}
			want, err := strategicNodeStatusPatch(tc.old, updated)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("patch\n got %s\nwant %s", got, want)
			}

			target := updated.DeepCopy()
			target.Spec = tc.old.Spec
			target = roundTrip(t, target)
			result := applyNodePatch(t, tc.old, got)
			if !equality.Semantic.DeepEqual(result, target) {
				t.Errorf("patch %s applied gives\n%s\nwant\n%s", got, nodeJSON(t, result), nodeJSON(t, target))
			}
			if repeatedAddressType(updated) {
				return // the merge by type cannot express it: why the addresses are replaced
			}

			oldJSON, _ := json.Marshal(tc.old)
			targetJSON, _ := json.Marshal(target)
			twoWay, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, targetJSON, v1.Node{})
			if err != nil {
				t.Fatal(err)
			}
			if byTwoWay := applyNodePatch(t, tc.old, twoWay); !equality.Semantic.DeepEqual(result, byTwoWay) {
				t.Errorf("patch %s applied gives\n%s\nstrategicpatch's %s gives\n%s", got, nodeJSON(t, result), twoWay, nodeJSON(t, byTwoWay))
			}
		})
	}
}

// TestNodeStatusPatchFinalizerOrder covers where nodeStatusPatch departs
// from strategicpatch, which compares a set-merged list such as the
// finalizers with the original list sorted: unchanged unsorted finalizers
// give no patch (strategicpatch sets their order again), and finalizers put
// in sorted order give a patch that sets it (strategicpatch gives none, and
// the order stays).
func TestNodeStatusPatchFinalizerOrder(t *testing.T) {
	t.Parallel()
	old := smpBaseNode()
	old.Finalizers = []string{"f/b", "f/a"}
	for _, tc := range []struct {
		name       string
		finalizers []string
		want       string
	}{
		{"unchanged", []string{"f/b", "f/a"}, `{}`},
		{"sorted", []string{"f/a", "f/b"}, `{"metadata":{"$setElementOrder/finalizers":["f/a","f/b"]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			updated := old.DeepCopy()
			updated.Finalizers = tc.finalizers
			got, err := nodeStatusPatch(old, updated)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("patch %s, want %s", got, tc.want)
			}
			if result := applyNodePatch(t, old, got); !slices.Equal(result.Finalizers, tc.finalizers) {
				t.Errorf("finalizers %v, want %v", result.Finalizers, tc.finalizers)
			}
		})
	}
}
