package agent

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/prober"
)

// fakeProber records what the agent tells it.
type fakeProber struct {
	mu      sync.Mutex
	calls   []string
	updates []<-chan prober.Update
}

func (f *fakeProber) Updates() []<-chan prober.Update { return f.updates }

func (f *fakeProber) log(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}
func (f *fakeProber) AddPod(p *v1.Pod) error           { f.log("add " + podName(p)); return nil }
func (f *fakeProber) StopLivenessAndStartup(p *v1.Pod) { f.log("stop " + podName(p)) }
func (f *fakeProber) RemovePod(p *v1.Pod)              { f.log("remove " + podName(p)) }
func (f *fakeProber) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func countSyncs(calls []string) int {
	return len(slices.DeleteFunc(slices.Clone(calls), func(s string) bool { return !strings.HasPrefix(s, "sync ") }))
}

func TestProbesFollowPodsAndResultsReachTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		var ready atomic.Bool
		rt.podStatusF = func(pod *v1.Pod, st *podruntime.PodStatus, now time.Time) v1.PodStatus {
			s := memPodStatus(pod, st, now)
			c := v1.ConditionFalse
			if ready.Load() {
				c = v1.ConditionTrue
			}
			s.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: c}}
			return s
		}
		liveness, readiness := make(chan prober.Update), make(chan prober.Update)
		fp := &fakeProber{updates: []<-chan prober.Update{liveness, readiness}}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Probes: fp})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("web", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if diff := cmp.Diff([]string{"add default/web"}, fp.take()); diff != "" {
			t.Errorf("prober calls after start (-want +got):\n%s", diff)
		}
		syncs := countSyncs(mem.callLog())

		// A readiness change refreshes the status and syncs nothing.
		ready.Store(true)
		readiness <- prober.Update{PodUID: "u1", ContainerName: "c", ContainerID: "x://c2", ProbeType: prober.Readiness, Result: prober.Success}
		synctest.Wait()
		st, _ := a.GetPodStatus("u1")
		if len(st.Conditions) != 1 || st.Conditions[0].Status != v1.ConditionTrue {
			t.Errorf("Ready after the readiness update: %v", st.Conditions)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if got := countSyncs(mem.callLog()); got != syncs {
			t.Errorf("a readiness update made %d syncs", got-syncs)
		}

		// A liveness failure syncs the pod (the runtime restarts the container).
		liveness <- prober.Update{PodUID: "u1", ContainerName: "c", ContainerID: "x://c2", ProbeType: prober.Liveness, Result: prober.Failure}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if got := countSyncs(mem.callLog()); got != syncs+1 {
			t.Errorf("a liveness failure made %d syncs, want 1", got-syncs)
		}
		// A startup success syncs the pod too (what waited for a sidecar to
		// start can start).
		liveness <- prober.Update{PodUID: "u1", ContainerName: "c", ContainerID: "x://c2", ProbeType: prober.Startup, Result: prober.Success}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if got := countSyncs(mem.callLog()); got != syncs+2 {
			t.Errorf("a startup success made %d syncs, want 1", got-syncs-1)
		}
		// An update for an unknown pod is ignored.
		liveness <- prober.Update{PodUID: "nope", ProbeType: prober.Liveness, Result: prober.Failure}

		// Removal: liveness and startup stop while it stops, then all.
		if err := a.SetPods(t.Context(), "file", nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"stop default/web", "remove default/web"}, fp.take()); diff != "" {
			t.Errorf("prober calls after removal (-want +got):\n%s", diff)
		}
	})
}

func TestProbesStopWhenKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		fp := &fakeProber{}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Probes: fp})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: p, Status: v1.PodStatus{Phase: v1.PodFailed}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"add default/web", "stop default/web", "remove default/web"}, fp.take()); diff != "" {
			t.Errorf("prober calls (-want +got):\n%s", diff)
		}
	})
}
