package agent

import (
	"log/slog"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/prober"
)

// phase is where a pod is in its life in the table.
type phase int

const (
	// phaseAdmitting: the admission waits on a slow step (the pod's device
	// allocation) on a goroutine of its own; not synced yet, but counted
	// among the active pods, so that the pods admitted meanwhile leave room
	// for it and its devices are not freed as those of an inactive pod.
	phaseAdmitting phase = iota
	// phaseWaitingVictims: admitted with a preemption plan whose victims are
	// being killed; not synced yet.
	phaseWaitingVictims
	// phaseActive: admitted, synced whenever needed.
	phaseActive
	// phaseTerminating: its containers are to be stopped (killed on request,
	// deleted, dropped by its source, finished under its restartPolicy, past
	// its active deadline, or an orphan).
	phaseTerminating
	// phaseTerminated: stopped (or rejected); started again only when a
	// source gives back a removed pod (see revive).
	phaseTerminated
)

// podState is one pod's lifecycle: its phase, the work in flight, and the
// data the rules read (the pod, its runtime status, its final status, the
// kill's grace period and callers). rejected, deleting and removed are facts
// (of admission, of the pod object, of the sources), not stages: they
// combine with each other and with the phases (a rejected pod may be
// deleted, then dropped), and the rules read them as guards. Only step
// changes a podState; the loop reads it to route events, publish views and
// arm its timer.
type podState struct {
	uid types.UID
	// pod is the source's latest pod; nil for an orphan (known only from the
	// runtime).
	pod    *v1.Pod
	source string
	phase  phase
	// inflight is the worker operation running for the pod (workNone: none;
	// a pod has at most one at a time).
	inflight workKind

	// rejected: admission refused the pod; final holds the rejection.
	rejected bool
	// admitting is the pod's pending admission, from the moment it went
	// off the loop until its verdict; it stays set when the pod is stopped
	// before the verdict, so that such a pod is never started again
	// without an admission (see givenAgain).
	admitting *admission.Pending
	// deleting: the pod has a deletionTimestamp; it is stopped with the
	// deletion's grace period and never started again.
	deleting bool
	// removed: no source wants the pod; it is removed from the runtime once
	// stopped, then from the table.
	removed bool
	// final is the status a kill request, a rejection or the active
	// deadline fixed.
	final *v1.PodStatus
	// finalByKill: final came from a kill request (an eviction or a
	// preemption), whose phase the containers' exits may still change
	// (podstatus.Input.Killed).
	finalByKill bool
	// inspectFailing: the last relist could not get the pod's status from
	// the runtime (podruntime.PodStatus.InspectErr); logged once per outage.
	inspectFailing bool
	// grace is the kill's grace period override (nil: the pod's own).
	grace *int64
	// waiters are KillPod callers waiting for the pod to stop.
	waiters []chan error
	// volumesLeft: the pod has stopped for good but its volumes are still
	// to be torn down (a tear-down failed, or it finished in an earlier run).
	volumesLeft bool

	// resources is what in-place resize will compare: the containers'
	// resources as the spec asks (desired) and as last handed to the
	// runtime (allocated). See resources.
	resources podResources

	// runtime is the pod's status from the latest relist (nil: none).
	runtime *podruntime.PodStatus
	// sync is what the pod's last SyncPod learnt (waiting reasons,
	// crash-loop and image pull back-offs), for its next SyncPod and its
	// status.
	sync podruntime.SyncState
	// settle, from a sync's dispatch until the first relist after its
	// result, holds what tells the sync's own changes from the others (see
	// stepRelist): only those ask for another sync. step never changes a
	// settling in place: a changed one is a copy.
	settle *settling

	// needSync asks for a sync as soon as the pod can have one; op is the
	// worker operation it counts as.
	needSync bool
	op       string
	// syncAt, when set, is when the next sync (active) or retry (stopping,
	// removing) is due.
	syncAt  time.Time
	backoff time.Duration
	// minRelist is the first relist whose status is newer than the pod's
	// last worker operation: the next operation waits for it.
	minRelist uint64
}

