package agent

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// slowStep is an admission.SlowHandler for the pods whose name starts with
// "slow": its Admit waits for a value on release (admit when true).
type slowStep struct {
	release chan bool
	// admits counts Admit calls, which run on goroutines of their own.
	admits atomic.Int32
}

func (s *slowStep) Name() string { return "slow" }
func (s *slowStep) Slow(req *admission.Request) bool {
	return strings.HasPrefix(req.Pod.Name, "slow")
}
func (s *slowStep) Admit(ctx context.Context, req *admission.Request, resp *admission.Response) error {
	if !s.Slow(req) {
		return nil
	}
	s.admits.Add(1)
	select {
	case ok := <-s.release:
		if !ok {
			resp.Reject(admission.ReasonUnexpected, "Allocate failed due to boom, which is unexpected")
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// admit releases one waiting Admit of the step with ok, failing the test
// when none waits within a minute (of the bubble's time).
func (s *slowStep) admit(t *testing.T, ok bool) {
	t.Helper()
	select {
	case s.release <- ok:
	case <-time.After(time.Minute):
		t.Fatal("no admission waits on the slow step")
	}
}

// slowChain is a chain of a slowStep, then the resource fit on a node of 2
// CPUs, whose active pods are a's.
func slowChain(a **Agent, step *slowStep) *admission.Chain {
	return admission.NewChain(step, &admission.ResourceHandler{
		ActivePods: func() []*v1.Pod { return (*a).ActivePods() },
		Node: func() (admission.Node, error) {
			return admission.Node{Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourcePods: resource.MustParse("10")}}, nil
		},
	})
}

func withCPU(p *v1.Pod, cpu string) *v1.Pod {
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}
	return p
}

// TestPendingAdmissionCountsForLaterPods: a pod whose admission waits on its
// slow step is active (Pending) but not started; pods given meanwhile are
// admitted at once, and their resource fit counts the pending pod, so the
// node is never overcommitted; the pending pod starts once its step admits
// it, its own fit counting the pods admitted meanwhile.
func TestPendingAdmissionCountsForLaterPods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		step := &slowStep{release: make(chan bool)}
		var a *Agent
		a = newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: slowChain(&a, step)})
		stop := start(t, a)
		defer stop()
		slow := withCPU(testPod("slow", "u1", 0), "1500m")
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{slow}); err != nil {
			t.Fatal(err)
		}
		small := withCPU(testPod("small", "u2", 1), "500m")
		big := withCPU(testPod("big", "u3", 2), "1")
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{slow, small, big}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want := map[string]v1.PodPhase{"default/slow": v1.PodPending, "default/small": v1.PodRunning}
		if diff := cmp.Diff(want, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods while slow's step waits (-want +got):\n%s", diff)
		}
		if st, _ := a.GetPodStatus("u3"); st.Reason != "OutOfcpu" {
			t.Errorf("big, which fits only without slow: %+v", st)
		}
		step.admit(t, true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want["default/slow"] = v1.PodRunning
		if diff := cmp.Diff(want, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods after slow's step (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"sync default/small", "sync default/slow"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

// TestPendingAdmissionRejected: a pod whose slow step rejects it ends
// Failed with the step's reason and an event, and never reaches the runtime.
func TestPendingAdmissionRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		step := &slowStep{release: make(chan bool)}
		rec := &events{}
		var a *Agent
		a = newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: slowChain(&a, step), Recorder: rec})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("slow", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		step.admit(t, false)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want := v1.PodStatus{Phase: v1.PodFailed, Reason: admission.ReasonUnexpected, Message: "Allocate failed due to boom, which is unexpected"}
		if diff := cmp.Diff(want, a.Pods()[0].Status); diff != "" {
			t.Errorf("status (-want +got):\n%s", diff)
		}
		if len(a.ActivePods()) != 0 || !a.IsPodTerminated("u1") {
			t.Errorf("rejected pod still active")
		}
		if diff := cmp.Diff([]string{"Warning UnexpectedAdmissionError Allocate failed due to boom, which is unexpected"}, rec.got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if calls := mem.callLog(); len(calls) != 0 {
			t.Errorf("rejected pod reached the runtime: %v", calls)
		}
	})
}

