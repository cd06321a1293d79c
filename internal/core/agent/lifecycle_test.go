package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/prober"
)

// TestStep drives the pod state machine one event at a time, as a table:
// every arrow of step's diagram at least once, and the tricky ones (a kill
// or a deletion before the admission's verdict, a pod given back while its
// kill-and-remove is in flight, an orphan, the active deadline, a failing
// sync's back-off, a relist older than the pod's last operation).
func TestStep(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := machine{maxBackoff: 10 * time.Second}
	pod := func() *v1.Pod {
		p := testPod("web", "u1", 0)
		p.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}}}
		return p
	}
	running := &podruntime.PodStatus{UID: "u1", Name: "web", Namespace: "default",
		Sandboxes:  []*runtimeapi.PodSandboxStatus{{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		Containers: []*runtimeapi.ContainerStatus{{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING}}}
	exited := &podruntime.PodStatus{UID: "u1", Name: "web", Namespace: "default",
		Sandboxes:  []*runtimeapi.PodSandboxStatus{{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		Containers: []*runtimeapi.ContainerStatus{{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_EXITED}}}
	at := func(ph phase, f ...func(*podState)) podState {
		s := podState{uid: "u1", pod: pod(), source: "file", phase: ph}
		for _, f := range f {
			f(&s)
		}
		return s
	}
	inflight := func(k workKind) func(*podState) { return func(s *podState) { s.inflight = k } }
	removed := func(s *podState) { s.removed = true }
	withRuntime := func(st *podruntime.PodStatus) func(*podState) { return func(s *podState) { s.runtime = st } }
	pending := &admission.Pending{}
	thirty := new(int64)
	*thirty = 30
	other := &admission.Pending{}
	done := make(chan error, 1)
	kill := event{kind: evKill, kill: &nodeapi.KillRequest{Pod: pod(), Status: v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted"}}, done: done}
	deleted := func() *v1.Pod {
		p := pod()
		p.DeletionTimestamp = &metav1.Time{Time: now}
		g := int64(5)
		p.DeletionGracePeriodSeconds = &g
		return p
	}
	changed := func() *v1.Pod {
		p := pod()
		p.Spec.Containers[0].Image = "busybox:2"
		return p
	}
	started := func(ago int64) *metav1.Time {
		return &metav1.Time{Time: now.Add(-time.Duration(ago) * time.Second)}
	}
	withDeadline := func(d int64) func(*podState) {
		return func(s *podState) { s.pod.Spec.ActiveDeadlineSeconds = &d }
	}

	for _, tc := range []struct {
		name  string
		from  podState
		ev    event
		phase phase
		work  []workKind
		// check, when set, checks more of the new state and its work.
		check func(t *testing.T, s podState, w []work)
	}{
		// evAdded.
		{name: "added: to admission", from: at(phaseAdmitting), ev: event{kind: evAdded},
			phase: phaseAdmitting, work: []workKind{workAdmit}},
		{name: "added: finished before", from: at(phaseAdmitting, func(s *podState) { s.pod.Status = v1.PodStatus{Phase: v1.PodSucceeded, Reason: "Done"} }), ev: event{kind: evAdded},
			phase: phaseTerminated, work: []workKind{workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.final == nil || s.final.Reason != "Done" || !s.volumesLeft {
					t.Errorf("final %v, volumesLeft %v: want the pod's own final status and its volumes to tear down", s.final, s.volumesLeft)
				}
			}},
		{name: "added: finished before, still running", from: at(phaseAdmitting, withRuntime(running), func(s *podState) { s.pod.Status.Phase = v1.PodFailed }), ev: event{kind: evAdded},
			phase: phaseTerminating, work: []workKind{workLog}},
		{name: "added: deleted before", from: podState{uid: "u1", pod: deleted()}, ev: event{kind: evAdded},
			phase: phaseTerminated, work: []workKind{workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.deleting || s.grace == nil || *s.grace != 5 {
					t.Errorf("deleting %v, grace %v: want the deletion's 5s", s.deleting, s.grace)
				}
			}},
		{name: "added: deleted before, still running", from: podState{uid: "u1", pod: deleted(), runtime: running}, ev: event{kind: evAdded},
			phase: phaseTerminating, work: []workKind{workLog}},

		// evVerdict.
		{name: "verdict: pending", from: at(phaseAdmitting), ev: event{kind: evVerdict, resp: admission.Response{Pending: pending}},
			phase: phaseAdmitting, work: []workKind{workPublish, workWaitAdmission},
			check: func(t *testing.T, s podState, w []work) {
				if s.admitting != pending || w[1].pending != pending {
					t.Error("the pending admission is not kept and waited for")
				}
			}},
		{name: "verdict: rejected", from: at(phaseAdmitting), ev: event{kind: evVerdict, resp: admission.Response{Reason: "OutOfcpu", Message: "no cpu"}},
			phase: phaseTerminated, work: []workKind{workPublish, workLog, workEvent},
			check: func(t *testing.T, s podState, w []work) {
				if !s.rejected || s.final == nil || s.final.Phase != v1.PodFailed || s.final.Reason != "OutOfcpu" {
					t.Errorf("rejected %v final %v: want Failed OutOfcpu", s.rejected, s.final)
				}
				if w[2].eventType != v1.EventTypeWarning || w[2].msg != "OutOfcpu" || w[2].message != "no cpu" {
					t.Errorf("event %+v: want a Warning OutOfcpu", w[2])
				}
			}},
		{name: "verdict: rejected while running (adopted)", from: at(phaseAdmitting, withRuntime(running)), ev: event{kind: evVerdict, resp: admission.Response{Reason: "OutOfcpu"}},
			phase: phaseTerminating, work: []workKind{workPublish, workLog, workEvent}},
		{name: "verdict: victims", from: at(phaseAdmitting),
			ev:    event{kind: evVerdict, resp: admission.Response{Admit: true, Preemption: &preemption.Plan{Victims: []nodeapi.KillRequest{{Pod: testPod("low", "u9", 0)}}}}},
			phase: phaseWaitingVictims, work: []workKind{workPublish, workPreempt}},
		{name: "verdict: admitted", from: at(phaseAdmitting), ev: event{kind: evVerdict, resp: admission.Response{Admit: true}},
			phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.needSync {
					t.Error("an admitted pod asks for no sync")
				}
			}},

		// evAdmitted.
		{name: "admitted: resumed", from: at(phaseAdmitting, func(s *podState) { s.admitting = pending }), ev: event{kind: evAdmitted, pending: pending},
			phase: phaseAdmitting, work: []workKind{workResume},
			check: func(t *testing.T, s podState, _ []work) {
				if s.admitting != nil {
					t.Error("admitting kept after the slow step")
				}
			}},
		{name: "admitted: another admission's", from: at(phaseAdmitting, func(s *podState) { s.admitting = pending }), ev: event{kind: evAdmitted, pending: other},
			phase: phaseAdmitting},
		{name: "kill while admitting: then its admission is moot", from: at(phaseTerminating, func(s *podState) { s.admitting = pending }), ev: event{kind: evAdmitted, pending: pending},
			phase: phaseTerminating,
			check: func(t *testing.T, s podState, _ []work) {
				if s.admitting != pending {
					t.Error("a pod stopped before its verdict forgot it was admitting (it could be started again without admission)")
				}
			}},

		// evVictimsDone.
		{name: "victims done", from: at(phaseWaitingVictims), ev: event{kind: evVictimsDone}, phase: phaseActive, work: []workKind{workPublish}},
		{name: "victims done after a kill", from: at(phaseTerminating), ev: event{kind: evVictimsDone}, phase: phaseTerminating},

		// evSourceChanged.
		{name: "spec changed: sync as an update", from: at(phaseActive), ev: event{kind: evSourceChanged, pod: changed()},
			phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.needSync || s.op != opUpdate || s.pod.Spec.Containers[0].Image != "busybox:2" {
					t.Errorf("needSync %v op %q: want the new pod synced as an update", s.needSync, s.op)
				}
			}},
		{name: "same pod again: nothing", from: at(phaseActive), ev: event{kind: evSourceChanged, pod: pod()}, phase: phaseActive},
		{name: "deleted while syncing: the sync is aborted", from: at(phaseActive, inflight(workSync)), ev: event{kind: evSourceChanged, pod: deleted()},
			phase: phaseTerminating, work: []workKind{workPublish, workPublish, workLog, workAbort, workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.deleting || *s.grace != 5 {
					t.Errorf("deleting %v grace %v", s.deleting, s.grace)
				}
			}},
		{name: "deleted before admission verdict", from: at(phaseAdmitting, func(s *podState) { s.admitting = pending }), ev: event{kind: evSourceChanged, pod: deleted()},
			phase: phaseTerminating, work: []workKind{workPublish, workPublish, workLog, workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.deleting || s.admitting != pending {
					t.Errorf("deleting %v admitting %v", s.deleting, s.admitting)
				}
			}},
		{name: "deleted when terminated: stays", from: at(phaseTerminated), ev: event{kind: evSourceChanged, pod: deleted()},
			phase: phaseTerminated, work: []workKind{workPublish, workPublish}},

		// evDropped.
		{name: "dropped: stopped, then removed", from: at(phaseActive), ev: event{kind: evDropped},
			phase: phaseTerminating, work: []workKind{workPublish, workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.removed {
					t.Error("not removed")
				}
			}},
		{name: "dropped while waiting for victims", from: at(phaseWaitingVictims), ev: event{kind: evDropped}, phase: phaseTerminating, work: []workKind{workPublish, workPublish}},
		{name: "dropped when stopped and gone from the runtime", from: at(phaseTerminated, func(s *podState) { s.waiters = []chan error{done} }), ev: event{kind: evDropped},
			phase: phaseTerminated, work: []workKind{workPublish, workReply, workDrop}},
		{name: "dropped when stopped, still listed", from: at(phaseTerminated, withRuntime(exited)), ev: event{kind: evDropped},
			phase: phaseTerminated, work: []workKind{workPublish}},
		{name: "dropped twice", from: at(phaseTerminating, removed), ev: event{kind: evDropped}, phase: phaseTerminating},

		// evGivenBack.
		{name: "given back when stopped: revived", from: at(phaseTerminated, removed, func(s *podState) { s.volumesLeft = true }), ev: event{kind: evGivenBack, given: pod()},
			phase: phaseActive, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.removed || s.volumesLeft || !s.needSync || s.op != opSync {
					t.Errorf("removed %v volumesLeft %v needSync %v op %q", s.removed, s.volumesLeft, s.needSync, s.op)
				}
			}},
		{name: "given back while kill-and-remove is in flight: keep", from: at(phaseTerminating, removed, inflight(workKillRemove)), ev: event{kind: evGivenBack, given: pod()},
			phase: phaseTerminating, work: []workKind{workKeep}},
		{name: "given back while killed: not revived", from: at(phaseTerminated, removed, func(s *podState) { s.final = &v1.PodStatus{Reason: "Evicted"} }), ev: event{kind: evGivenBack, given: pod()},
			phase: phaseTerminated},
		{name: "given back after a kill before its verdict: not revived", from: at(phaseTerminated, removed, func(s *podState) { s.admitting = pending }), ev: event{kind: evGivenBack, given: pod()},
			phase: phaseTerminated},
		{name: "not given back", from: at(phaseTerminated, removed), ev: event{kind: evGivenBack, given: nil}, phase: phaseTerminated},

		// evKill.
		{name: "kill while active", from: at(phaseActive, func(s *podState) { s.needSync = true; s.syncAt = now }), ev: kill,
			phase: phaseTerminating, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.final == nil || s.final.Reason != "Evicted" || !s.finalByKill || len(s.waiters) != 1 || s.needSync || !s.syncAt.IsZero() {
					t.Errorf("final %v byKill %v waiters %d needSync %v syncAt %v", s.final, s.finalByKill, len(s.waiters), s.needSync, s.syncAt)
				}
			}},
		{name: "kill while admitting", from: at(phaseAdmitting, func(s *podState) { s.admitting = pending }), ev: kill,
			phase: phaseTerminating, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.admitting != pending {
					t.Error("admitting forgotten")
				}
			}},
		{name: "kill: the first status and the shortest grace stay", from: at(phaseTerminating, func(s *podState) {
			s.final = &v1.PodStatus{Reason: "Preempted"}
			g := int64(1)
			s.grace = &g
		}), ev: event{kind: evKill, kill: &nodeapi.KillRequest{Pod: pod(), Status: v1.PodStatus{Reason: "Evicted"}, GracePeriodOverride: thirty}, done: done},
			phase: phaseTerminating, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.final.Reason != "Preempted" || *s.grace != 1 {
					t.Errorf("final %q grace %d", s.final.Reason, *s.grace)
				}
			}},
		{name: "kill when terminated: answered at once", from: at(phaseTerminated), ev: kill,
			phase: phaseTerminated, work: []workKind{workReply}},

		// evRelist.
		{name: "relist: changed", from: at(phaseActive), ev: event{kind: evRelist, status: running, seq: 2, seen: 1},
			phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.needSync || s.runtime != running {
					t.Errorf("needSync %v", s.needSync)
				}
			}},
		{name: "relist: unchanged", from: at(phaseActive, withRuntime(running)), ev: event{kind: evRelist, status: running, seq: 2, seen: 1}, phase: phaseActive},
		// A pod the runtime could not tell all of: nothing changes and
		// nothing is done (no sync that could make a second sandbox); one
		// warning, and one line when the runtime answers again.
		{name: "relist: the runtime could not inspect the pod", from: at(phaseActive, withRuntime(running)),
			ev:    event{kind: evRelist, status: &podruntime.PodStatus{UID: "u1", InspectErr: errors.New("sandbox s1: boom")}, seq: 2, seen: 1},
			phase: phaseActive, work: []workKind{workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.runtime != running || s.needSync || !s.inspectFailing {
					t.Errorf("runtime %v needSync %v inspectFailing %v: want the last status kept, no sync", s.runtime, s.needSync, s.inspectFailing)
				}
			}},
		{name: "relist: still not inspectable, first relist (adoption)", from: at(phaseActive, func(s *podState) { s.inspectFailing = true }),
			ev:    event{kind: evRelist, status: &podruntime.PodStatus{UID: "u1", InspectErr: errors.New("boom")}, seq: 1, first: true},
			phase: phaseActive,
			check: func(t *testing.T, s podState, _ []work) {
				if s.runtime != nil || s.needSync {
					t.Errorf("runtime %v needSync %v: a pod known in part must not be synced", s.runtime, s.needSync)
				}
			}},
		{name: "relist: inspectable again", from: at(phaseActive, withRuntime(running), func(s *podState) { s.inspectFailing = true }),
			ev: event{kind: evRelist, status: exited, seq: 3, seen: 2}, phase: phaseActive, work: []workKind{workLog, workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.runtime != exited || !s.needSync || s.inspectFailing {
					t.Errorf("runtime %v needSync %v inspectFailing %v", s.runtime, s.needSync, s.inspectFailing)
				}
			}},
		{name: "relist older than the last operation", from: at(phaseActive, func(s *podState) { s.minRelist = 5; s.settle = &settling{} }),
			ev: event{kind: evRelist, status: exited, seq: 4, seen: 3}, phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.needSync || s.settle == nil || !s.settle.changed {
					t.Errorf("needSync %v settle %+v: want the change judged once the sync's own are listed", s.needSync, s.settle)
				}
			}},
		{name: "relist after a sync: only its own changes", from: at(phaseActive, func(s *podState) {
			s.minRelist = 5
			s.settle = &settling{ok: true, started: []string{"s1", "c1"}}
		}), ev: event{kind: evRelist, status: running, seq: 5, seen: 4}, phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.needSync || s.settle != nil {
					t.Errorf("needSync %v settle %+v: a sync's own changes ask for another", s.needSync, s.settle)
				}
			}},
		{name: "relist after a sync that left more to do: its own changes ask for the next", from: at(phaseActive, func(s *podState) {
			s.minRelist = 5
			s.settle = &settling{ok: true, more: true, started: []string{"s1", "c1"}}
		}), ev: event{kind: evRelist, status: running, seq: 5, seen: 4}, phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.needSync || s.settle != nil {
					t.Errorf("needSync %v settle %+v: a started sidecar must let the containers after it start", s.needSync, s.settle)
				}
			}},
		{name: "relist after a sync: a container exited already", from: at(phaseActive, func(s *podState) {
			s.minRelist = 5
			s.settle = &settling{ok: true, started: []string{"s1", "c1"}}
		}), ev: event{kind: evRelist, status: exited, seq: 5, seen: 4}, phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.needSync {
					t.Error("an exit after the sync asks for no sync")
				}
			}},
		{name: "relist after a deleted pod's kill settles its status", from: at(phaseTerminated, func(s *podState) { s.deleting = true; s.minRelist = 5 }),
			ev: event{kind: evRelist, seq: 5, seen: 4}, phase: phaseTerminated, work: []workKind{workPublish}},

		// evResult.
		{name: "failed sync: back-off", from: at(phaseActive, inflight(workSync)),
			ev: event{kind: evResult, result: &result{kind: workSync, sync: podruntime.Result{Err: errors.New("boom")}}, relistStarted: 7}, phase: phaseActive, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.backoff != time.Second || !s.syncAt.Equal(now.Add(time.Second)) || s.minRelist != 8 || !s.idle() {
					t.Errorf("backoff %v syncAt %v minRelist %d", s.backoff, s.syncAt, s.minRelist)
				}
			}},
		{name: "failed sync again: the back-off doubles up to its cap", from: at(phaseActive, inflight(workSync), func(s *podState) { s.backoff = 8 * time.Second }),
			ev: event{kind: evResult, result: &result{kind: workSync, sync: podruntime.Result{Err: errors.New("boom")}}}, phase: phaseActive, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if s.backoff != 10*time.Second {
					t.Errorf("backoff %v, want the 10s cap", s.backoff)
				}
			}},
		{name: "sync ok: retry after, allocated resources", from: at(phaseActive, inflight(workSync), func(s *podState) {
			s.backoff = 4 * time.Second
			s.settle = &settling{}
			s.resources.desired = desiredResources(s.pod)
		}), ev: event{kind: evResult, result: &result{kind: workSync, sync: podruntime.Result{RetryAfter: 3 * time.Second, Started: []string{"c1"}, More: true}}},
			phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.backoff != 0 || !s.syncAt.Equal(now.Add(3*time.Second)) || !s.settle.ok || !s.settle.more || len(s.settle.started) != 1 {
					t.Errorf("backoff %v syncAt %v settle %+v", s.backoff, s.syncAt, s.settle)
				}
				if diff := cmp.Diff(s.resources.desired, s.resources.allocated); diff != "" || !s.resources.allocated["c"].Limits[v1.ResourceMemory].Equal(resource.MustParse("64Mi")) {
					t.Errorf("allocated is not what the sync applied (-desired +allocated):\n%s", diff)
				}
			}},
		{name: "sync ended after a kill: moot", from: at(phaseTerminating, inflight(workSync)),
			ev: event{kind: evResult, result: &result{kind: workSync, sync: podruntime.Result{Err: errors.New("cancelled")}}}, phase: phaseTerminating, work: []workKind{workPublish}},
		{name: "killed", from: at(phaseTerminating, inflight(workKill), func(s *podState) { s.waiters = []chan error{done} }),
			ev: event{kind: evResult, result: &result{kind: workKill}}, phase: phaseTerminated, work: []workKind{workPublish, workReply}},
		{name: "killed, volumes left", from: at(phaseTerminating, inflight(workKill)),
			ev: event{kind: evResult, result: &result{kind: workKill, volumesErr: errors.New("busy")}}, phase: phaseTerminated, work: []workKind{workPublish, workLog},
			check: func(t *testing.T, s podState, _ []work) {
				if !s.volumesLeft || s.backoff != time.Second {
					t.Errorf("volumesLeft %v backoff %v", s.volumesLeft, s.backoff)
				}
			}},
		{name: "kill failed: back-off, callers told", from: at(phaseTerminating, inflight(workKill), func(s *podState) { s.waiters = []chan error{done} }),
			ev: event{kind: evResult, result: &result{kind: workKill, killErr: errors.New("stuck")}}, phase: phaseTerminating, work: []workKind{workPublish, workLog, workReply},
			check: func(t *testing.T, s podState, w []work) {
				if w[2].err == nil || s.backoff != time.Second || len(s.waiters) != 0 {
					t.Errorf("reply %v backoff %v waiters %d", w[2].err, s.backoff, len(s.waiters))
				}
			}},
		{name: "given back while kill-and-remove was in flight: revived once stopped", from: at(phaseTerminating, removed, inflight(workKillRemove)),
			ev: event{kind: evResult, result: &result{kind: workKill}, given: pod()}, phase: phaseActive, work: []workKind{workPublish, workPublish, workLog}},
		{name: "killed and removed", from: at(phaseTerminating, removed, inflight(workKillRemove)),
			ev: event{kind: evResult, result: &result{kind: workKillRemove}}, phase: phaseTerminated, work: []workKind{workPublish}},
		{name: "removed", from: at(phaseTerminated, removed, inflight(workRemove), func(s *podState) { s.waiters = []chan error{done} }),
			ev: event{kind: evResult, result: &result{kind: workRemove}}, phase: phaseTerminated, work: []workKind{workPublish, workReply, workDrop}},
		{name: "remove failed", from: at(phaseTerminated, removed, inflight(workRemove)),
			ev: event{kind: evResult, result: &result{kind: workRemove, removeErr: errors.New("busy")}}, phase: phaseTerminated, work: []workKind{workPublish, workLog}},
		{name: "volumes torn down", from: at(phaseTerminated, inflight(workTearDown), func(s *podState) { s.volumesLeft = true; s.backoff = time.Second }),
			ev: event{kind: evResult, result: &result{kind: workTearDown}}, phase: phaseTerminated, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.volumesLeft || s.backoff != 0 {
					t.Errorf("volumesLeft %v backoff %v", s.volumesLeft, s.backoff)
				}
			}},

		// evProbe, evResync.
		{name: "liveness failed: sync", from: at(phaseActive), ev: event{kind: evProbe, probe: &prober.Update{ProbeType: prober.Liveness, Result: prober.Failure}},
			phase: phaseActive, work: []workKind{workPublish, workLog}},
		{name: "startup succeeded: sync", from: at(phaseActive), ev: event{kind: evProbe, probe: &prober.Update{ProbeType: prober.Startup, Result: prober.Success}},
			phase: phaseActive, work: []workKind{workPublish}},
		{name: "readiness failed: status only", from: at(phaseActive), ev: event{kind: evProbe, probe: &prober.Update{ProbeType: prober.Readiness, Result: prober.Failure}},
			phase: phaseActive, work: []workKind{workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.needSync {
					t.Error("a readiness failure asks for a sync")
				}
			}},
		{name: "resync", from: at(phaseActive), ev: event{kind: evResync}, phase: phaseActive,
			check: func(t *testing.T, s podState, _ []work) {
				if !s.needSync {
					t.Error("no sync")
				}
			}},
		{name: "resync of a terminated pod: nothing", from: at(phaseTerminated), ev: event{kind: evResync}, phase: phaseTerminated,
			check: func(t *testing.T, s podState, _ []work) {
				if s.needSync {
					t.Error("sync asked")
				}
			}},

		// evDerived.
		{name: "finished under its restartPolicy", from: at(phaseActive, inflight(workSync)), ev: event{kind: evDerived, finished: true, relisted: true},
			phase: phaseTerminating, work: []workKind{workAbort}},
		{name: "finished before the first relist: not yet", from: at(phaseActive), ev: event{kind: evDerived, finished: true}, phase: phaseActive},
		{name: "active deadline passed", from: at(phaseActive, withDeadline(30)), ev: event{kind: evDerived, started: started(31)},
			phase: phaseTerminating, work: []workKind{workEvent, workLog, workPublish},
			check: func(t *testing.T, s podState, _ []work) {
				if s.final == nil || s.final.Reason != reasonDeadlineExceeded || s.final.Phase != v1.PodFailed {
					t.Errorf("final %v", s.final)
				}
			}},
		{name: "active deadline to come: a sync then", from: at(phaseActive, withDeadline(30)), ev: event{kind: evDerived, started: started(10)}, phase: phaseActive,
			check: func(t *testing.T, s podState, _ []work) {
				if !s.syncAt.Equal(now.Add(20 * time.Second)) {
					t.Errorf("syncAt %v, want the deadline", s.syncAt)
				}
			}},

		// evDispatch.
		{name: "dispatch: sync", from: at(phaseActive, withRuntime(running), func(s *podState) { s.needSync = true; s.op = opCreate }), ev: event{kind: evDispatch},
			phase: phaseActive, work: []workKind{workSync},
			check: func(t *testing.T, s podState, w []work) {
				if s.inflight != workSync || s.needSync || s.settle == nil || s.settle.base != running || w[0].op != opCreate {
					t.Errorf("inflight %v needSync %v settle %+v op %q", s.inflight, s.needSync, s.settle, w[0].op)
				}
			}},
		{name: "dispatch: due", from: at(phaseActive, func(s *podState) { s.syncAt = now }), ev: event{kind: evDispatch}, phase: phaseActive, work: []workKind{workSync}},
		{name: "dispatch: not due", from: at(phaseActive, func(s *podState) { s.syncAt = now.Add(time.Second) }), ev: event{kind: evDispatch}, phase: phaseActive},
		{name: "dispatch: a pod of the same name is stopping", from: at(phaseActive, func(s *podState) { s.needSync = true }),
			ev: event{kind: evDispatch, stopping: map[string]bool{"default/web": true}}, phase: phaseActive},
		{name: "dispatch: waits for a relist newer than its last operation", from: at(phaseActive, func(s *podState) { s.needSync = true; s.minRelist = 3 }),
			ev: event{kind: evDispatch, relistSeen: 2}, phase: phaseActive},
		{name: "dispatch: busy", from: at(phaseActive, inflight(workSync), func(s *podState) { s.needSync = true }), ev: event{kind: evDispatch}, phase: phaseActive},
		{name: "dispatch: kill", from: at(phaseTerminating, withRuntime(running)), ev: event{kind: evDispatch}, phase: phaseTerminating, work: []workKind{workKill}},
		{name: "dispatch: kill in back-off", from: at(phaseTerminating, func(s *podState) { s.syncAt = now.Add(time.Second) }), ev: event{kind: evDispatch}, phase: phaseTerminating},
		{name: "dispatch: kill and remove", from: at(phaseTerminating, removed), ev: event{kind: evDispatch}, phase: phaseTerminating, work: []workKind{workKillRemove}},
		{name: "dispatch: given back, kill only", from: at(phaseTerminating, removed), ev: event{kind: evDispatch, given: pod()}, phase: phaseTerminating, work: []workKind{workKill}},
		{name: "dispatch: remove", from: at(phaseTerminated, removed, withRuntime(exited)), ev: event{kind: evDispatch}, phase: phaseTerminated, work: []workKind{workRemove}},
		{name: "dispatch: running again behind our back", from: at(phaseTerminated, withRuntime(running)), ev: event{kind: evDispatch}, phase: phaseTerminated, work: []workKind{workKill}},
		{name: "dispatch: volumes left", from: at(phaseTerminated, func(s *podState) { s.volumesLeft = true }), ev: event{kind: evDispatch}, phase: phaseTerminated, work: []workKind{workTearDown}},
		{name: "dispatch: terminated, nothing to do", from: at(phaseTerminated), ev: event{kind: evDispatch}, phase: phaseTerminated},
		{name: "dispatch: admitting, nothing to do", from: at(phaseAdmitting, func(s *podState) { s.needSync = true }), ev: event{kind: evDispatch}, phase: phaseAdmitting},

		// An orphan, known only from the runtime: killed and removed, then
		// dropped.
		{name: "orphan: kill and remove", from: podState{uid: "u1", phase: phaseTerminating, removed: true, runtime: running}, ev: event{kind: evDispatch},
			phase: phaseTerminating, work: []workKind{workKillRemove},
			check: func(t *testing.T, _ podState, w []work) {
				if w[0].pod != nil || w[0].status != running {
					t.Errorf("work %+v: want the runtime's status and no pod", w[0])
				}
			}},
		{name: "orphan: given with the same UID is not revived", from: podState{uid: "u1", phase: phaseTerminated, removed: true}, ev: event{kind: evGivenBack, given: pod()}, phase: phaseTerminated},
		{name: "orphan: removed, dropped", from: podState{uid: "u1", phase: phaseTerminated, removed: true, inflight: workRemove}, ev: event{kind: evResult, result: &result{kind: workRemove}},
			phase: phaseTerminated, work: []workKind{workPublish, workDrop}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, w := m.step(tc.from, tc.ev, now, nil)
			if s.phase != tc.phase {
				t.Errorf("phase %v, want %v", s.phase, tc.phase)
			}
			var kinds []workKind
			for _, w := range w {
				kinds = append(kinds, w.kind)
			}
			if diff := cmp.Diff(tc.work, kinds); diff != "" {
				t.Errorf("work (-want +got):\n%s", diff)
			}
			if tc.check != nil {
				tc.check(t, s, w)
			}
		})
	}
}

// TestStepIsPure checks that step leaves the state it is given alone (a
// settling is copied, not changed in place) and gives the same answer for
// the same input.
func TestStepIsPure(t *testing.T) {
	t.Parallel()
	m := machine{maxBackoff: 10 * time.Second}
	now := time.Unix(1000, 0)
	in := podState{uid: "u1", pod: testPod("web", "u1", 0), phase: phaseActive, minRelist: 5, settle: &settling{}, inflight: workSync}
	ev := event{kind: evRelist, status: &podruntime.PodStatus{UID: "u1"}, seq: 4, seen: 3}
	s1, w1 := m.step(in, ev, now, nil)
	s2, w2 := m.step(in, ev, now, nil)
	if in.settle.changed {
		t.Error("step changed the settling of the state it was given")
	}
	if !s1.settle.changed || !s2.settle.changed || len(w1) != len(w2) {
		t.Errorf("the same input gave different answers: %+v %+v", s1.settle, s2.settle)
	}
}
