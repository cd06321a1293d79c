package kubenode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
)

// quantities compares resource quantities by value.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// source is a status source whose pressure and capacity the test changes.
type source struct {
	mu       sync.Mutex // guards the fields below
	memory   string
	pressure bool
	calls    int
}

func (s *source) set(f func(s *source)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// status returns the node's status as internal/core/node's Object would: capacity,
// allocatable and the four conditions, stamped with now.
func (s *source) status(now time.Time) (*v1.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	mem := s.memory
	if mem == "" {
		mem = "4Gi"
	}
	st := v1.ConditionFalse
	if s.pressure {
		st = v1.ConditionTrue
	}
	hb := metav1.NewTime(now)
	return &v1.Node{Status: v1.NodeStatus{
		Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse(mem),
			v1.ResourcePods: resource.MustParse("110")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("3Gi"),
			v1.ResourcePods: resource.MustParse("110")},
		Conditions: []v1.NodeCondition{
			{Type: v1.NodeMemoryPressure, Status: st, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: hb},
			{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: hb},
		},
	}}, nil
}

// request is one API request the controller made.
type request struct {
	At                              time.Duration // since the test's start
	Verb, Resource, Subresource, Ns string
}

// recorder records every request to a fake clientset, and can fail them.
type recorder struct {
	start time.Time
	mu    sync.Mutex // guards the fields below
	reqs  []request
	uids  int                           // UIDs given so far
	fail  func(k8stesting.Action) error // nil passes every request
}

func (r *recorder) install(cs *fake.Clientset) {
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if v := a.GetVerb(); (v == "list" || v == "watch") && a.GetResource().Resource == "nodes" {
			return false, nil, nil // the Node's watch (TestWatchesTheNode), not the writes these tests count
		}
		r.reqs = append(r.reqs, request{time.Since(r.start), a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), a.GetNamespace()})
		if r.fail != nil {
			if err := r.fail(a); err != nil {
				return true, nil, err
			}
		}
		// The fake gives created objects no UID; the API server does.
		if c, ok := a.(k8stesting.CreateAction); ok {
			if o, ok := c.GetObject().(metav1.Object); ok && o.GetUID() == "" {
				r.uids++
				o.SetUID(types.UID(fmt.Sprintf("uid-%s-%d", o.GetName(), r.uids)))
			}
		}
		return false, nil, nil
	})
}

func (r *recorder) setFail(f func(k8stesting.Action) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = f
}

// take returns the requests recorded since the last take, without times.
func (r *recorder) take() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	for i := range out {
		out[i].At = 0
	}
	return out
}

func (r *recorder) all() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// harness runs a controller on a fake clientset inside a synctest bubble.
type harness struct {
	cs     *fake.Clientset
	rec    *recorder
	src    *source
	ctrl   *Controller
	events *eventLog
	stop   func()
}

// eventLog is a nodeapi.Recorder keeping "reason: message" lines.
type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *eventLog) Event(_ kruntime.Object, _, reason, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, reason+": "+message)
}

func (l *eventLog) Eventf(o kruntime.Object, typ, reason, format string, args ...any) {
	l.Event(o, typ, reason, fmt.Sprintf(format, args...))
}

func (l *eventLog) AnnotatedEventf(o kruntime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	l.Eventf(o, typ, reason, format, args...)
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

func testConfig() Config {
	return Config{
		NodeName: "n1", NodeIP: "10.0.0.5", Labels: map[string]string{"node-role.kubernetes.io/worker": ""},
		RegisterWithTaints: []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}},
		KubeletPort:        10250, Version: "v1.36.3-nodekeeper",
		SystemInfo: v1.NodeSystemInfo{MachineID: "m", BootID: "b", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)",
			ContainerRuntimeVersion: "containerd://1.6.20"},
	}
}

func start(t *testing.T, cfg Config, objs ...kruntime.Object) *harness {
	t.Helper()
	h := &harness{cs: fake.NewClientset(objs...), rec: &recorder{start: time.Now()}, src: &source{}, events: &eventLog{}}
	h.rec.install(h.cs)
	var err error
	h.ctrl, err = New(cfg, Deps{Client: clientgo.Wrap(h.cs), Status: h.src.status, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Recorder: h.events})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.ctrl.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
	return h
}