// idle reports whether no worker operation of s is in flight.
func (s *podState) idle() bool { return s.inflight == workNone }

// settling is what a sync in flight, or just ended, changes in the runtime:
// a relist that shows only that asks for no sync of its own, so that a
// pod's start takes one SyncPod.
type settling struct {
	// base is the runtime status the sync was given.
	base *podruntime.PodStatus
	// changed: a relist during the sync (or before its own changes were
	// listed) saw the pod change; judged against base once they are.
	changed bool
	// ok: the sync ended without an error; started and removed are the
	// IDs it reported, more that it left the pod's next step to the sync
	// after them (podruntime.Result).
	ok, more         bool
	started, removed []string
}

// own reports whether st differs from s.base only by s's sync: the sandbox
// and containers it started, ready and running, the containers it removed,
// gone, and the IPs of a sandbox it ran.
func (s *settling) own(st *podruntime.PodStatus) bool {
	var base podruntime.PodStatus
	if s.base != nil {
		base = *s.base
	}
	var now podruntime.PodStatus
	if st != nil {
		now = *st
	}
	sbState := make(map[string]runtimeapi.PodSandboxState, len(base.Sandboxes))
	for _, sb := range base.Sandboxes {
		sbState[sb.GetId()] = sb.GetState()
	}
	ctrState := make(map[string]runtimeapi.ContainerState, len(base.Containers))
	for _, c := range base.Containers {
		ctrState[c.GetId()] = c.GetState()
	}
	newSandbox := false
	for _, sb := range now.Sandboxes {
		old, ok := sbState[sb.GetId()]
		switch {
		case ok && old == sb.GetState():
		case !ok && slices.Contains(s.started, sb.GetId()) && sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY:
			newSandbox = true
		default:
			return false
		}
		delete(sbState, sb.GetId())
	}
	if len(sbState) > 0 {
		return false // a sandbox went
	}
	for _, c := range now.Containers {
		old, ok := ctrState[c.GetId()]
		switch {
		case ok && old == c.GetState():
		case !ok && slices.Contains(s.started, c.GetId()) && c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING:
		default:
			return false
		}
		delete(ctrState, c.GetId())
	}
	for id := range ctrState {
		if !slices.Contains(s.removed, id) {
			return false
		}
	}
	return newSandbox || slices.Equal(base.IPs, now.IPs)
}

// eventKind is what happened to a pod.
type eventKind int

const (
	// evAdded: a source gave a pod the table did not hold.
	evAdded eventKind = iota
	// evVerdict: admission's response for the pod (resp; from Start, or from
	// Resume after its slow step).
	evVerdict
	// evAdmitted: the slow step of pending admission pending is done.
	evAdmitted
	// evVictimsDone: the preemption plan's victims stopped.
	evVictimsDone
	// evSourceChanged: the pod's source gave it again (pod; maybe changed,
	// maybe with a deletionTimestamp).
	evSourceChanged
	// evDropped: the pod's source no longer gives it.
	evDropped
	// evGivenBack: the source of a removed pod gave a set, in which given is
	// the pod with its UID (nil: none).
	evGivenBack
	// evKill: a KillPod request (kill); done gets its answer.
	evKill
	// evRelist: relist seq listed the runtime: status is the pod's (nil:
	// nothing), seen the relist received before it, first whether it is the
	// loop's first.
	evRelist
	// evResult: the pod's worker finished (result); relistStarted is the
	// last relist started (the next shows what the worker did), given as for
	// evGivenBack.
	evResult
	// evProbe: a probe result of the pod changed (probe).
	evProbe
	// evResync: the resync ticker fired.
	evResync
	// evDerived: the pod's status was derived (podstatus.Derive): started
	// is its start time, finished whether its containers finished under its
	// restartPolicy; relisted is whether the runtime was listed yet.
	evDerived
	// evDispatch: the pod may get its next worker operation: relistSeen is
	// the last relist received, stopping the names of the pods stopping
	// (read only), given as for evGivenBack.
	evDispatch
)

