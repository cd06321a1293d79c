package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
)

func phases(pods []*v1.Pod) map[string]v1.PodPhase {
	out := map[string]v1.PodPhase{}
	for _, p := range pods {
		out[podName(p)] = p.Status.Phase
	}
	return out
}

func TestAddSyncsPodAndPublishesStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		// The first sync waits for release, so the pod cannot have started
		// when it is first looked at.
		release := make(chan struct{})
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			<-release
			return mem.sync(ctx, pod, st)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/web": v1.PodPending}, phases(a.Pods())); diff != "" {
			t.Errorf("right after SetPods (-want +got):\n%s", diff)
		}
		close(release)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if diff := cmp.Diff([]string{"sync default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/web": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods (-want +got):\n%s", diff)
		}
		if st, ok := a.GetPodStatus("u1"); !ok || st.Phase != v1.PodRunning {
			t.Errorf("GetPodStatus = %v, %v", st.Phase, ok)
		}
		if a.IsPodDeleted("u1") || a.IsPodTerminated("u1") || a.PodCleanedUp(a.Pods()[0]) {
			t.Errorf("running pod deleted, terminated or cleaned up")
		}
	})
}

// TestStatusRightAfterSync: a relist starts as soon as a worker's sync ends,
// so the started pod shows Running without waiting for the relist ticker;
// a sync ending while a relist is in flight gets one more relist after it.
func TestStatusRightAfterSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var relists []time.Duration
		t0 := time.Now()
		slow := make(chan struct{}, 1) // a value: the next relist takes 300ms
		rt.statusesF = func(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error) {
			relists = append(relists, time.Since(t0))
			select {
			case <-slow:
				time.Sleep(300 * time.Millisecond)
			default:
			}
			return mem.statuses(ctx)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		time.Sleep(100 * time.Millisecond)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/web": v1.PodRunning}, phases(a.Pods())); diff != "" {
			t.Errorf("10ms after SetPods (-want +got):\n%s", diff)
		}

		// A sync that ends during the relist of 1 s: another relist follows it.
		slow <- struct{}{}
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			time.Sleep(100 * time.Millisecond)
			return sync(ctx, pod, st)
		}
		time.Sleep(850 * time.Millisecond) // now 960ms
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0), testPod("db", "u2", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		// 0: the first relist; 100ms: the one after web's sync, which sees it
		// started (its own doing: no second sync); 1 s: the ticker's, slow,
		// during which db's sync (960ms-1.06s) ends; 1.3 s: the one after it,
		// which sees db started (no second sync either); 2 s: the ticker's.
		ms := time.Millisecond
		want := []time.Duration{0, 100 * ms, time.Second, 1300 * ms, 2 * time.Second}
		if diff := cmp.Diff(want, relists); diff != "" {
			t.Errorf("relist times (-want +got):\n%s", diff)
		}
	})
}

func TestSyncWaitsForFirstRelist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		release := make(chan struct{})
		rt.statusesF = func(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return mem.statuses(ctx)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := mem.callLog(); len(got) != 0 {
			t.Errorf("calls before the runtime was listed: %q", got)
		}
		close(release)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		// The relist right after the first sync sees the pod started, the
		// sync's own doing: no second sync.
		if diff := cmp.Diff([]string{"sync default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

func TestRemovedPodIsKilledThenRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			time.Sleep(time.Second) // the grace period
			return kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		if err := a.SetPods(t.Context(), "file", nil); err != nil {
			t.Fatal(err)
		}
		if !a.IsPodDeleted("u1") || a.IsPodTerminated("u1") {
			t.Errorf("right after removal: deleted %v terminated %v, want true false", a.IsPodDeleted("u1"), a.IsPodTerminated("u1"))
		}
		// While it is being stopped it is in the table, but no longer
		// active: admission does not count it (as the kubelet's pod manager
		// drops a removed pod at once).
		if got := phases(a.ActivePods()); len(got) != 0 || len(a.Pods()) != 1 {
			t.Errorf("while the removed pod stops: active %v, table %d pods; want none active, 1 in the table", got, len(a.Pods()))
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		want := []string{"sync default/web", "kill default/web", "remove default/web"}
		if diff := cmp.Diff(want, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if len(a.Pods()) != 0 || len(mem.uids()) != 0 || !a.IsPodDeleted("u1") || !a.PodCleanedUp(p) {
			t.Errorf("after removal: table %d pods, runtime %v", len(a.Pods()), mem.uids())
		}
	})
}

func TestStaticPodReplacedStartsAfterOldStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			time.Sleep(3 * time.Second) // the grace period
			return kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u2", 1)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		want := []string{"sync default/web", "kill default/web", "remove default/web", "sync default/web"}
		if diff := cmp.Diff(want, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]types.UID{"u2"}, mem.uids()); diff != "" {
			t.Errorf("runtime pods (-want +got):\n%s", diff)
		}
	})
}

