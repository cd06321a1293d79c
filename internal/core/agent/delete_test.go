package agent

import (
	"context"
	"errors"
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
)

// ctrPodStatus is memPodStatus with a container status per runtime
// container: running, or terminated with exit code 143.
func ctrPodStatus(pod *v1.Pod, st *podruntime.PodStatus, now time.Time) v1.PodStatus {
	out := memPodStatus(pod, st, now)
	if st == nil {
		return out
	}
	for _, c := range st.Containers {
		cs := v1.ContainerStatus{Name: c.GetMetadata().GetName()}
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			cs.State.Running = &v1.ContainerStateRunning{}
		} else {
			cs.State.Terminated = &v1.ContainerStateTerminated{ExitCode: 143}
		}
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
	}
	return out
}

func deleted(p *v1.Pod, grace int64) *v1.Pod {
	d := p.DeepCopy()
	d.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)}
	d.DeletionGracePeriodSeconds = &grace
	return d
}

// TestDeletionTimestampKillsWithGrace: a pod still in its source's set but
// with a deletionTimestamp is killed with the deletion's grace period, never
// restarted, and ends Failed (its container exited 143) and cleaned up.
func TestDeletionTimestampKillsWithGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = ctrPodStatus
		var graces []int64
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			if grace == nil {
				graces = append(graces, -1)
			} else {
				graces = append(graces, *grace)
			}
			return kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Table: newTable(t, "api"), Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if got := a.Pods()[0].Status.Phase; got != v1.PodRunning {
			t.Fatalf("phase before deletion %s", got)
		}
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{deleted(p, 7)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute) // relists and resyncs
		synctest.Wait()
		if diff := cmp.Diff([]string{"sync default/web", "kill default/web"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int64{7}, graces); diff != "" {
			t.Errorf("kill grace periods (-want +got):\n%s", diff)
		}
		got := a.Pods()[0]
		if got.Status.Phase != v1.PodFailed || !a.IsPodTerminated("u1") || a.IsPodDeleted("u1") || !a.PodCleanedUp(got) || len(a.ActivePods()) != 0 {
			t.Errorf("after deletion: phase %s, terminated %v, deleted %v, cleaned up %v, active %d",
				got.Status.Phase, a.IsPodTerminated("u1"), a.IsPodDeleted("u1"), a.PodCleanedUp(got), len(a.ActivePods()))
		}
		// The source drops it: it is removed from the runtime and the table.
		if err := a.SetPods(t.Context(), "api", nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if len(a.Pods()) != 0 || len(mem.uids()) != 0 {
			t.Errorf("after drop: pods %d, runtime pods %v", len(a.Pods()), mem.uids())
		}
	})
}

// TestPodDeletedBeforeStartNeverRuns: a new pod that already has a
// deletionTimestamp is not started; one running from an earlier run
// (adopted) is killed with the deletion's grace period.
func TestPodDeletedBeforeStartNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		mem.put("u2", "default", "old", "c")
		var grace *int64
		kill := rt.killPodF
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, g *int64) error {
			grace = g
			return kill(ctx, pod, st, g)
		}
		admitted := 0
		a := newTestAgent(t, Config{}, Deps{Table: newTable(t, "api"), Runtime: rt, Admit: admitFunc(func(ctx context.Context, p *v1.Pod) admission.Response {
			admitted++
			return admitAll(ctx, p)
		})})
		stop := start(t, a)
		defer stop()
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{deleted(testPod("web", "u1", 0), 30), deleted(testPod("old", "u2", 1), 3)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"kill default/old"}, mem.callLog()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if grace == nil || *grace != 3 || admitted != 0 {
			t.Errorf("kill grace %v, admitted %d", grace, admitted)
		}
		if !a.IsPodTerminated("u1") || !a.IsPodTerminated("u2") || len(a.ActivePods()) != 0 {
			t.Errorf("terminated u1 %v u2 %v, active %d", a.IsPodTerminated("u1"), a.IsPodTerminated("u2"), len(a.ActivePods()))
		}
	})
}

// TestChangesSignalsPublishes: Changes gets a value after a publish, and
// publishes coalesce while nobody reads.
func TestChangesSignalsPublishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		select {
		case <-a.Changes():
			t.Fatal("a change before the loop ran")
		default:
		}
		stop := start(t, a)
		defer stop()
		for i, name := range []string{"a", "b", "c"} {
			pods := []*v1.Pod{testPod(name, name, i)}
			if err := a.SetPods(t.Context(), "file", pods); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		select {
		case <-a.Changes():
		default:
			t.Fatal("no change after SetPods")
		}
		select {
		case <-a.Changes():
			t.Fatal("a second pending change: publishes did not coalesce")
		default:
		}
		if err := a.SetPods(t.Context(), "file", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-a.Changes():
		default:
			t.Fatal("no change after the pod was dropped")
		}
	})
}