// event is one thing that happened to a pod: its kind and the fields that
// kind names (a struct rather than an interface, so that the events every
// turn hands every pod, evRelist and evDispatch, cost no allocation).
type event struct {
	kind     eventKind
	pod      *v1.Pod
	given    *v1.Pod
	resp     admission.Response
	pending  *admission.Pending
	kill     *nodeapi.KillRequest
	done     chan error
	status   *podruntime.PodStatus
	seq      uint64
	seen     uint64
	first    bool
	result   *result
	probe    *prober.Update
	started  *metav1.Time
	finished bool
	relisted bool
	// relistStarted (evResult) and relistSeen (evDispatch).
	relistStarted uint64
	relistSeen    uint64
	stopping      map[string]bool
}

// workKind is what a work item asks of the loop.
type workKind int

const (
	workNone workKind = iota
	// The worker operations, each run on a goroutine of its own.
	workSync
	workKill
	workKillRemove
	workRemove
	// workTearDown tears down the volumes of a stopped pod.
	workTearDown

	// workAbort cancels the sync in flight (the pod is to stop).
	workAbort
	// workKeep turns the kill-and-remove in flight into a kill (the source
	// gave the pod back); the loop does it once.
	workKeep
	// workReply answers KillPod callers (waiters, err) once the table is
	// published.
	workReply
	// workPublish asks for the pod's view to be derived again.
	workPublish
	// workDrop deletes the pod from the table (a source giving it again gets
	// it admitted anew).
	workDrop
	// workAdmit starts the pod's admission; workResume finishes pending
	// once its slow step is done; both answer with evVerdict.
	workAdmit
	workResume
	// workWaitAdmission runs pending's slow step off the loop (then
	// evAdmitted).
	workWaitAdmission
	// workPreempt kills plan's victims off the loop (then evVictimsDone).
	workPreempt
	// workLog logs msg with args at level; workEvent records an event of
	// the pod.
	workLog
	workEvent
)

// work is one thing step asks the loop to do.
type work struct {
	kind workKind
	// The worker operations: op is the metric label ("" for none); state,
	// for a sync, the State of the pod's previous sync.
	op     string
	pod    *v1.Pod
	status *podruntime.PodStatus
	state  podruntime.SyncState
	grace  *int64
	// workReply.
	waiters []chan error
	err     error
	// workResume, workWaitAdmission.
	pending *admission.Pending
	// abort and keep, for a sync and a kill-and-remove, are the channels
	// the loop closes for workAbort and workKeep.
	abort, keep <-chan struct{}
	// workPreempt.
	plan *preemption.Plan
	// workLog (msg, args, level) and workEvent (eventType, msg as the
	// reason, message).
	level     slog.Level
	msg       string
	args      []any
	eventType string
	message   string
}

// machine holds the settings step's rules read.
type machine struct {
	// maxBackoff caps the retry delay after a failed operation.
	maxBackoff time.Duration
}