func (h *harness) node(t *testing.T) *v1.Node {
	t.Helper()
	n, err := h.cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	return n.(*v1.Node)
}

func (h *harness) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := h.cs.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), v1.NamespaceNodeLease, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return l.(*coordinationv1.Lease)
}

// TestRegister: the controller creates the Node with the kubelet's labels,
// the configured labels and taints, the attach/detach annotation, the
// addresses, daemon endpoint, nodeInfo, capacity, allocatable and
// conditions, then the Lease owned by the Node, renewed every 10 s; it does
// not write the unchanged status again before the report period.
func TestRegister(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, testConfig())
		defer h.stop()
		synctest.Wait()
		t0 := time.Now()
		got := h.node(t)
		want := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1",
				Labels: map[string]string{"kubernetes.io/hostname": "n1", "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
					"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH, "node-role.kubernetes.io/worker": ""},
				Annotations: map[string]string{AttachDetachAnnotation: "true"}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}}},
			Status: v1.NodeStatus{
				Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
					v1.ResourcePods: resource.MustParse("110")},
				Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("3Gi"),
					v1.ResourcePods: resource.MustParse("110")},
				Conditions: []v1.NodeCondition{
					{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory",
						LastHeartbeatTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0)},
					{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
						LastHeartbeatTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0)},
				},
				Addresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "n1"}},
				DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: 10250}},
				NodeInfo: v1.NodeSystemInfo{MachineID: "m", BootID: "b", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)",
					ContainerRuntimeVersion: "containerd://1.6.20", KubeletVersion: "v1.36.3-nodekeeper",
					OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH},
			},
		}
		ignore := cmp.Options{cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "UID", "CreationTimestamp", "ManagedFields"),
			cmpopts.IgnoreFields(v1.Node{}, "TypeMeta")}
		if diff := cmp.Diff(want, got, quantities, ignore); diff != "" {
			t.Errorf("registered Node (-want +got):\n%s", diff)
		}
		noManaged := cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ManagedFields") // the watch's copy keeps none
		if diff := cmp.Diff(got, h.ctrl.Node(), quantities, noManaged); diff != "" {
			t.Errorf("Node() is not the registered Node (-API +Node()):\n%s", diff)
		}
		l := h.lease(t)
		wantLease := coordinationv1.LeaseSpec{HolderIdentity: ptr("n1"), LeaseDurationSeconds: ptr[int32](40),
			RenewTime: &metav1.MicroTime{Time: t0}}
		if diff := cmp.Diff(wantLease, l.Spec); diff != "" {
			t.Errorf("Lease (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: got.UID}}, l.OwnerReferences); diff != "" {
			t.Errorf("Lease owner (-want +got):\n%s", diff)
		}
		want0 := []request{
			{Verb: "create", Resource: "nodes"},
			{Verb: "get", Resource: "leases", Ns: "kube-node-lease"},
			{Verb: "create", Resource: "leases", Ns: "kube-node-lease"},
		}
		if diff := cmp.Diff(want0, h.rec.take()); diff != "" {
			t.Errorf("requests at registration (-want +got):\n%s", diff)
		}
		// A minute of unchanged status: lease updates only, every 10 s
		// (plus the lease controller's jitter of up to 4%).
		time.Sleep(time.Minute)
		synctest.Wait()
		var last time.Duration
		for i, r := range h.rec.all() {
			if r.Verb != "update" || r.Resource != "leases" {
				t.Errorf("request %d: %+v, want only lease updates", i, r)
				continue
			}
			if d := r.At - last; i > 0 && (d < 10*time.Second || d > 10400*time.Millisecond) {
				t.Errorf("lease renewed %v after the previous renewal, want 10 s to 10.4 s", d)
			}
			last = r.At
		}
		if rt := h.lease(t).Spec.RenewTime.Time; time.Since(rt) > 10400*time.Millisecond {
			t.Errorf("lease renewed last at %v, %v ago", rt, time.Since(rt))
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestStatusWrites: a change of the status is written at the next
// computation, a Poke computes it at once, a status that changed only in
// heartbeat times is written when the report period (5 min) has passed.
func TestStatusWrites(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, testConfig())
		defer h.stop()
		synctest.Wait()
		h.rec.take()
		nodePatches := func() []time.Duration {
			var at []time.Duration
			for _, r := range h.rec.all() {
				if r.Resource == "nodes" {
					if r.Verb != "patch" || r.Subresource != "status" {
						t.Errorf("node request %+v, want status patches only", r)
					}
					at = append(at, r.At.Truncate(time.Second))
				}
			}
			return at
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if got := nodePatches(); len(got) != 0 {
			t.Errorf("status written at %v with only heartbeats changed", got)
		}
		// Memory pressure at 25 s: written at the next computation, 30 s.
		h.src.set(func(s *source) { s.pressure = true })
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{30 * time.Second}, nodePatches()); diff != "" {
			t.Errorf("status writes after the change (-want +got):\n%s", diff)
		}
		c := h.node(t).Status.Conditions[0]
		if c.Status != v1.ConditionTrue || c.LastTransitionTime.Time.Sub(h.rec.start) != 30*time.Second {
			t.Errorf("MemoryPressure after the change: %+v", c)
		}
		// A Poke at 31 s after a capacity change writes at once.
		h.src.set(func(s *source) { s.memory = "8Gi" })
		h.ctrl.Poke()
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{31 * time.Second}, nodePatches()); diff != "" {
			t.Errorf("status writes after the poke (-want +got):\n%s", diff)
		}
		if m := h.node(t).Status.Capacity[v1.ResourceMemory]; m.Cmp(resource.MustParse("8Gi")) != 0 {
			t.Errorf("memory capacity after the poke = %v, want 8Gi", &m)
		}
		// Nothing changes again: the next write is the report, 5 min after
		// the last write (the computations are at 40 s, 50 s, ...).
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{340 * time.Second}, nodePatches()); diff != "" {
			t.Errorf("status writes with heartbeats only (-want +got):\n%s", diff)
		}
		n := h.node(t)
		if c := n.Status.Conditions[0]; c.LastTransitionTime.Time.Sub(h.rec.start) != 30*time.Second ||
			c.LastHeartbeatTime.Time.Sub(h.rec.start) != 340*time.Second {
			t.Errorf("MemoryPressure after the report: transition %v, heartbeat %v; want 30s, 340s",
				c.LastTransitionTime.Time.Sub(h.rec.start), c.LastHeartbeatTime.Time.Sub(h.rec.start))
		}
	})
}