// waitingPodStatus is memPodStatus with each container of the spec waiting
// for its image (ErrImagePull) unless the runtime has it: running, or
// exited 0.
func waitingPodStatus(pod *v1.Pod, st *podruntime.PodStatus, now time.Time) v1.PodStatus {
	out := memPodStatus(pod, st, now)
	for _, c := range pod.Spec.Containers {
		cs := v1.ContainerStatus{Name: c.Name, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}}}
		if st != nil {
			for _, rc := range st.Containers {
				if rc.GetMetadata().GetName() != c.Name {
					continue
				}
				if rc.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
					cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
				} else {
					cs.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}
				}
			}
		}
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
	}
	return out
}

// TestPendingPodDeletedEndsFailed: a pod whose container never started (its
// image cannot be pulled) and that is deleted ends Failed, with no reason,
// its container terminated as the kubelet records one it could not locate.
func TestPendingPodDeletedEndsFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = waitingPodStatus
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			mem.log("sync " + podName(pod))
			if st == nil {
				mem.put(pod.UID, pod.Namespace, pod.Name) // the sandbox only: the image pull fails
			}
			return podruntime.Result{RetryAfter: 10 * time.Second}
		}
		a := newTestAgent(t, Config{}, Deps{Table: newTable(t, "api"), Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if got := a.Pods()[0].Status.Phase; got != v1.PodRunning {
			t.Fatalf("phase before deletion %s", got)
		}
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{deleted(p, 30)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		got := a.Pods()[0]
		want := v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{
			Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown",
				Message: "The container could not be located when the pod was terminated"}}}}}
		if diff := cmp.Diff(want, got.Status); diff != "" {
			t.Errorf("status after deletion (-want +got):\n%s", diff)
		}
		if !a.IsPodTerminated("u1") || !a.PodCleanedUp(got) {
			t.Errorf("terminated %v, cleaned up %v", a.IsPodTerminated("u1"), a.PodCleanedUp(got))
		}
	})
}

// TestDeletedPodWithoutSandboxEndsFailed: a pod whose sandbox could not be
// made is deleted; its kill changes nothing the runtime lists, and it still
// ends Failed with the listing after the kill.
func TestDeletedPodWithoutSandboxEndsFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = waitingPodStatus
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			mem.log("sync " + podName(pod))
			return podruntime.Result{Err: errors.New("no network for the sandbox")}
		}
		a := newTestAgent(t, Config{}, Deps{Table: newTable(t, "api"), Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{deleted(p, 30)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := a.Pods()[0].Status.Phase; got != v1.PodFailed || !a.IsPodTerminated("u1") {
			t.Errorf("phase %s, terminated %v; want Failed, terminated", got, a.IsPodTerminated("u1"))
		}
	})
}

// TestDeletedPodStatusWaitsForRelist: right after the kill, the runtime's
// last listing still shows the container running; the pod's phase turns
// terminal only with the listing after the kill, which shows how the
// container ended (here exit code 0: Succeeded, not Failed).
func TestDeletedPodStatusWaitsForRelist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, rt := newMem()
		rt.podStatusF = waitingPodStatus
		killed := false
		hold := make(chan struct{})
		rt.statusesF = func(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error) {
			if killed {
				select {
				case <-hold:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return mem.statuses(ctx)
		}
		rt.killPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
			killed = true // the loop reads it only in relists started after the kill's result
			return mem.kill(ctx, pod, st, grace)
		}
		a := newTestAgent(t, Config{}, Deps{Table: newTable(t, "api"), Runtime: rt})
		stop := start(t, a)
		defer stop()
		p := testPod("web", "u1", 0)
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if err := a.SetPods(t.Context(), "api", []*v1.Pod{deleted(p, 30)}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !a.IsPodTerminated("u1") {
			t.Fatal("not terminated after the kill")
		}
		if got := a.Pods()[0].Status.Phase; got == v1.PodFailed || got == v1.PodSucceeded {
			t.Errorf("phase %s before the runtime was listed after the kill", got)
		}
		close(hold)
		synctest.Wait()
		if got := a.Pods()[0].Status.Phase; got != v1.PodSucceeded {
			t.Errorf("phase %s after the listing, want Succeeded", got)
		}
	})
}