// step is the pod lifecycle: it takes a pod's state and one event at now and
// returns the new state and the work the event asks for, appended to w (a
// buffer the caller reuses; nil will do), with no I/O, no goroutines and no
// clock reads (now is data). The loop routes each
// message to the pods it concerns, runs the work, and feeds the outcomes
// back as events.
//
//	                           evAdded
//	            +-------------------+----------------------+
//	            | workAdmit               finished or deleted before it
//	            v                         ran here: Terminated (Terminating
//	     evVerdict(pending)               when something of it runs)
//	      +-----------+  evVerdict(victims)  +----------------+
//	      | Admitting |--------------------->| WaitingVictims |
//	      +-----------+                      +----------------+
//	            | evVerdict(admit)                   | evVictimsDone
//	            v                                    v
//	      +-----------------------------------------------+
//	      |                     Active                    |<--+
//	      +-----------------------------------------------+   |
//	            |   evDispatch: sync when asked (relist changed,  |
//	            |   probe, resync, spec changed) or due (back-off,|
//	            |   retry, active deadline); evResult(sync)       |
//	            |                                                 |
//	            | evKill, deletionTimestamp, evDropped,           |
//	            | evDerived (finished, or past its deadline)      |
//	            v                                                 |
//	      +-------------+  evResult(kill, kill-and-remove)        |
//	      | Terminating |------------------+                      | revive:
//	      +-------------+                  |                      | evGivenBack,
//	        ^   evDispatch: kill;          v                      | evResult(kill)
//	        |   failed: back-off     +------------+               | given back
//	        |                        | Terminated |---------------+
//	evVerdict(reject) with           +------------+
//	something running;                 | evDispatch: a kill when something
//	an orphan (relist)                 | runs again, a tear-down of volumes
//	                                   | left, a remove when removed
//	                                   v evResult(remove), or evDropped
//	                               (gone: workDrop)   with nothing left
//
// Admitting and WaitingVictims go to Terminating too on evKill, a
// deletionTimestamp and evDropped; so does Active, and a sync in flight is
// then aborted (workAbort). evVerdict(reject) with nothing running goes to
// Terminated. A pod leaves Terminated only when its source gives it back
// after removing it (revive), unless it was rejected, killed, deleted or
// stopped before its admission's verdict.
func (m machine) step(s podState, ev event, now time.Time, w []work) (podState, []work) {
	switch ev.kind {
	case evAdded:
		w = m.added(&s, w)
	case evVerdict:
		w = s.verdict(w, ev.resp)
	case evAdmitted:
		if ev.pending == s.admitting && s.phase == phaseAdmitting {
			s.admitting = nil
			w = append(w, work{kind: workResume, pending: ev.pending})
		}
	case evVictimsDone:
		if s.phase == phaseWaitingVictims {
			s.phase, s.needSync = phaseActive, true
			w = append(w, work{kind: workPublish})
		}
	case evSourceChanged:
		w = s.sourceChanged(w, ev.pod)
	case evDropped:
		w = s.dropped(w)
	case evGivenBack:
		if s.givenAgain(ev.given) == nil {
			break
		}
		switch {
		case s.phase == phaseTerminated && s.idle():
			w = s.revive(w, ev.given)
		case s.inflight == workKillRemove:
			w = append(w, work{kind: workKeep}) // revived once stopped (evResult)
		}
	case evKill:
		w = s.killed(w, *ev.kill, ev.done)
	case evRelist:
		w = s.relisted(w, &ev)
	case evResult:
		w = m.result(w, &s, &ev, now)
	case evProbe:
		w = s.probed(w, *ev.probe)
	case evResync:
		if s.phase == phaseActive {
			s.needSync = true
		}
	case evDerived:
		w = s.derivedStatus(w, &ev, now)
	case evDispatch:
		w = s.dispatch(w, &ev, now)
	}
	return s, w
}

// added places a pod new to the table: a pod that finished or was deleted
// before it ran here is not admitted (and stopped if it runs from an earlier
// run); any other goes to admission.
func (m machine) added(s *podState, w []work) []work {
	p := s.pod
	s.op = opCreate
	if ph := p.Status.Phase; ph == v1.PodSucceeded || ph == v1.PodFailed {
		// It finished in an earlier run (a source that keeps final
		// statuses, as the local pod store does): never started again,
		// and its final status stays.
		st := *p.Status.DeepCopy()
		s.phase, s.final = phaseTerminated, &st
		s.volumesLeft = true // its volumes may be there from that run
		if hasRunning(s.runtime) {
			s.phase = phaseTerminating
		}
		return append(w, logf(slog.LevelInfo, "Pod finished before; not starting it", "pod", nodeapi.PodName(p), "podUID", p.UID, "phase", ph, "reason", st.Reason))
	}
	if p.DeletionTimestamp != nil {
		// Deleted before it ran here (or while the agent was down): never
		// started; stopped if it runs from an earlier run.
		s.deleting, s.grace, s.phase = true, p.DeletionGracePeriodSeconds, phaseTerminated
		if hasRunning(s.runtime) {
			s.phase = phaseTerminating
		}
		return append(w, logf(slog.LevelInfo, "Pod is being deleted; not starting it", "pod", nodeapi.PodName(p), "podUID", p.UID))
	}
	return append(w, work{kind: workAdmit})
}

