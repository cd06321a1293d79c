package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

func TestRuntimeChanged(t *testing.T) {
	t.Parallel()
	sb := func(id string, s runtimeapi.PodSandboxState) *runtimeapi.PodSandboxStatus {
		return &runtimeapi.PodSandboxStatus{Id: id, State: s}
	}
	ctr := func(id string, s runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: id, State: s, StartedAt: time.Now().UnixNano()}
	}
	ready, notReady := runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	running, exited := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	base := func() *podruntime.PodStatus {
		return &podruntime.PodStatus{UID: "u", Sandboxes: []*runtimeapi.PodSandboxStatus{sb("s1", ready)},
			Containers: []*runtimeapi.ContainerStatus{ctr("c1", running)}, IPs: []string{"10.0.0.2"}}
	}
	with := func(f func(*podruntime.PodStatus)) *podruntime.PodStatus { s := base(); f(s); return s }
	for _, tc := range []struct {
		name string
		a, b *podruntime.PodStatus
		want bool
	}{
		{"both none", nil, nil, false},
		{"appeared", nil, base(), true},
		{"went", base(), nil, true},
		{"same (timestamps aside)", base(), base(), false},
		{"sandbox state", base(), with(func(s *podruntime.PodStatus) { s.Sandboxes[0].State = notReady }), true},
		{"new sandbox", base(), with(func(s *podruntime.PodStatus) {
			s.Sandboxes = append([]*runtimeapi.PodSandboxStatus{sb("s2", ready)}, s.Sandboxes...)
		}), true},
		{"container exited", base(), with(func(s *podruntime.PodStatus) { s.Containers[0].State = exited }), true},
		{"container restarted", base(), with(func(s *podruntime.PodStatus) {
			s.Containers = append([]*runtimeapi.ContainerStatus{ctr("c2", running)}, s.Containers...)
		}), true},
		{"IP", base(), with(func(s *podruntime.PodStatus) { s.IPs = []string{"10.0.0.3"} }), true},
		{"reason of an exited container (Error, then OOMKilled)", with(func(s *podruntime.PodStatus) {
			s.Containers[0].State, s.Containers[0].ExitCode, s.Containers[0].Reason = exited, 137, "Error"
		}), with(func(s *podruntime.PodStatus) {
			s.Containers[0].State, s.Containers[0].ExitCode, s.Containers[0].Reason = exited, 137, "OOMKilled"
		}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := runtimeChanged(tc.a, tc.b); got != tc.want {
				t.Errorf("runtimeChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, rt := newMem()
	ok := Deps{Table: newTable(t), Runtime: rt, Admit: admitFunc(admitAll)}
	owned := newTable(t)
	if _, err := New(Config{}, Deps{Table: owned, Runtime: rt, Admit: ok.Admit}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		deps Deps
		want string
	}{
		{"no table", Config{}, Deps{Runtime: rt, Admit: ok.Admit}, "Table, Runtime and Admit are required"},
		{"no runtime", Config{}, Deps{Table: ok.Table, Admit: ok.Admit}, "Table, Runtime and Admit are required"},
		{"no admission", Config{}, Deps{Table: ok.Table, Runtime: rt}, "Table, Runtime and Admit are required"},
		{"negative relist", Config{RelistPeriod: -time.Second}, ok, "RelistPeriod -1s is negative"},
		{"negative resync", Config{ResyncPeriod: -time.Second}, ok, "ResyncPeriod -1s is negative"},
		{"a table with a loop already", Config{}, Deps{Table: owned, Runtime: rt, Admit: ok.Admit}, "the table has a sync loop already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.cfg, tc.deps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestNewTableRejectsBadSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sources []string
		want    string
	}{
		{"repeated source", []string{"file", "file"}, `source "file" is empty or repeated`},
		{"empty source", []string{""}, `source "" is empty or repeated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewTable(tc.sources)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewTable = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestSetPodsRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, rt := newMem()
	a := newTestAgent(t, Config{}, Deps{Runtime: rt})
	p := testPod("web", "u1", 0)
	noUID := testPod("anon", "", 0)
	for _, tc := range []struct {
		name   string
		source string
		pods   []*v1.Pod
		want   string
	}{
		{"unknown source", "api", nil, `agent: unknown pod source "api"`},
		{"no UID", "file", []*v1.Pod{p, noUID}, `agent: source "file": pod 1 has no UID`},
		{"nil pod", "file", []*v1.Pod{nil}, `agent: source "file": pod 0 has no UID`},
		{"repeated UID", "file", []*v1.Pod{p, p}, `agent: source "file": pod default/web: UID "u1" repeated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := a.SetPods(t.Context(), tc.source, tc.pods)
			if err == nil || err.Error() != tc.want {
				t.Errorf("SetPods = %v, want %q", err, tc.want)
			}
		})
	}
	if errors.Is(a.SetPods(t.Context(), "api", nil), ErrUnknownSource) != true {
		t.Errorf("unknown source is not ErrUnknownSource")
	}
	if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: &v1.Pod{}}); err == nil {
		t.Errorf("KillPod without a UID: no error")
	}
}

func TestKillPodOfUnknownPodReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "nope"}}
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: pod}); err != nil {
			t.Errorf("KillPod of an unknown pod: %v", err)
		}
	})
}

func TestRejectedAdoptedPodIsStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		mem.put("u1", "default", "web", "c")
		reject := admitFunc(func(context.Context, *v1.Pod) admission.Response {
			return admission.Response{Reason: "Evicted", Message: "The node had condition: [MemoryPressure]."}
		})
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: reject})
		stop := start(t, a)
		defer stop()
		time.Sleep(1500 * time.Millisecond)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if diff := cmp.Diff([]string{"kill default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if len(a.ActivePods()) != 0 || !a.IsPodTerminated("u1") || phases(a.Pods())["default/web"] != v1.PodFailed {
			t.Errorf("rejected pod: active %d, terminated %v", len(a.ActivePods()), a.IsPodTerminated("u1"))
		}
	})
}

func TestPodGivenAgainWhileRemovedStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var seen []*podruntime.PodStatus
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			seen = append(seen, st)
			return sync(ctx, pod, st)
		}
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			time.Sleep(2 * time.Second)
			return kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		for _, set := range [][]*v1.Pod{{p}, nil, {p}} {
			if err := a.SetPods(t.Context(), "file", set); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2500 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want := []string{"sync default/web", "kill default/web", "remove default/web", "sync default/web"}
		if diff := cmp.Diff(want, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if mem.creates != 2 || len(seen) != 2 || seen[1] != nil {
			t.Errorf("given again: %d sandboxes created, syncs saw %v; want 2, the second with no status", mem.creates, seen)
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/web": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active (-want +got):\n%s", diff)
		}
	})
}

// TestPodGivenBackWhileStoppingRestartsInPlace: a removed pod given back by
// its source before it has stopped (a static pod's manifest deleted and
// written again) is stopped, not removed, then started again on its own
// runtime state, so its restart counts go on (node e2e: "MirrorPod ... should
// successfully recreate when file is removed and recreated").
func TestPodGivenBackWhileStoppingRestartsInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var seen []*podruntime.PodStatus
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			seen = append(seen, st)
			return sync(ctx, pod, st)
		}
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			time.Sleep(2 * time.Second)
			return kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		for _, set := range [][]*v1.Pod{{p}, nil, {p}} {
			if err := a.SetPods(t.Context(), "file", set); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		calls := mem.callLog()
		k := slices.Index(calls, "kill default/web")
		if k < 0 || slices.Index(calls[k+1:], "kill default/web") >= 0 || !slices.Contains(calls[k+1:], "sync default/web") {
			t.Errorf("calls = %q, want syncs, one kill, then syncs again", calls)
		}
		if mem.creates != 2 {
			t.Errorf("%d sandboxes created, want 2 (the first, and one after the kill)", mem.creates)
		}
		if slices.Contains(calls, "remove default/web") {
			t.Errorf("calls = %q: the pod given back was removed from the runtime", calls)
		}
		if last := seen[len(seen)-1]; last == nil {
			t.Error("the syncs after the pod came back saw no runtime state of it")
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/web": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active (-want +got):\n%s", diff)
		}
	})
}

func TestHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		down := make(chan struct{})
		rt.statusesF = func(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error) {
			select {
			case <-down:
				return nil, errors.New("runtime down")
			default:
				return mem.statuses(ctx)
			}
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		if err := a.Healthy(); err == nil {
			t.Errorf("healthy before any relist")
		}
		stop := start(t, a)
		defer stop()
		synctest.Wait()
		if err := a.Healthy(); err != nil {
			t.Errorf("after a relist: %v", err)
		}
		close(down)
		time.Sleep(RelistThreshold)
		synctest.Wait()
		if err := a.Healthy(); err != nil {
			t.Errorf("at the threshold: %v", err)
		}
		time.Sleep(time.Second)
		if err := a.Healthy(); err == nil || !strings.Contains(err.Error(), "last listed 3m1s ago") {
			t.Errorf("past the threshold: %v", err)
		}
	})
}

func TestKillCancelsSyncInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			mem.log("sync " + podName(pod))
			<-ctx.Done() // an image pull that takes forever
			mem.log("sync cancelled")
			return podruntime.Result{Err: ctx.Err()}
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: p, Status: v1.PodStatus{Phase: v1.PodFailed}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// Nothing ran: the kill has no runtime status to stop.
		if diff := cmp.Diff([]string{"sync default/web", "sync cancelled"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if !a.IsPodTerminated("u1") {
			t.Errorf("not terminated")
		}
	})
}

// TestActiveDeadlineStopsPod: a pod is stopped when it has been active for
// its activeDeadlineSeconds since its start time, not before, with the
// kubelet's phase, reason, message and event, and stays stopped; a deadline
// lowered on a running pod takes effect (node e2e: "Pods should allow
// activeDeadlineSeconds to be updated").
func TestActiveDeadlineStopsPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		started := time.Now()
		rt.podStatusF = func(pod *v1.Pod, st *podruntime.PodStatus, now time.Time) v1.PodStatus {
			s := memPodStatus(pod, st, now)
			if st != nil {
				s.StartTime = &metav1.Time{Time: started}
			}
			return s
		}
		ev := &events{}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Recorder: ev})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		long := int64(3600)
		p.Spec.ActiveDeadlineSeconds = &long
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st, _ := a.GetPodStatus("u1"); st.Phase != v1.PodRunning || slices.Contains(mem.callLog(), "kill default/web") {
			t.Fatalf("before the deadline: phase %s, calls %q", st.Phase, mem.callLog())
		}

		q := p.DeepCopy()
		short := int64(30)
		q.Spec.ActiveDeadlineSeconds = &short
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{q}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(started.Add(30*time.Second)) - time.Millisecond)
		synctest.Wait()
		if slices.Contains(mem.callLog(), "kill default/web") {
			t.Fatalf("killed before the deadline: calls %q", mem.callLog())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		want := v1.PodStatus{Phase: v1.PodFailed, Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}
		got, _ := a.GetPodStatus("u1")
		if got.Phase != want.Phase || got.Reason != want.Reason || got.Message != want.Message {
			t.Errorf("after the deadline: %s %q %q, want %s %q %q", got.Phase, got.Reason, got.Message, want.Phase, want.Reason, want.Message)
		}
		ev.mu.Lock()
		gotEvents := slices.Clone(ev.got)
		ev.mu.Unlock()
		if !slices.Contains(gotEvents, "Normal DeadlineExceeded "+want.Message) {
			t.Errorf("no DeadlineExceeded event")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if calls := mem.callLog(); calls[len(calls)-1] != "kill default/web" || a.IsPodTerminated("u1") == false {
			t.Errorf("after the deadline: calls %q, terminated %v; want the kill last and the pod terminated", calls, a.IsPodTerminated("u1"))
		}
	})
}