func TestChangedSpecIsSynced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var images []string
		var mu sync.Mutex
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			mu.Lock()
			images = append(images, pod.Spec.Containers[0].Image)
			mu.Unlock()
			return sync(ctx, pod, st)
		}
		reg := prometheus.NewPedanticRegistry()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Registerer: reg})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		p2 := p.DeepCopy()
		p2.Spec.Containers[0].Image = "img2"
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p2}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"img", "img2"}, images); diff != "" {
			t.Errorf("images synced (-want +got):\n%s", diff)
		}
		if got := a.Pods()[0].Spec.Containers[0].Image; got != "img2" {
			t.Errorf("published spec image %q", got)
		}
		for op, want := range map[string]uint64{opCreate: 1, opSync: 0, opUpdate: 1} {
			if got := histCount(t, reg, "kubelet_pod_worker_duration_seconds", "operation_type", op); got != want {
				t.Errorf("worker duration %s count = %d, want %d", op, got, want)
			}
		}
		_ = mem
	})
}

func TestKillPodKeepsFinalStatusAndNeverRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		one := int64(1)
		final := v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "low on memory",
			Conditions: []v1.PodCondition{nodeapi.DisruptionTarget("evicted")}}
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: p, Status: final, GracePeriodOverride: &one}); err != nil {
			t.Fatalf("KillPod: %v", err)
		}
		if !a.IsPodTerminated("u1") || len(a.ActivePods()) != 0 || a.IsPodDeleted("u1") {
			t.Errorf("after KillPod: terminated %v, active %d, deleted %v", a.IsPodTerminated("u1"), len(a.ActivePods()), a.IsPodDeleted("u1"))
		}
		time.Sleep(3 * time.Minute) // relists and resyncs
		synctest.Wait()
		if diff := cmp.Diff([]string{"sync default/web", "kill default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		got := a.Pods()[0].Status
		if diff := cmp.Diff(final, got); diff != "" {
			t.Errorf("final status (-want +got):\n%s", diff)
		}
		if !a.PodCleanedUp(p) {
			t.Errorf("killed pod not cleaned up")
		}
		// A second kill returns at once and keeps the first status.
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: p, Status: v1.PodStatus{Phase: v1.PodFailed, Reason: "Preempting"}}); err != nil {
			t.Fatal(err)
		}
		if got := a.Pods()[0].Status.Reason; got != "Evicted" {
			t.Errorf("reason after second kill %q", got)
		}
	})
}

func TestKillPodErrorIsReportedAndRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		fails := 2
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			if fails > 0 { // only the worker calls it: no race
				fails--
				mem.log("kill failed")
				return errors.New("runtime down")
			}
			return kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: p, Status: v1.PodStatus{Phase: v1.PodFailed}})
		if err == nil || !strings.Contains(err.Error(), "runtime down") {
			t.Fatalf("KillPod = %v, want the runtime's error", err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		want := []string{"sync default/web", "kill failed", "kill failed", "kill default/web"}
		if diff := cmp.Diff(want, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if !a.IsPodTerminated("u1") {
			t.Errorf("not terminated after the retried kill")
		}
	})
}

func TestAdmissionRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var order []string
		admit := admitFunc(func(_ context.Context, pod *v1.Pod) admission.Response {
			order = append(order, pod.Name)
			if pod.Name == "big" {
				return admission.Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu"}
			}
			return admission.Response{Admit: true}
		})
		rec := &events{}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: admit, Recorder: rec})
		stop := start(t, a)
		defer stop()
		// Given out of creation order: admitted in creation order.
		pods := []*v1.Pod{testPod("small", "u2", 2), testPod("big", "u1", 1)}
		if err := a.SetPods(t.Context(), "file", pods); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if diff := cmp.Diff([]string{"big", "small"}, order); diff != "" {
			t.Errorf("admission order (-want +got):\n%s", diff)
		}
		for _, c := range mem.callLog() {
			if strings.Contains(c, "big") {
				t.Errorf("rejected pod reached the runtime: %s", c)
			}
		}
		want := v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu"}
		if diff := cmp.Diff(want, a.Pods()[0].Status); diff != "" {
			t.Errorf("rejected pod status (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/small": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Warning OutOfcpu Node didn't have enough resource: cpu"}, rec.got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if !a.IsPodTerminated("u1") {
			t.Errorf("rejected pod not terminated")
		}
		if err := a.SetPods(t.Context(), "file", pods[:1]); err != nil {
			t.Fatal(err)
		}
		if len(a.Pods()) != 1 {
			t.Errorf("dropped rejected pod still listed")
		}
	})
}

func TestPreemptionKillsVictimsBeforeStart(t *testing.T) {
	for _, withExecutor := range []bool{false, true} {
		t.Run(map[bool]string{false: "own kills", true: "executor"}[withExecutor], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem, rt := newMem()
				kill := rt.killPodF
				rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
					time.Sleep(5 * time.Second) // the victim's grace period
					return kill(ctx, pod, st, grace)
				}
				victim := testPod("victim", "u1", 0)
				critical := testPod("critical", "u2", 1)
				other := testPod("other", "u3", 2)
				preempted := v1.PodStatus{Phase: v1.PodFailed, Reason: "Preempting", Conditions: []v1.PodCondition{nodeapi.DisruptionTarget("preempted")}}
				admit := admitFunc(func(_ context.Context, pod *v1.Pod) admission.Response {
					if pod.Name == "critical" {
						return admission.Response{Admit: true, Preemption: &preemption.Plan{Preemptor: pod,
							Victims: []nodeapi.KillRequest{{Pod: victim, Status: preempted}}}}
					}
					return admission.Response{Admit: true}
				})
				deps := Deps{Runtime: rt, Admit: admit}
				var a *Agent
				if withExecutor {
					// The executor kills through the agent, built after it:
					// the composition root closes over the variable.
					ex, err := preemption.NewExecutor(preemption.ExecutorDeps{Logger: testLogger(t),
						Killer: nodeapi.PodKillerFunc(func(ctx context.Context, r nodeapi.KillRequest) error { return a.KillPod(ctx, r) })})
					if err != nil {
						t.Fatal(err)
					}
					deps.Preempt = ex
				}
				a = newTestAgent(t, Config{}, deps)
				stop := start(t, a)
				defer stop()
				if err := a.SetPods(t.Context(), "file", []*v1.Pod{victim}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2500 * time.Millisecond)
				if err := a.SetPods(t.Context(), "file", []*v1.Pod{victim, critical}); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{"default/critical", "default/victim"}, slices.Sorted(maps.Keys(phases(a.ActivePods())))); diff != "" {
					t.Errorf("active while preempting (-want +got):\n%s", diff)
				}
				// The loop is free while the victim stops: another pod starts.
				time.Sleep(time.Second)
				if err := a.SetPods(t.Context(), "file", []*v1.Pod{victim, critical, other}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(10 * time.Second)
				synctest.Wait()
				// other starts (3.5 s, and 4 s after the relist) while the
				// victim stops (2.5 s to 7.5 s); critical starts after.
				want := []string{"sync default/victim", "sync default/other",
					"kill default/victim", "sync default/critical"}
				if diff := cmp.Diff(want, mem.callLog()); diff != "" {
					t.Errorf("calls (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(map[string]v1.PodPhase{"default/critical": v1.PodRunning, "default/other": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
					t.Errorf("active after preemption (-want +got):\n%s", diff)
				}
				if got := phases(a.Pods())["default/victim"]; got != v1.PodFailed {
					t.Errorf("victim phase %q", got)
				}
			})
		})
	}
}