// verdict applies the admission's response to a pod being admitted.
func (s *podState) verdict(w []work, resp admission.Response) []work {
	p := s.pod
	switch {
	case resp.Pending != nil:
		s.phase, s.admitting = phaseAdmitting, resp.Pending
		return append(w, work{kind: workPublish}, work{kind: workWaitAdmission, pending: resp.Pending})
	case !resp.Admit:
		s.phase, s.rejected = phaseTerminated, true
		s.final = &v1.PodStatus{Phase: v1.PodFailed, Reason: resp.Reason, Message: resp.Message}
		if hasRunning(s.runtime) {
			s.phase = phaseTerminating // adopted but no longer admissible
		}
		return append(w,
			work{kind: workPublish},
			logf(slog.LevelInfo, "Pod rejected by admission", "pod", nodeapi.PodName(p), "podUID", p.UID, "reason", resp.Reason, "message", resp.Message),
			work{kind: workEvent, eventType: v1.EventTypeWarning, msg: resp.Reason, message: resp.Message},
		)
	case len(resp.Victims()) > 0:
		s.phase = phaseWaitingVictims
		return append(w, work{kind: workPublish}, work{kind: workPreempt, plan: resp.Preemption})
	default:
		s.phase, s.needSync = phaseActive, true
		return append(w, work{kind: workPublish})
	}
}

// sourceChanged takes the pod as its source gives it again: a changed spec
// asks for a sync, a deletionTimestamp stops it for good.
func (s *podState) sourceChanged(w []work, p *v1.Pod) []work {
	changed := !equality.Semantic.DeepEqual(s.pod.Spec, p.Spec)
	if changed || !equality.Semantic.DeepEqual(s.pod.ObjectMeta, p.ObjectMeta) {
		s.pod = p
		s.resources.desired = desiredResources(p)
		w = append(w, work{kind: workPublish})
	}
	if p.DeletionTimestamp != nil && !s.deleting {
		return s.deletedNow(w)
	}
	if changed && s.phase == phaseActive {
		s.needSync, s.op = true, opUpdate
	}
	return w
}

// deletedNow stops a pod that got a deletionTimestamp, with the deletion's
// grace period (the shorter one if a kill is under way); it stays stopped.
func (s *podState) deletedNow(w []work) []work {
	s.deleting = true
	w = append(w, work{kind: workPublish})
	if g := s.pod.DeletionGracePeriodSeconds; g != nil && (s.grace == nil || *g < *s.grace) {
		s.grace = g
	}
	switch s.phase {
	case phaseAdmitting, phaseWaitingVictims, phaseActive:
		args := []any{"pod", nodeapi.PodName(s.pod), "podUID", s.uid}
		if s.grace != nil {
			args = append(args, "gracePeriod", *s.grace)
		}
		w = append(w, logf(slog.LevelInfo, "Killing pod being deleted", args...))
		w = s.terminate(w)
	}
	return w
}

// dropped handles a pod its source dropped: stop it, then remove it.
func (s *podState) dropped(w []work) []work {
	if s.removed {
		return w
	}
	s.removed = true
	w = append(w, work{kind: workPublish})
	switch s.phase {
	case phaseAdmitting, phaseWaitingVictims, phaseActive:
		w = s.terminate(w)
	case phaseTerminated:
		if s.runtime == nil && s.idle() {
			w = s.drop(w)
		}
	}
	return w
}

// terminate moves a pod to phaseTerminating: its next work is a kill; a
// sync in flight need not be waited for.
func (s *podState) terminate(w []work) []work {
	if s.inflight == workSync {
		w = append(w, work{kind: workAbort})
	}
	s.phase = phaseTerminating
	s.needSync, s.syncAt, s.backoff, s.settle = false, time.Time{}, 0, nil
	return append(w, work{kind: workPublish})
}