// TestSyncStateCarriedToNextSync: what a SyncPod learnt (its Result's
// State: waiting reasons, back-offs) is kept in the pod's entry and given to
// the pod's next SyncPod; the first gets the zero State.
func TestSyncStateCarriedToNextSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var mu sync.Mutex // guards got and n
		var got []string
		n := 0
		rt.syncStates = func(_ *v1.Pod, prev podruntime.SyncState) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, prev.Waiting["c"].Reason)
		}
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			r := mem.sync(ctx, pod, st)
			mu.Lock()
			defer mu.Unlock()
			n++
			r.State = podruntime.SyncState{Waiting: map[string]v1.ContainerStateWaiting{"c": {Reason: fmt.Sprintf("R%d", n)}}}
			return r
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2*time.Minute + time.Second) // two resyncs
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 3 {
			t.Fatalf("%d syncs, want at least 3", len(got))
		}
		for i, r := range got {
			want := ""
			if i > 0 {
				want = fmt.Sprintf("R%d", i)
			}
			if r != want {
				t.Errorf("sync %d got waiting reason %q, want %q (the previous sync's)", i+1, r, want)
			}
		}
	})
}

// TestCrashRightAfterStartIsSynced: a relist after a start that shows more
// than the sync's own doing (the container it started has exited already)
// gets the pod synced again; a start the relist shows as done does not.
func TestCrashRightAfterStartIsSynced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			r := sync(ctx, pod, st)
			if pod.Name == "crash" && st == nil {
				mem.mu.Lock()
				p := mem.pods[pod.UID]
				p.Containers[0] = &runtimeapi.ContainerStatus{Id: p.Containers[0].Id, State: runtimeapi.ContainerState_CONTAINER_EXITED, Metadata: p.Containers[0].Metadata}
				mem.mu.Unlock()
			}
			return r
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("crash", "u1", 0), testPod("web", "u2", 1)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		syncs := map[string]int{}
		for _, c := range mem.callLog() {
			syncs[c]++
		}
		if diff := cmp.Diff(map[string]int{"sync default/crash": 2, "sync default/web": 1}, syncs); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

func TestSettlingOwn(t *testing.T) {
	t.Parallel()
	sb := func(id string, s runtimeapi.PodSandboxState) *runtimeapi.PodSandboxStatus {
		return &runtimeapi.PodSandboxStatus{Id: id, State: s}
	}
	ctr := func(id string, s runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: id, State: s}
	}
	const (
		ready    = runtimeapi.PodSandboxState_SANDBOX_READY
		notReady = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		running  = runtimeapi.ContainerState_CONTAINER_RUNNING
		exited   = runtimeapi.ContainerState_CONTAINER_EXITED
	)
	st := func(ips []string, sbs []*runtimeapi.PodSandboxStatus, ctrs ...*runtimeapi.ContainerStatus) *podruntime.PodStatus {
		return &podruntime.PodStatus{UID: "u1", IPs: ips, Sandboxes: sbs, Containers: ctrs}
	}
	ip := []string{"10.0.0.2"}
	up := st(ip, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}, ctr("c1", running))
	for _, tc := range []struct {
		name             string
		base, now        *podruntime.PodStatus
		started, removed []string
		want             bool
	}{
		{"nothing changed", up, up, nil, nil, true},
		{"first start: sandbox and container", nil, up, []string{"s1", "c1"}, nil, true},
		{"started container exited", nil, st(ip, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}, ctr("c1", exited)), []string{"s1", "c1"}, nil, false},
		{"a container it did not start", nil, up, []string{"s1"}, nil, false},
		{"restart in place, old one removed", st(ip, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}, ctr("c1", exited)),
			st(ip, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}, ctr("c2", running)), []string{"c2"}, []string{"c1"}, true},
		{"a container went that it did not remove", up, st(ip, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}), nil, nil, false},
		{"another container exited meanwhile", up, st(ip, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}, ctr("c1", exited)), nil, nil, false},
		{"sandbox stopped", up, st(nil, []*runtimeapi.PodSandboxStatus{sb("s1", notReady)}, ctr("c1", running)), nil, nil, false},
		{"IPs changed without a new sandbox", up, st([]string{"10.0.0.3"}, []*runtimeapi.PodSandboxStatus{sb("s1", ready)}, ctr("c1", running)), nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &settling{base: tc.base, ok: true, started: tc.started, removed: tc.removed}
			if got := s.own(tc.now); got != tc.want {
				t.Errorf("own = %v, want %v", got, tc.want)
			}
		})
	}
}