func TestAdoptionAndOrphans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		mem.put("u1", "default", "web", "c")
		mem.put("u9", "default", "old", "c")
		var statusSeen *podruntime.PodStatus
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			if pod.UID == "u1" && statusSeen == nil {
				statusSeen = st
			}
			return sync(ctx, pod, st)
		}
		reg := prometheus.NewPedanticRegistry()
		a := newTestAgent(t, Config{}, Deps{Table: newTable(t, "file", "api"), Runtime: rt, Registerer: reg})
		stop := start(t, a)
		defer stop()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := mem.callLog(); len(got) != 0 || a.IsPodDeleted("u9") {
			t.Errorf("before any source: calls %q, orphan deleted %v", got, a.IsPodDeleted("u9"))
		}
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"sync default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls with one source of two (-want +got):\n%s", diff)
		}
		if statusSeen == nil || len(statusSeen.Containers) != 1 {
			t.Errorf("adopted pod synced with status %v, want the running one", statusSeen)
		}
		if err := a.SetPods(t.Context(), "api", nil); err != nil {
			t.Fatal(err)
		}
		if !a.IsPodDeleted("u9") || a.IsPodDeleted("u1") {
			t.Errorf("once sources are ready: orphan deleted %v, adopted deleted %v", a.IsPodDeleted("u9"), a.IsPodDeleted("u1"))
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		want := []string{"sync default/web", "kill default/old", "remove default/old"}
		if diff := cmp.Diff(want, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]types.UID{"u1"}, mem.uids()); diff != "" {
			t.Errorf("runtime pods (-want +got):\n%s", diff)
		}
		if mem.creates != 0 {
			t.Errorf("%d sandboxes created for an adopted pod", mem.creates)
		}
		if got := histCount(t, reg, "kubelet_pod_start_duration_seconds", "", ""); got != 0 {
			t.Errorf("adopted pod counted as started: %d", got)
		}
	})
}

func TestRetryAfterAndResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		var at []time.Duration
		t0 := time.Now()
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			at = append(at, time.Since(t0))
			r := sync(ctx, pod, st)
			if d := time.Since(t0); d < 5*time.Second {
				r.RetryAfter = 5*time.Second - d // a back-off ending at 5 s
			}
			return r
		}
		a := newTestAgent(t, Config{ResyncPeriod: 30 * time.Second}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(65 * time.Second)
		synctest.Wait()
		// Created at 0 (the relist right after sees it started, the sync's
		// own doing: no sync); the back-off ends at 5 s; the resync ticker at
		// 30 s and 60 s.
		want := []time.Duration{0, 5 * time.Second, 30 * time.Second, 60 * time.Second}
		if diff := cmp.Diff(want, at); diff != "" {
			t.Errorf("sync times (-want +got):\n%s", diff)
		}
	})
}

func TestSyncErrorBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		var at []time.Duration
		t0 := time.Now()
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			at = append(at, time.Since(t0))
			return podruntime.Result{Err: errors.New("image pull failed")}
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(46 * time.Second)
		synctest.Wait()
		want := []time.Duration{0, 1, 3, 7, 15, 25, 35, 45}
		for i := range want {
			want[i] *= time.Second
		}
		if diff := cmp.Diff(want, at); diff != "" {
			t.Errorf("sync times (-want +got):\n%s", diff)
		}
	})
}

func TestTerminalPhaseStopsPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = func(pod *v1.Pod, st *podruntime.PodStatus, _ time.Time) v1.PodStatus {
			if st != nil && len(st.Containers) > 0 {
				return v1.PodStatus{Phase: v1.PodSucceeded}
			}
			return v1.PodStatus{Phase: v1.PodPending}
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("job", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if diff := cmp.Diff([]string{"sync default/job", "kill default/job"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if !a.IsPodTerminated("u1") || len(a.ActivePods()) != 0 || phases(a.Pods())["default/job"] != v1.PodSucceeded {
			t.Errorf("finished pod: terminated %v active %d", a.IsPodTerminated("u1"), len(a.ActivePods()))
		}
	})
}

// A pod whose containers finished shows its terminal phase only once the
// kill that follows has stopped what still runs (its sandbox, a sidecar):
// until then it keeps the phase it showed, as with the kubelet.
func TestTerminalPhaseHeldWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = func(pod *v1.Pod, st *podruntime.PodStatus, _ time.Time) v1.PodStatus {
			if st != nil && len(st.Containers) > 0 {
				return v1.PodStatus{Phase: v1.PodSucceeded, Reason: "R", Message: "m"}
			}
			return v1.PodStatus{Phase: v1.PodPending, Reason: "P"}
		}
		release := make(chan struct{})
		killing := make(chan struct{})
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			close(killing)
			<-release
			return mem.kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("job", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		<-killing
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st, _ := a.GetPodStatus("u1"); st.Phase != v1.PodPending || st.Reason != "P" {
			t.Errorf("while the kill runs: phase %s, reason %q; want Pending, P (held)", st.Phase, st.Reason)
		}
		close(release)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st, _ := a.GetPodStatus("u1"); st.Phase != v1.PodSucceeded || st.Reason != "R" || st.Message != "m" {
			t.Errorf("after the kill: phase %s, reason %q, message %q; want Succeeded, R, m", st.Phase, st.Reason, st.Message)
		}
	})
}