// TestAdopt: a Node already registered is adopted: its default labels and
// the attach/detach annotation are set, a hugepage size the host no longer
// has is removed, an operator's extended resource, other labels, taints and
// conditions are kept, a condition whose status did not change keeps its
// transition time, and the status is written at once.
func TestAdopt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		old := metav1.NewTime(time.Now().Add(-time.Hour))
		existing := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1",
				Labels: map[string]string{"kubernetes.io/hostname": "old", "team": "a"}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: v1.TaintEffectNoSchedule}}},
			Status: v1.NodeStatus{
				Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), "hugepages-1Gi": resource.MustParse("2Gi"),
					"example.com/dongle": resource.MustParse("3")},
				Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), "hugepages-1Gi": resource.MustParse("2Gi"),
					"example.com/dongle": resource.MustParse("3")},
				Conditions: []v1.NodeCondition{
					{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
						LastHeartbeatTime: old, LastTransitionTime: old},
					{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue, Reason: "KubeletHasInsufficientMemory",
						LastHeartbeatTime: old, LastTransitionTime: old},
					{Type: "NetworkUnavailable", Status: v1.ConditionFalse, Reason: "RouteCreated", LastHeartbeatTime: old, LastTransitionTime: old},
				},
			},
		}
		h := start(t, testConfig(), existing)
		defer h.stop()
		synctest.Wait()
		now := time.Now()
		got := h.node(t)
		wantLabels := map[string]string{"kubernetes.io/hostname": "n1", "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
			"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH, "team": "a"}
		if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(existing.Spec, got.Spec); diff != "" {
			t.Errorf("spec (-want +got):\n%s", diff)
		}
		if got.Annotations[AttachDetachAnnotation] != "true" {
			t.Errorf("annotations %v, want the attach/detach one", got.Annotations)
		}
		wantCap := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
			v1.ResourcePods: resource.MustParse("110"), "example.com/dongle": resource.MustParse("3")}
		if diff := cmp.Diff(wantCap, got.Status.Capacity, quantities); diff != "" {
			t.Errorf("capacity (-want +got):\n%s", diff)
		}
		wantConds := []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
				LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: old},
			{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory",
				LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)},
			{Type: "NetworkUnavailable", Status: v1.ConditionFalse, Reason: "RouteCreated", LastHeartbeatTime: old, LastTransitionTime: old},
		}
		if diff := cmp.Diff(wantConds, got.Status.Conditions); diff != "" {
			t.Errorf("conditions (-want +got):\n%s", diff)
		}
		want := []request{
			{Verb: "create", Resource: "nodes"},
			{Verb: "get", Resource: "nodes"},
			{Verb: "patch", Resource: "nodes", Subresource: "status"}, // adoption
			{Verb: "patch", Resource: "nodes", Subresource: "status"}, // the status, at once
			{Verb: "get", Resource: "leases", Ns: "kube-node-lease"},
			{Verb: "create", Resource: "leases", Ns: "kube-node-lease"},
		}
		if diff := cmp.Diff(want, h.rec.take(), cmpopts.SortSlices(func(a, b request) bool { return a.Resource < b.Resource })); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if l := h.lease(t); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-1" {
			t.Errorf("lease owners %+v, want the existing Node uid-1", l.OwnerReferences)
		}
	})
}