// killed handles a KillPod request: the first request's status is final, the
// shortest grace period wins, and every caller is answered once the pod
// stopped (at once when it has).
func (s *podState) killed(w []work, req nodeapi.KillRequest, done chan error) []work {
	if s.pod == nil || s.phase == phaseTerminated {
		return append(w, work{kind: workReply, waiters: []chan error{done}})
	}
	if s.final == nil {
		st := req.Status
		s.final, s.finalByKill = &st, true
	}
	if g := req.GracePeriodOverride; g != nil && (s.grace == nil || *g < *s.grace) {
		s.grace = g
	}
	s.waiters = append(s.waiters[:len(s.waiters):len(s.waiters)], done)
	w = s.terminate(w)
	return append(w, logf(slog.LevelInfo, "Killing pod", "pod", nodeapi.PodName(s.pod), "podUID", s.uid, "reason", req.Status.Reason))
}

// relisted takes the pod's status from a relist: a change asks for a sync of
// an active pod, unless it is only what the pod's last sync did.
func (s *podState) relisted(w []work, ev *event) []work {
	if ev.status != nil && ev.status.InspectErr != nil {
		// The runtime could not tell part of the pod's status: the pod keeps
		// its last one and nothing is done on this relist; the next asks
		// again (the kubelet's PLEG inspects such a pod again later).
		if !s.inspectFailing {
			s.inspectFailing = true
			w = append(w, logf(slog.LevelWarn, "Cannot get the pod's status from the runtime; keeping its last status", "podUID", s.uid, "err", ev.status.InspectErr))
		}
		return w
	}
	if s.inspectFailing {
		s.inspectFailing = false
		w = append(w, logf(slog.LevelInfo, "The pod's status can be read from the runtime again", "podUID", s.uid))
	}
	// A deleted pod's status is final once the runtime was listed after
	// its kill, even if the listing shows nothing new.
	settles := s.deleting && s.phase == phaseTerminated && ev.seen < s.minRelist && ev.seq >= s.minRelist
	changed := ev.first || settles || runtimeChanged(s.runtime, ev.status)
	if changed {
		w = append(w, work{kind: workPublish})
	}
	switch t := s.settle; {
	case s.phase != phaseActive:
	case t != nil && (!s.idle() || ev.seq < s.minRelist):
		// It may show part of what the sync does: judged once all of it
		// is listed.
		c := *t
		c.changed = c.changed || changed
		s.settle = &c
	case t != nil:
		// The first relist after the sync: a change that is not the
		// sync's own (a container that exited already) asks for another,
		// and so does its own when the sync left more to do (a sidecar
		// started, the containers after it not yet).
		if (changed || t.changed) && !(t.ok && !t.more && t.own(ev.status)) {
			s.needSync = true
		}
		s.settle = nil
	case changed:
		s.needSync = true
	}
	s.runtime = ev.status
	return w
}

// result takes the report of the pod's worker.
func (m machine) result(w []work, s *podState, ev *event, now time.Time) []work {
	r := ev.result
	s.inflight = workNone
	s.minRelist = ev.relistStarted + 1
	w = append(w, work{kind: workPublish})
	name := joinName(s.runtimeNamespace(), s.name())
	switch r.kind {
	case workSync:
		s.sync = r.sync.State
		if s.op != opUpdate || !s.needSync {
			s.op = opSync
		}
		t := s.settle
		if s.phase != phaseActive {
			s.settle = nil
			return w // stopping: the sync was cancelled or is moot
		}
		if r.sync.Err != nil && t != nil {
			// A failed sync is retried on its back-off, or at once when the
			// pod changed meanwhile.
			s.settle = nil
			s.needSync = s.needSync || t.changed
		} else if t != nil {
			c := *t
			c.ok, c.more, c.started, c.removed = true, r.sync.More, r.sync.Started, r.sync.Removed
			s.settle = &c
		}
		if err := r.sync.Err; err != nil {
			return append(w, logf(slog.LevelError, "Error syncing pod, will retry", "pod", name, "podUID", s.uid, "err", err, "retryIn", m.backoff(s, now)))
		}
		s.backoff, s.syncAt = 0, time.Time{}
		s.resources.allocated = s.resources.desired // the sync applied the spec
		if r.sync.RetryAfter > 0 {
			s.syncAt = now.Add(r.sync.RetryAfter)
		}
	case workKill, workKillRemove:
		if r.killErr != nil {
			w = append(w, logf(slog.LevelError, "Killing pod failed, will retry", "pod", name, "podUID", s.uid, "err", r.killErr, "retryIn", m.backoff(s, now)))
			return s.reply(w, r.killErr)
		}
		s.phase = phaseTerminated
		s.backoff, s.syncAt = 0, time.Time{}
		w = s.reply(w, nil)
		if r.kind == workKill {
			s.volumesLeft = r.volumesErr != nil
			if s.volumesLeft {
				w = append(w, m.tearDownFailed(s, name, r.volumesErr, now))
			}
			if s.givenAgain(ev.given) != nil {
				w = s.revive(w, ev.given)
			}
			return w
		}
		fallthrough
	case workTearDown:
		if r.volumesErr != nil {
			return append(w, m.tearDownFailed(s, name, r.volumesErr, now))
		}
		s.volumesLeft, s.backoff, s.syncAt = false, 0, time.Time{}
	case workRemove:
		if r.removeErr != nil {
			return append(w, logf(slog.LevelError, "Removing pod failed, will retry", "pod", name, "podUID", s.uid, "err", r.removeErr, "retryIn", m.backoff(s, now)))
		}
		w = s.drop(w)
	}
	return w
}