// A stopped pod keeps the IPs it showed while its sandbox ran (node e2e
// "should contain podIPs in status for failed pod").
func TestTerminatedPodKeepsIPs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		rt.podStatusF = func(pod *v1.Pod, st *podruntime.PodStatus, _ time.Time) v1.PodStatus {
			switch {
			case sandboxReady(st):
				return v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.7", PodIPs: []v1.PodIP{{IP: "10.0.0.7"}}}
			case st != nil:
				return v1.PodStatus{Phase: v1.PodFailed}
			}
			return v1.PodStatus{Phase: v1.PodPending}
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: a.Pods()[0], Status: v1.PodStatus{Phase: v1.PodFailed}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st, _ := a.GetPodStatus("u1")
		if st.Phase != v1.PodFailed || st.PodIP != "10.0.0.7" || len(st.PodIPs) != 1 {
			t.Errorf("killed pod: phase %s, pod IP %q, IPs %v; want Failed with 10.0.0.7", st.Phase, st.PodIP, st.PodIPs)
		}
	})
}

func TestShutdownLeavesPodsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		syncing := make(chan struct{})
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			mem.log("sync " + podName(pod))
			close(syncing)
			<-ctx.Done() // a slow sync in flight at shutdown
			return podruntime.Result{Err: ctx.Err()}
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		<-syncing
		stop() // returns only after the worker returned
		if diff := cmp.Diff([]string{"sync default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := a.SetPods(ctx, "file", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("SetPods after Run returned: %v", err)
		}
		if err := a.Run(t.Context()); err == nil {
			t.Errorf("second Run: no error")
		}
	})
}

// TestIdlePodsHoldNoGoroutines: a pod's operations run on goroutines that end
// with them, so running pods with nothing to do hold no goroutine (and no
// stack) of the agent's.
func TestIdlePodsHoldNoGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		synctest.Wait()
		before := bubbleGoroutines()
		var pods []*v1.Pod
		for i := range 50 {
			pods = append(pods, testPod(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i), i))
		}
		if err := a.SetPods(t.Context(), "file", pods); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		for name, ph := range phases(a.Pods()) {
			if ph != v1.PodRunning {
				t.Fatalf("%s: %s, want Running", name, ph)
			}
		}
		if after := bubbleGoroutines(); len(after) > len(before) {
			t.Errorf("%d more goroutines with 50 idle running pods than with none; now:\n%s",
				len(after)-len(before), strings.Join(after, "\n\n"))
		}
	})
}

// bubbleGoroutines is the stack of every goroutine in the calling
// goroutine's synctest bubble. Goroutines outside it (the testing package's,
// or another test's on their way out) are not the agent's.
func bubbleGoroutines() []string {
	self := make([]byte, 256)
	self = self[:goruntime.Stack(self, false)]
	header, _, _ := strings.Cut(string(self), "\n")
	_, id, ok := strings.Cut(header, ", synctest bubble ")
	if !ok {
		panic("bubbleGoroutines called outside a synctest bubble: " + header)
	}
	id = ", synctest bubble " + strings.TrimRight(id, "]:")
	all := make([]byte, 1<<20)
	all = all[:goruntime.Stack(all, true)]
	var in []string
	for _, g := range strings.Split(string(all), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, id+"]") || strings.Contains(header, id+" ") {
			in = append(in, g)
		}
	}
	return in
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		mem.put("u9", "default", "orphan", "a", "b")
		reg := prometheus.NewPedanticRegistry()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Registerer: reg})
		stop := start(t, a)
		defer stop()
		time.Sleep(500 * time.Millisecond)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// The orphan's two containers exited, web's one runs.
		if got := testutil.ToFloat64(a.m.runningPods); got != 1 {
			t.Errorf("kubelet_running_pods = %v, want 1", got)
		}
		for state, want := range map[string]float64{"running": 1, "exited": 0, "created": 0} {
			if got := testutil.ToFloat64(a.m.runningCtrs.WithLabelValues(state)); got != want {
				t.Errorf("kubelet_running_containers{%s} = %v, want %v", state, got, want)
			}
		}
		if got := histCount(t, reg, "kubelet_pod_start_duration_seconds", "", ""); got != 1 {
			t.Errorf("pod start observations = %d, want 1", got)
		}
		if got := histCount(t, reg, "kubelet_pleg_relist_duration_seconds", "", ""); got < 3 {
			t.Errorf("relist observations = %d, want >= 3", got)
		}
		if got := histCount(t, reg, "kubelet_pod_worker_duration_seconds", "operation_type", "kill"); got != 1 {
			t.Errorf("kill observations = %d, want 1 (the orphan)", got)
		}
		// A second agent on the same registry shares the series.
		if _, err := New(Config{}, Deps{Table: newTable(t), Runtime: rt, Admit: admitFunc(admitAll), Registerer: reg}); err != nil {
			t.Errorf("second agent on one registry: %v", err)
		}
	})
}