// TestRetryWhileServerErrors: while the API server refuses, registration is
// retried with back-off from 100 ms doubling to 7 s, Run does not return,
// and once the server answers the Node and Lease appear.
func TestRetryWhileServerErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		down := errors.New("connect: connection refused")
		cs := fake.NewClientset()
		rec := &recorder{start: time.Now(), fail: func(k8stesting.Action) error { return down }}
		rec.install(cs)
		c, err := New(testConfig(), Deps{Client: clientgo.Wrap(cs), Status: (&source{}).status, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		var at []time.Duration
		for _, r := range rec.all() {
			at = append(at, r.At)
		}
		ms := time.Millisecond
		want := []time.Duration{0, 100 * ms, 300 * ms, 700 * ms, 1500 * ms, 3100 * ms, 6300 * ms, 12700 * ms, 19700 * ms, 26700 * ms}
		if diff := cmp.Diff(want, at); diff != "" {
			t.Errorf("registration attempts (-want +got):\n%s", diff)
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v while the server was down", err)
		default:
		}
		rec.setFail(nil)
		time.Sleep(7 * time.Second)
		synctest.Wait()
		if _, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
			t.Errorf("Node after the server came back: %v", err)
		}
		if _, err := cs.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{}); err != nil {
			t.Errorf("Lease after the server came back: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// TestReregisterAfterDelete: a Node deleted from the API server is
// registered again at the next status computation, and the status writes
// survive a server that fails for a while.
func TestReregisterAfterDelete(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, testConfig())
		defer h.stop()
		synctest.Wait()
		first := h.node(t).UID
		// The server fails every node request for 30 s: the status is
		// retried at each computation, never given up.
		h.rec.setFail(func(a k8stesting.Action) error {
			if a.GetResource().Resource == "nodes" {
				return apierrors.NewServiceUnavailable("etcd is down")
			}
			return nil
		})
		h.src.set(func(s *source) { s.pressure = true })
		time.Sleep(30 * time.Second)
		synctest.Wait()
		h.rec.setFail(nil)
		if err := h.cs.CoreV1().Nodes().Delete(t.Context(), "n1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		n := h.node(t)
		if n.Status.Conditions[0].Status != v1.ConditionTrue {
			t.Errorf("MemoryPressure after re-registration: %+v", n.Status.Conditions[0])
		}
		if n.UID == first && first != "" {
			t.Errorf("Node UID %q unchanged: not registered again", n.UID)
		}
	})
}

