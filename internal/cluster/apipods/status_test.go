package apipods

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
)

// newTestSyncer returns a syncer over a fake clientset holding objs (plus
// the Node), with objs in its cache too, and its status loop state.
func newTestSyncer(t *testing.T, ag *fakeAgent, objs ...*v1.Pod) (*Syncer, *fake.Clientset, *statusState) {
	t.Helper()
	ros := []runtime.Object{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}}}
	for _, o := range objs {
		ros = append(ros, o.DeepCopy())
	}
	client := fake.NewClientset(ros...)
	log, _ := testLogger(t)
	s, err := New(Config{NodeName: node}, Deps{Client: clientgo.Wrap(client), Agent: ag, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := s.informer.GetIndexer().Add(o.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	return s, client, newStatusState()
}

// actions names the client's calls: "verb resource[/subresource] ns/name".
func actions(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		name := ""
		switch a := a.(type) {
		case k8stesting.GetAction:
			name = a.GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		case k8stesting.CreateAction:
			name = a.GetObject().(metav1.Object).GetName()
		case k8stesting.UpdateAction:
			name = a.GetObject().(metav1.Object).GetName()
		}
		if ns := a.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		out = append(out, fmt.Sprintf("%s %s %s", a.GetVerb(), res, name))
	}
	return out
}

func deleting(p *v1.Pod) *v1.Pod {
	c := p.DeepCopy()
	c.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)}
	c.DeletionGracePeriodSeconds = ptr.To[int64](30)
	return c
}