// tearDownFailed schedules the retry of a failed volume tear-down and logs
// it.
func (m machine) tearDownFailed(s *podState, name string, err error, now time.Time) work {
	return logf(slog.LevelError, "Tearing down the volumes of a stopped pod failed, will retry", "pod", name, "podUID", s.uid, "err", err, "retryIn", m.backoff(s, now))
}

// backoff schedules s's retry after a failure and returns the delay.
func (m machine) backoff(s *podState, now time.Time) time.Duration {
	s.backoff = min(max(2*s.backoff, initialSyncBackoff), m.maxBackoff)
	s.syncAt = now.Add(s.backoff)
	return s.backoff
}

// reply answers s's KillPod callers.
func (s *podState) reply(w []work, err error) []work {
	if len(s.waiters) == 0 {
		return w
	}
	w = append(w, work{kind: workReply, waiters: s.waiters, err: err})
	s.waiters = nil
	return w
}

// drop asks for a removed pod to leave the table, its callers answered.
func (s *podState) drop(w []work) []work {
	return append(s.reply(w, nil), work{kind: workDrop})
}

// givenAgain returns given when it is the removed pod s given again by its
// source, else nil: the same UID, which for a static pod is the same
// manifest put back. Only a pod removed with no final status of its own (not
// rejected, evicted, preempted or deleted) and admitted before (not stopped
// while its admission was pending) qualifies.
func (s *podState) givenAgain(given *v1.Pod) *v1.Pod {
	if !s.removed || s.pod == nil || s.final != nil || s.rejected || s.deleting || s.admitting != nil {
		return nil
	}
	return given
}

// revive starts again a removed pod that has stopped and that its source
// gives again, as the kubelet restarts a static pod whose manifest was
// removed and put back: its exited containers stay, so their restart counts
// go on from them.
func (s *podState) revive(w []work, p *v1.Pod) []work {
	s.pod = p
	s.resources.desired = desiredResources(p)
	s.removed, s.grace, s.volumesLeft = false, nil, false
	s.phase = phaseActive
	s.needSync, s.op, s.syncAt, s.backoff = true, opSync, time.Time{}, 0
	return append(w, work{kind: workPublish}, logf(slog.LevelInfo, "Starting again a pod its source gave back", "pod", nodeapi.PodName(p), "podUID", s.uid))
}

// probed takes a probe result change: a liveness or startup failure of an
// active pod asks for a sync (which restarts the container), and so does a
// startup success (containers waiting for a sidecar to start can start).
func (s *podState) probed(w []work, u prober.Update) []work {
	w = append(w, work{kind: workPublish})
	if s.phase != phaseActive {
		return w
	}
	switch {
	case u.Result == prober.Failure && u.ProbeType != prober.Readiness:
		s.needSync = true
		w = append(w, logf(slog.LevelInfo, "Container failed its probe; restarting it", "pod", nodeapi.PodName(s.pod), "podUID", s.uid,
			"container", u.ContainerName, "probeType", u.ProbeType, "containerID", u.ContainerID))
	case u.Result == prober.Success && u.ProbeType == prober.Startup:
		s.needSync = true
	}
	return w
}