// TestNewRejects: bad configuration is refused with the field and value.
func TestNewRejects(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	src := (&source{}).status
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		deps Deps
		want string
	}{
		{"no client", func(*Config) {}, Deps{Status: src}, "kubenode: Client and Status are required"},
		{"bad name", func(c *Config) { c.NodeName = "N_1" }, Deps{Client: clientgo.Wrap(cs), Status: src}, `kubenode: node name "N_1": `},
		{"bad ip", func(c *Config) { c.NodeIP = "10.0.0" }, Deps{Client: clientgo.Wrap(cs), Status: src}, `kubenode: node IP "10.0.0" is not an IP address`},
		{"loopback ip", func(c *Config) { c.NodeIP = "127.0.0.1" }, Deps{Client: clientgo.Wrap(cs), Status: src},
			`kubenode: node IP "127.0.0.1": a loopback address, which a node may not report`},
		{"bad label", func(c *Config) { c.Labels = map[string]string{"a": "b c"} }, Deps{Client: clientgo.Wrap(cs), Status: src}, `kubenode: node label "a" value "b c": `},
		{"bad taint", func(c *Config) { c.RegisterWithTaints = []v1.Taint{{Key: "k", Effect: "Never"}} }, Deps{Client: clientgo.Wrap(cs), Status: src},
			`kubenode: registerWithTaints[0].effect "Never": not NoSchedule, PreferNoSchedule or NoExecute`},
		{"negative frequency", func(c *Config) { c.StatusUpdateFrequency = -time.Second }, Deps{Client: clientgo.Wrap(cs), Status: src},
			"kubenode: nodeStatusUpdateFrequency -1s: negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			tc.cfg(&cfg)
			_, err := New(cfg, tc.deps)
			if err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
				t.Errorf("New = %v, want %q...", err, tc.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestForbiddenRegistrationLogged: when NodeRestriction refuses the Node (a
// label a node may not set) and no Node exists, the log names the refusal,
// not only the Node's absence.
func TestForbiddenRegistrationLogged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset()
		forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1",
			errors.New(`node "n1" is not allowed to set the following labels: node-role.kubernetes.io/worker`))
		rec := &recorder{start: time.Now(), fail: func(a k8stesting.Action) error {
			if a.GetVerb() == "create" {
				return forbidden
			}
			return nil
		}}
		rec.install(cs)
		var logs syncBuffer
		c, err := New(testConfig(), Deps{Client: clientgo.Wrap(cs), Status: (&source{}).status, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		synctest.Wait()
		cancel()
		<-done
		if !strings.Contains(logs.String(), "is not allowed to set the following labels: node-role.kubernetes.io/worker") {
			t.Errorf("log does not say why the Node was refused:\n%s", logs.String())
		}
	})
}

// TestNodeEvents: Starting when Run starts, an event per condition at
// registration, then one per condition whose status a write changed, with
// the kubelet's reasons and message.
func TestNodeEvents(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, testConfig())
		defer h.stop()
		synctest.Wait()
		want := []string{"Starting: Starting kubelet.",
			"NodeHasSufficientMemory: Node n1 status is now: NodeHasSufficientMemory",
			"NodeReady: Node n1 status is now: NodeReady"}
		if diff := cmp.Diff(want, h.events.take()); diff != "" {
			t.Errorf("events at registration (-want +got):\n%s", diff)
		}
		time.Sleep(30 * time.Second) // heartbeats only: no event
		synctest.Wait()
		if got := h.events.take(); len(got) != 0 {
			t.Errorf("events without a change: %q", got)
		}
		h.src.set(func(s *source) { s.pressure = true })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"NodeHasInsufficientMemory: Node n1 status is now: NodeHasInsufficientMemory"}, h.events.take()); diff != "" {
			t.Errorf("events after memory pressure (-want +got):\n%s", diff)
		}
	})
}

// TestWatchesTheNode: a label another client puts on the Node reaches
// Node() through the controller's watch of its Node, without a status write
// of its own (admission's node-affinity check reads Node(): the upstream
// spec "should force-delete non-admissible pods that was admitted and
// running before kubelet restart" labels the node and at once creates a pod
// that selects the label). An older version than the one held is not taken.
func TestWatchesTheNode(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, testConfig())
		defer h.stop()
		synctest.Wait()
		h.rec.take()
		n := h.node(t).DeepCopy()
		n.Labels["custom-label-key-required"] = "yes"
		if _, err := h.cs.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := h.ctrl.Node().Labels["custom-label-key-required"]; got != "yes" {
			t.Errorf("Node()'s label %q, want the one another client set", got)
		}
		for _, r := range h.rec.take() {
			if r.Verb != "update" || r.Resource != "nodes" { // the test's own
				t.Errorf("the controller made %+v: the label must come through the watch alone", r)
			}
		}
	})
}

func TestOlderVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"5", "7", true}, {"7", "5", false}, {"7", "7", false}, {"", "7", false}, {"x", "7", false},
	} {
		if got := olderVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("olderVersion(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