// TestPass: which writes one status pass makes for which table and cache.
func TestPass(t *testing.T) {
	t.Parallel()
	web := apiPod("web", "u1")
	rejected := v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu", Message: "Pod was rejected: Node didn't have enough resource: cpu", QOSClass: v1.PodQOSBestEffort}
	for _, tc := range []struct {
		name    string
		cached  []*v1.Pod
		pods    []*v1.Pod
		setup   func(a *fakeAgent, st *statusState)
		full    bool
		want    []string
		wantObj map[string]v1.PodStatus // ns/name: the status the object holds after
	}{
		{
			name: "changed status is written", cached: []*v1.Pod{web}, pods: []*v1.Pod{withStatus(web, running())},
			want: []string{"update pods/status default/web"},
		},
		{
			name: "unchanged status is not written", cached: []*v1.Pod{func() *v1.Pod { p := web.DeepCopy(); p.Status = normalize(running()); return p }()},
			pods: []*v1.Pod{withStatus(web, running())},
		},
		{
			name: "prompt pass skips a status written before", cached: []*v1.Pod{web}, pods: []*v1.Pod{withStatus(web, running())},
			setup: func(_ *fakeAgent, st *statusState) {
				st.written["u1"] = mergeStatus(web.Status, normalize(running()), nil)
			},
		},
		{
			name: "full pass rewrites it when the server differs", cached: []*v1.Pod{web}, pods: []*v1.Pod{withStatus(web, running())}, full: true,
			setup: func(_ *fakeAgent, st *statusState) {
				st.written["u1"] = mergeStatus(web.Status, normalize(running()), nil)
			},
			want: []string{"update pods/status default/web"},
		},
		{
			name: "admission rejection is written", cached: []*v1.Pod{web}, pods: []*v1.Pod{withStatus(web, rejected)},
			want: []string{"update pods/status default/web"}, wantObj: map[string]v1.PodStatus{"default/web": rejected},
		},
		{
			name: "a local pod (not in the cache) is left alone", pods: []*v1.Pod{withStatus(web, running())},
		},
		{
			name: "a pod of the same name but another UID is left alone", cached: []*v1.Pod{apiPod("web", "other")},
			pods: []*v1.Pod{withStatus(web, running())},
		},
		{
			name:   "deleted pod, stopped and cleaned up: final status, then deleted",
			cached: []*v1.Pod{deleting(web)}, pods: []*v1.Pod{withStatus(deleting(web), rejected)},
			setup: func(a *fakeAgent, _ *statusState) { a.terminated["u1"], a.cleaned["u1"] = true, true },
			want:  []string{"update pods/status default/web", "delete pods default/web"},
		},
		{
			name:   "deleted pod still stopping: status only",
			cached: []*v1.Pod{deleting(web)}, pods: []*v1.Pod{withStatus(deleting(web), running())},
			setup: func(a *fakeAgent, _ *statusState) { a.terminated["u1"] = true },
			want:  []string{"update pods/status default/web"},
		},
		{
			name: "static pod without a mirror: the mirror is created",
			pods: []*v1.Pod{staticPod("etcd-node1", "h1", running())},
			want: []string{"get nodes node1", "create pods kube-system/etcd-node1"},
		},
		{
			name:   "static pod with its mirror: status to the mirror",
			cached: []*v1.Pod{mirror("etcd-node1", "m1", "h1")}, pods: []*v1.Pod{staticPod("etcd-node1", "h1", running())},
			want: []string{"update pods/status kube-system/etcd-node1"},
		},
		{
			name:   "mirror of another hash is deleted once its static pod stopped",
			cached: []*v1.Pod{mirror("etcd-node1", "m1", "old")}, pods: []*v1.Pod{staticPod("etcd-node1", "h1", running())},
			setup: func(a *fakeAgent, _ *statusState) { a.terminated["old"] = true },
			want:  []string{"delete pods kube-system/etcd-node1"},
		},
		{
			// A changed manifest: the old static pod's mirror stays through
			// its grace period.
			name:   "mirror of a replaced static pod that still stops is kept",
			cached: []*v1.Pod{mirror("etcd-node1", "m1", "old")}, pods: []*v1.Pod{staticPod("etcd-node1", "h1", running())},
		},
		{
			name:   "mirror being deleted is deleted at once",
			cached: []*v1.Pod{deleting(mirror("etcd-node1", "m1", "h1"))}, pods: []*v1.Pod{staticPod("etcd-node1", "h1", running())},
			want: []string{"delete pods kube-system/etcd-node1"},
		},
		{
			name:   "mirror whose static pod is gone is deleted",
			cached: []*v1.Pod{mirror("etcd-node1", "m1", "h1")},
			setup:  func(a *fakeAgent, _ *statusState) { a.deleted["h1"], a.terminated["h1"] = true, true },
			want:   []string{"delete pods kube-system/etcd-node1"},
		},
		{
			// As the kubelet: the mirror pod stays, with the pod's status,
			// through the static pod's grace period.
			name:   "mirror kept while its removed static pod stops",
			cached: []*v1.Pod{mirror("etcd-node1", "m1", "h1")},
			pods:   []*v1.Pod{staticPod("etcd-node1", "h1", running())},
			setup:  func(a *fakeAgent, _ *statusState) { a.deleted["h1"] = true },
			want:   []string{"update pods/status kube-system/etcd-node1"},
		},
		{
			name:  "no new mirror for a removed static pod that stops",
			pods:  []*v1.Pod{staticPod("etcd-node1", "h1", running())},
			setup: func(a *fakeAgent, _ *statusState) { a.deleted["h1"] = true },
		},
		{
			name:   "mirror kept while the agent does not know its static pod yet",
			cached: []*v1.Pod{mirror("etcd-node1", "m1", "h1")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ag := newFakeAgent()
			ag.pods = tc.pods
			s, client, st := newTestSyncer(t, ag, tc.cached...)
			if tc.setup != nil {
				tc.setup(ag, st)
			}
			s.pass(t.Context(), st, tc.full)
			if diff := cmp.Diff(tc.want, actions(client)); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			for key, want := range tc.wantObj {
				ns, name, _ := strings.Cut(key, "/")
				got, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got.Status); diff != "" {
					t.Errorf("%s status (-want +got):\n%s", key, diff)
				}
			}
		})
	}
}