// derivedStatus takes the pod's derived status: an active pod whose containers
// finished under its restartPolicy is stopped (no new view: the one derived
// shows it), and so is one past its active deadline (with the deadline's
// final status: the loop derives its view again); an active pod with a
// deadline to come gets a sync then, whose result brings it here again.
func (s *podState) derivedStatus(w []work, ev *event, now time.Time) []work {
	if s.phase == phaseActive && ev.relisted && s.final == nil && ev.finished {
		w = s.terminate(w)
		return w[:len(w)-1] // the view being derived shows it
	}
	if s.phase != phaseActive || s.final != nil {
		return w
	}
	at, ok := activeDeadline(s.pod, ev.started)
	switch {
	case ok && !now.Before(at):
		s.final = &v1.PodStatus{Phase: v1.PodFailed, Reason: reasonDeadlineExceeded, Message: messageDeadlineExceeded}
		w = append(w,
			work{kind: workEvent, eventType: v1.EventTypeNormal, msg: reasonDeadlineExceeded, message: messageDeadlineExceeded},
			logf(slog.LevelInfo, "Killing pod past its active deadline", "pod", nodeapi.PodName(s.pod), "podUID", s.uid,
				"activeDeadlineSeconds", *s.pod.Spec.ActiveDeadlineSeconds),
		)
		return s.terminate(w)
	case ok && (s.syncAt.IsZero() || at.Before(s.syncAt)):
		s.syncAt = at
	}
	return w
}

// dispatch hands an idle pod its next worker operation, if one is due: a
// sync of an active pod (after a stopping pod of the same name: a static pod
// whose manifest changed gets a new UID), a kill of a terminating one (and
// the removal of a removed one), and for a terminated one the removal of a
// removed one, a kill when something runs again, or the tear-down of its
// volumes.
func (s *podState) dispatch(w []work, ev *event, now time.Time) []work {
	if !s.idle() || s.minRelist > ev.relistSeen {
		return w
	}
	due := !s.syncAt.IsZero() && !now.Before(s.syncAt)
	waiting := !s.syncAt.IsZero() && now.Before(s.syncAt)
	var op work
	switch s.phase {
	case phaseActive:
		if !(s.needSync || due) || ev.stopping[nodeapi.PodName(s.pod)] {
			return w
		}
		op = work{kind: workSync, op: s.op, pod: s.pod, status: s.runtime, state: s.sync}
		s.settle = &settling{base: s.runtime}
	case phaseTerminating:
		if waiting {
			return w
		}
		op = work{kind: workKill, op: opKill, pod: s.pod, status: s.runtime, grace: s.grace}
		if s.removed && s.givenAgain(ev.given) == nil {
			op.kind = workKillRemove
		}
	case phaseTerminated:
		switch {
		case waiting:
			return w
		case s.removed:
			op = work{kind: workRemove, status: s.runtime}
		case hasRunning(s.runtime): // an adopted pod that may not run, or a restart behind our back
			op = work{kind: workKill, op: opKill, pod: s.pod, status: s.runtime, grace: s.grace}
		case s.volumesLeft:
			op = work{kind: workTearDown}
		default:
			return w
		}
	default:
		return w
	}
	s.inflight, s.needSync, s.syncAt = op.kind, false, time.Time{}
	return append(w, op)
}

// logf is a workLog item.
func logf(level slog.Level, msg string, args ...any) work {
	return work{kind: workLog, level: level, msg: msg, args: args}
}

func (s *podState) name() string {
	if s.pod != nil {
		return s.pod.Name
	}
	if s.runtime != nil {
		return s.runtime.Name
	}
	return ""
}

func (s *podState) runtimeNamespace() string {
	if s.pod != nil {
		return s.pod.Namespace
	}
	if s.runtime != nil {
		return s.runtime.Namespace
	}
	return ""
}