// TestPodStoppedWhileAdmissionPending: a pod killed, or dropped by its
// source, while its admission waits is never started, whatever the step
// says afterwards; a dropped pod given again is admitted anew.
func TestPodStoppedWhileAdmissionPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		step := &slowStep{release: make(chan bool)}
		var a *Agent
		a = newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: slowChain(&a, step)})
		stop := start(t, a)
		defer stop()
		killed, dropped := testPod("slow-killed", "u1", 0), testPod("slow-dropped", "u2", 1)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{killed, dropped}); err != nil {
			t.Fatal(err)
		}
		evicted := v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}
		if err := a.KillPod(t.Context(), nodeapi.KillRequest{Pod: killed, Status: evicted}); err != nil {
			t.Fatal(err)
		}
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{killed}); err != nil {
			t.Fatal(err)
		}
		step.admit(t, true)
		step.admit(t, true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if calls := mem.callLog(); len(calls) != 0 {
			t.Errorf("a pod stopped while its admission waited reached the runtime: %v", calls)
		}
		if diff := cmp.Diff(evicted, a.Pods()[0].Status); diff != "" {
			t.Errorf("killed pod's status (-want +got):\n%s", diff)
		}
		if len(a.ActivePods()) != 0 || len(a.Pods()) != 1 {
			t.Errorf("pods %v, active %v", phases(a.Pods()), phases(a.ActivePods()))
		}

		// Given again: admitted anew (the step runs again), then started.
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{killed, dropped}); err != nil {
			t.Fatal(err)
		}
		step.admit(t, true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := step.admits.Load(); n != 3 {
			t.Errorf("slow step ran %d times, want 3", n)
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/slow-dropped": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods (-want +got):\n%s", diff)
		}
	})
}

// TestAdoptedPodGivenBackWhileAdmissionPending: a running pod from an
// earlier run whose admission waits is dropped, and given back while its
// containers are being stopped: it is not started again in place (it was
// never admitted) but removed, then admitted anew.
func TestAdoptedPodGivenBackWhileAdmissionPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		mem.put("u1", "default", "slow", "c")
		killRelease := make(chan struct{})
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			<-killRelease
			return mem.kill(ctx, pod, st, grace)
		}
		step := &slowStep{release: make(chan bool)}
		var a *Agent
		a = newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: slowChain(&a, step)})
		stop := start(t, a)
		defer stop()
		time.Sleep(1500 * time.Millisecond) // the first relist adopts it
		p := testPod("slow", "u1", 0)
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		if err := a.SetPods(t.Context(), "file", nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // its kill waits for killRelease
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		close(killRelease)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"kill default/slow", "remove default/slow"}, mem.callLog()); diff != "" {
			t.Errorf("calls before the new admission's step (-want +got):\n%s", diff)
		}
		step.admit(t, true) // one of the two admissions
		step.admit(t, true) // the other
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := step.admits.Load(); n != 2 {
			t.Errorf("slow step ran %d times, want 2", n)
		}
		if diff := cmp.Diff(map[string]v1.PodPhase{"default/slow": v1.PodRunning}, phases(a.ActivePods())); diff != "" {
			t.Errorf("active pods (-want +got):\n%s", diff)
		}
	})
}

// TestTwoPendingAdmissionSteps: a pod whose admission has two slow steps
// waits on each off the loop in turn (Resume returning Pending again), then
// starts.
func TestTwoPendingAdmissionSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		first := &slowStep{release: make(chan bool)}
		second := &slowStep{release: make(chan bool)}
		a := newTestAgent(t, Config{}, Deps{Runtime: rt, Admit: admission.NewChain(first, second)})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{testPod("slow", "u1", 0)}); err != nil {
			t.Fatal(err)
		}
		first.admit(t, true)
		second.admit(t, true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"sync default/slow"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}