// TestPassWritesStatusAndDeletesWithPreconditions checks the objects the
// calls carry: the status written, the delete's grace 0 and UID
// precondition, the mirror pod's owner reference and annotations.
func TestPassWritesStatusAndDeletesWithPreconditions(t *testing.T) {
	t.Parallel()
	ag := newFakeAgent()
	web := deleting(apiPod("web", "u1"))
	web.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue}}
	ag.pods = []*v1.Pod{withStatus(web, running()), staticPod("etcd-node1", "h1", running())}
	ag.terminated["u1"], ag.cleaned["u1"] = true, true
	s, client, st := newTestSyncer(t, ag, web)
	s.pass(t.Context(), st, false)

	var gotStatus *v1.PodStatus
	var del *metav1.DeleteOptions
	var created *v1.Pod
	for _, a := range client.Actions() {
		switch a.GetVerb() {
		case "update":
			gotStatus = &a.(k8stesting.UpdateAction).GetObject().(*v1.Pod).Status
		case "delete":
			o := a.(k8stesting.DeleteAction).GetDeleteOptions()
			del = &o
		case "create":
			created = a.(k8stesting.CreateAction).GetObject().(*v1.Pod)
		}
	}
	want := normalize(running())
	want.Conditions = append(want.Conditions, v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue})
	if gotStatus == nil {
		t.Fatal("no status update")
	}
	if diff := cmp.Diff(want, *gotStatus); diff != "" {
		t.Errorf("status written (-want +got):\n%s", diff)
	}
	wantDel := &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: ptr.To[types.UID]("u1")}}
	if diff := cmp.Diff(wantDel, del); diff != "" {
		t.Errorf("delete options (-want +got):\n%s", diff)
	}
	if created == nil {
		t.Fatal("no mirror pod created")
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: "node-uid", Controller: ptr.To(true)}}
	if diff := cmp.Diff(wantOwner, created.OwnerReferences); diff != "" {
		t.Errorf("mirror owner (-want +got):\n%s", diff)
	}
	wantAnn := map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "h1", "kubernetes.io/config.mirror": "h1"}
	if diff := cmp.Diff(wantAnn, created.Annotations); diff != "" {
		t.Errorf("mirror annotations (-want +got):\n%s", diff)
	}
	if created.UID != "" || created.Spec.NodeName != node || created.Labels["tier"] != "control" {
		t.Errorf("mirror pod: uid %q, node %q, labels %v", created.UID, created.Spec.NodeName, created.Labels)
	}
	// A second pass deletes nothing again.
	client.ClearActions()
	s.pass(t.Context(), st, false)
	for _, a := range actions(client) {
		if strings.HasPrefix(a, "delete") {
			t.Errorf("second pass: %s", a)
		}
	}
}