// histCount returns the sample count of the histogram name (with label=value
// when label is set) in reg.
func histCount(t *testing.T, reg *prometheus.Registry, name, label, value string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// A pod handed over in a terminal phase finished in an earlier run: it is
// neither admitted nor started, and keeps its final status.
func TestFinishedPodIsNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var admitted []string
		admit := admitFunc(func(_ context.Context, pod *v1.Pod) admission.Response {
			admitted = append(admitted, pod.Name)
			return admission.Response{Admit: true}
		})
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: admit})
		stop := start(t, a)
		defer stop()
		done := testPod("done", "u1", 0)
		done.Status = preemption.PreemptedStatus()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{done, testPod("web", "u2", 1)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"web"}, admitted); diff != "" {
			t.Errorf("admitted (-want +got):\n%s", diff)
		}
		for _, c := range mem.callLog() {
			if strings.Contains(c, "done") {
				t.Errorf("finished pod reached the runtime: %s", c)
			}
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/web": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods (-want +got):\n%s", diff)
		}
		st, ok := a.GetPodStatus("u1")
		if !ok || st.Phase != v1.PodFailed || st.Reason != preemption.Reason || !a.IsPodTerminated("u1") {
			t.Errorf("finished pod: %v %q %q terminated %v", ok, st.Phase, st.Reason, a.IsPodTerminated("u1"))
		}
	})
}

// TestStoppedPodVolumesTornDown: a pod that finished under its restartPolicy
// has its volumes torn down once its containers stopped, without waiting for
// its deletion, as the kubelet's volume manager does (node e2e: "Kubelet
// Volume Manager ... On termination of pod with memory backed volume should
// remove the volume from the node"); a failed tear-down is retried with
// back-off. A pod that finished in an earlier run has its volumes torn down
// too.
func TestStoppedPodVolumesTornDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = func(pod *v1.Pod, st *podruntime.PodStatus, _ time.Time) v1.PodStatus {
			if st != nil && len(st.Containers) > 0 {
				return v1.PodStatus{Phase: v1.PodSucceeded}
			}
			return v1.PodStatus{Phase: v1.PodPending}
		}
		fails := 1
		rt.tearDownF = func(uid types.UID) error {
			mem.log("teardown " + string(uid))
			if uid == "u1" && fails > 0 { // only u1's worker: no race
				fails--
				return errors.New("device busy")
			}
			return nil
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("job", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		done := testPod("done", "u2", 1)
		done.Status = v1.PodStatus{Phase: v1.PodSucceeded}
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p, done}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		var u1 []string
		for _, c := range mem.callLog() {
			if c != "teardown u2" {
				u1 = append(u1, c)
			}
		}
		if diff := cmp.Diff([]string{"sync default/job", "kill default/job", "teardown u1", "teardown u1"}, u1); diff != "" {
			t.Errorf("calls for the finished pod (-want +got):\n%s", diff)
		}
		if n := strings.Count(strings.Join(mem.callLog(), "\n"), "teardown u2"); n != 1 {
			t.Errorf("the pod finished in an earlier run had its volumes torn down %d times, want 1", n)
		}
		if !a.IsPodTerminated("u1") || a.IsPodDeleted("u1") {
			t.Errorf("finished pod: terminated %v deleted %v", a.IsPodTerminated("u1"), a.IsPodDeleted("u1"))
		}
	})
}