// TestStatusConflictIsRetried: a conflict re-reads the pod and writes the
// status over the fresh object.
func TestStatusConflictIsRetried(t *testing.T) {
	t.Parallel()
	ag := newFakeAgent()
	web := apiPod("web", "u1")
	ag.pods = []*v1.Pod{withStatus(web, running())}
	s, client, st := newTestSyncer(t, ag, web)
	// Someone else added a condition meanwhile; the first write conflicts.
	fresh := web.DeepCopy()
	fresh.ResourceVersion = "2"
	fresh.Status.Conditions = []v1.PodCondition{{Type: "example.com/gate", Status: v1.ConditionTrue}}
	if _, err := client.CoreV1().Pods("default").UpdateStatus(t.Context(), fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	conflicts := 1
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(v1.Resource("pods"), "web", fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	s.pass(t.Context(), st, false)
	if diff := cmp.Diff([]string{"update pods/status default/web", "get pods default/web", "update pods/status default/web"}, actions(client)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	got, err := client.CoreV1().Pods("default").Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := normalize(running())
	want.Conditions = append(want.Conditions, v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionTrue})
	if diff := cmp.Diff(want, got.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestMergeStatus(t *testing.T) {
	t.Parallel()
	sched := v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue}
	ready := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue}
	notReady := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse}
	target := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "EvictionByEvictionAPI"}
	for _, tc := range []struct {
		name         string
		server, ours v1.PodStatus
		gates        []v1.PodReadinessGate
		want         v1.PodStatus
	}{
		{
			name:   "ours over the server's, foreign conditions and fields kept",
			server: v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{sched, notReady}, NominatedNodeName: "n", QOSClass: v1.PodQOSBurstable},
			ours:   v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{ready}, PodIP: "10.0.0.2", QOSClass: v1.PodQOSBurstable},
			want:   v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{ready, sched}, PodIP: "10.0.0.2", NominatedNodeName: "n", QOSClass: v1.PodQOSBurstable},
		},
		{
			name:   "a condition the agent sets replaces the server's",
			server: v1.PodStatus{Conditions: []v1.PodCondition{target}},
			ours:   v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"}}},
			want:   v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"}}},
		},
		{
			name:   "a controller's DisruptionTarget stays",
			server: v1.PodStatus{Conditions: []v1.PodCondition{target}},
			ours:   v1.PodStatus{Phase: v1.PodRunning},
			want:   v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{target}},
		},
		{
			name:   "a terminal phase on the server stays",
			server: v1.PodStatus{Phase: v1.PodFailed},
			ours:   v1.PodStatus{Phase: v1.PodRunning},
			want:   v1.PodStatus{Phase: v1.PodFailed},
		},
		{
			name:   "readiness gates: one missing, one False: not Ready",
			server: v1.PodStatus{Conditions: []v1.PodCondition{{Type: "example.com/b", Status: v1.ConditionFalse}}},
			ours:   v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{ready}},
			gates:  []v1.PodReadinessGate{{ConditionType: "example.com/a"}, {ConditionType: "example.com/b"}},
			want: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{
				{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ReadinessGatesNotReady",
					Message: `corresponding condition of pod readiness gate "example.com/a" does not exist., the status of pod readiness gate "example.com/b" is not "True", but False`},
				{Type: "example.com/b", Status: v1.ConditionFalse}}},
		},
		{
			name:   "readiness gates all True: Ready",
			server: v1.PodStatus{Conditions: []v1.PodCondition{{Type: "example.com/a", Status: v1.ConditionTrue}}},
			ours:   v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{ready}},
			gates:  []v1.PodReadinessGate{{ConditionType: "example.com/a"}},
			want:   v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{ready, {Type: "example.com/a", Status: v1.ConditionTrue}}},
		},
		{
			name:   "the server's QoS class stays",
			server: v1.PodStatus{QOSClass: v1.PodQOSGuaranteed},
			ours:   v1.PodStatus{QOSClass: v1.PodQOSBurstable},
			want:   v1.PodStatus{QOSClass: v1.PodQOSGuaranteed},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, mergeStatus(tc.server, tc.ours, tc.gates)); diff != "" {
				t.Errorf("mergeStatus (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteFailureLoggedOnce: a failing status write is retried every pass
// but logged once until it succeeds; a later failure is logged again.
func TestWriteFailureLoggedOnce(t *testing.T) {
	t.Parallel()
	ag := newFakeAgent()
	web := apiPod("web", "u1")
	ag.pods = []*v1.Pod{withStatus(web, running())}
	s, client, st := newTestSyncer(t, ag, web)
	log, logs := testLogger(t)
	s.log = log
	failing := true
	client.PrependReactor("update", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	count := func() int { return strings.Count(logs.String(), "Writing pod status failed") }
	for range 3 {
		s.pass(t.Context(), st, true)
	}
	if got := count(); got != 1 {
		t.Errorf("logged %d times in an outage, want 1", got)
	}
	failing = false
	s.pass(t.Context(), st, true)
	failing = true
	ag.setPods(withStatus(web, v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted"}))
	s.pass(t.Context(), st, true)
	if got := count(); got != 2 {
		t.Errorf("logged %d times after a new outage, want 2", got)
	}
	if n := len(actions(client)); n != 5 {
		t.Errorf("%d calls, want 5 (each pass tries)", n)
	}
}
