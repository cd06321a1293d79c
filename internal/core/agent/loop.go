package agent

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/prober"
)

// state is where a pod is in its life in the table.
type state int

const (
	// stateAdmitting: the admission waits on a slow step (the pod's device
	// allocation) on a goroutine of its own; not synced yet, but counted
	// among the active pods, so that the pods admitted meanwhile leave room
	// for it and its devices are not freed as those of an inactive pod.
	stateAdmitting state = iota
	// stateWaitingVictims: admitted with a preemption plan whose victims are
	// being killed; not synced yet.
	stateWaitingVictims
	// stateActive: admitted, synced whenever needed.
	stateActive
	// stateTerminating: its containers are to be stopped (killed on request,
	// dropped by its source, finished under its restartPolicy, or an orphan).
	stateTerminating
	// stateTerminated: stopped (or rejected); started again only when a source
	// gives back a removed pod (see revive).
	stateTerminated
)

// entry is one pod of the table. Only the loop goroutine touches it.
type entry struct {
	uid types.UID
	// pod is the source's latest pod; nil for an orphan (known only from the
	// runtime).
	pod    *v1.Pod
	source string
	// firstSeen is when a source first gave the pod.
	firstSeen time.Time
	state     state
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
	// final is the status a kill request or a rejection fixed, merged over
	// the runtime's.
	final *v1.PodStatus
	// killed: final came from a kill request (eviction, preemption).
	killed bool
	// grace is the kill's grace period override (nil: the pod's own).
	grace *int64
	// waiters are KillPod callers waiting for the pod to stop.
	waiters []chan error
	// runtime is the pod's status from the latest relist (nil: none).
	runtime *podruntime.PodStatus
	// sync is what the pod's last SyncPod learnt (waiting reasons,
	// crash-loop and image pull back-offs), for its next SyncPod and its
	// status.
	sync podruntime.SyncState
	// settle, from a sync's dispatch until the first relist after its
	// result, holds what tells the sync's own changes from the others (see
	// relistDone): only those ask for another sync.
	settle *settling
	// volumesLeft: the pod has stopped for good but its volumes are still
	// to be torn down (a tear-down failed, or it finished in an earlier run).
	volumesLeft bool

	// busy is true while a work item of the pod runs (on a goroutine of
	// its own; a pod has at most one at a time).
	busy bool
	// abort, while a sync is in flight, is closed to cancel it (the pod is
	// to stop).
	abort chan struct{}
	// keep, while a kill-and-remove is in flight, is closed when the pod's
	// source gives it back: the worker then leaves its stopped containers.
	keep chan struct{}
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

	// startObserved: the pod's start time was recorded (or it was adopted
	// running).
	startObserved bool
	// view is what the snapshot shows; dirty asks to recompute it.
	view  *podView
	dirty bool
}

func (e *entry) setState(s state) {
	e.state, e.dirty = s, true
}

// work is one item for a pod worker.
type work struct {
	kind   workKind
	op     string // metric label; "" for none
	pod    *v1.Pod
	status *podruntime.PodStatus
	// state, for a sync, is the State of the pod's previous sync.
	state podruntime.SyncState
	grace *int64
	// abort, for a sync, cancels the runtime call when closed.
	abort <-chan struct{}
	// keep, for a kill-and-remove, turns it into a kill when closed before
	// the kill has ended.
	keep <-chan struct{}
}

type workKind int

const (
	workSync workKind = iota
	workKill
	workKillRemove
	workRemove
	// workTearDown tears down the volumes of a stopped pod.
	workTearDown
)

// result is what a worker reports of one work item.
type result struct {
	uid       types.UID
	kind      workKind
	sync      podruntime.Result
	killErr   error
	removeErr error
	// volumesErr is the error of tearing down the volumes after a kill
	// (workKill) or of a workTearDown.
	volumesErr error
}

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
	// IDs it reported (podruntime.Result).
	ok               bool
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

// relistResult is one relist's outcome.
type relistResult struct {
	seq      uint64
	statuses map[types.UID]*podruntime.PodStatus
	err      error
}

// loop is the state of one Run; only Run's goroutine touches it.
type loop struct {
	a   *Agent
	ctx context.Context

	pods map[types.UID]*entry
	// desired is every source's latest set.
	desired      map[string]map[types.UID]*v1.Pod
	sourcesReady bool

	// statuses is the latest successful relist; relisted once there was one.
	statuses map[types.UID]*podruntime.PodStatus
	relisted bool
	// relisting: a relist is in flight. relistStarted and relistSeen are the
	// sequence numbers of the last relist started and received.
	relisting     bool
	relistFailing bool // the last relist failed (logged once per outage)
	// relistAgain: a worker finished while a relist was in flight, so that
	// relist may predate what the worker did; another starts when it is back.
	relistAgain   bool
	relistStarted uint64
	relistSeen    uint64
	// gone maps pods removed from the table to relistStarted at their
	// removal: older relists may still show them, which is no orphan.
	gone map[types.UID]uint64

	results  chan result
	relistC  chan relistResult
	victimsC chan types.UID
	// admittedC carries admissions whose slow step is done.
	admittedC chan *admission.Pending
	wg        sync.WaitGroup

	// replies are answered after the next publish.
	replies []pendingReply

	timer   *time.Timer
	timerAt time.Time
	// changed asks for a new snapshot.
	changed bool

	// probeC carries the prober's updates; probed are the pods the prober
	// was told of (see syncProbes).
	probeC chan prober.Update
	probed map[types.UID]*probedPod
}

// Run runs the sync loop until ctx ends, then stops the workers, relists and
// preemptions in flight (their runtime calls see ctx end) and returns nil
// after they all returned. It kills no pod on the way out. It may be called
// once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &loop{
		a: a, ctx: ctx,
		pods:         map[types.UID]*entry{},
		desired:      map[string]map[types.UID]*v1.Pod{},
		sourcesReady: len(a.sources) == 0,
		gone:         map[types.UID]uint64{},
		results:      make(chan result),
		relistC:      make(chan relistResult),
		victimsC:     make(chan types.UID),
		admittedC:    make(chan *admission.Pending),
		probeC:       make(chan prober.Update),
		probed:       map[types.UID]*probedPod{},
	}
	defer l.wg.Wait()
	defer cancel()
	l.forwardProbeUpdates()

	relistT := time.NewTicker(a.cfg.RelistPeriod)
	defer relistT.Stop()
	resyncT := time.NewTicker(a.cfg.ResyncPeriod)
	defer resyncT.Stop()
	l.timer = time.NewTimer(a.cfg.ResyncPeriod)
	l.timer.Stop()
	defer l.timer.Stop()

	l.startRelist()
	for {
		var taken chan struct{}
		select {
		case <-ctx.Done():
			return nil
		case u := <-a.setC:
			l.setPods(u)
			taken = u.taken
		case k := <-a.killC:
			l.kill(k)
		case r := <-l.relistC:
			l.relistDone(r)
		case r := <-l.results:
			l.result(r)
		case uid := <-l.victimsC:
			l.victimsDone(uid)
		case p := <-l.admittedC:
			l.admissionDone(p)
		case u := <-l.probeC:
			l.probeUpdate(u)
		case <-relistT.C:
			l.startRelist()
		case <-resyncT.C:
			l.resync()
		case <-l.timer.C:
			l.timerAt = time.Time{}
		}
		now := time.Now()
		l.syncProbes()
		l.refresh(now)
		l.syncProbes() // pods refresh found finished
		l.dispatch(now)
		l.publish()
		l.arm(now)
		// SetPods and KillPod return with their effect published.
		if taken != nil {
			close(taken)
		}
		for _, r := range l.replies {
			r.done <- r.err // buffered, one value each
		}
		l.replies = l.replies[:0]
	}
}

// startRelist lists the runtime from a goroutine of its own, unless a relist
// is in flight.
func (l *loop) startRelist() {
	if l.relisting {
		return
	}
	l.relisting = true
	l.relistStarted++
	seq := l.relistStarted
	l.wg.Go(func() {
		start := time.Now()
		st, err := l.a.rt.Statuses(l.ctx)
		l.a.m.relistDuration.WithLabelValues().Observe(time.Since(start).Seconds())
		select {
		case l.relistC <- relistResult{seq: seq, statuses: st, err: err}:
		case <-l.ctx.Done():
		}
	})
}

// relistSoon lists the runtime right after a worker's operation, so that
// what it did (a container started, a pod stopped) shows in the pods' status,
// and the pod's next operation can start, without waiting for the ticker.
// Bursts of operations share relists: one in flight is followed by one more.
func (l *loop) relistSoon() {
	if l.relisting {
		l.relistAgain = true
		return
	}
	l.startRelist()
}

// relistDone takes a relist's statuses: pods whose runtime status changed
// are synced, and, once every source has spoken, runtime pods no source
// wants are killed and removed.
func (l *loop) relistDone(r relistResult) {
	l.relisting = false
	again := l.relistAgain
	l.relistAgain = false
	if r.err != nil {
		if l.ctx.Err() == nil && !l.relistFailing {
			l.a.log.Error("Relisting pods failed", "err", r.err)
		}
		l.relistFailing = true
		return
	}
	if l.relistFailing {
		l.a.log.Info("Relisting pods works again")
		l.relistFailing = false
	}
	if again {
		defer l.startRelist()
	}
	if r.statuses == nil {
		r.statuses = map[types.UID]*podruntime.PodStatus{}
	}
	first := !l.relisted
	seen := l.relistSeen
	l.relisted, l.relistSeen, l.statuses = true, r.seq, r.statuses
	l.a.lastRelist.Store(time.Now().UnixNano())
	l.a.m.setRunning(r.statuses)
	for uid, e := range l.pods {
		st := r.statuses[uid]
		// A deleted pod's status is final once the runtime was listed
		// after its kill, even if the listing shows nothing new.
		settles := e.deleting && e.state == stateTerminated && seen < e.minRelist && r.seq >= e.minRelist
		changed := first || settles || runtimeChanged(e.runtime, st)
		if changed {
			e.dirty = true
		}
		switch s := e.settle; {
		case e.state != stateActive:
		case s != nil && (e.busy || r.seq < e.minRelist):
			// It may show part of what the sync does: judged once all of
			// it is listed.
			s.changed = s.changed || changed
		case s != nil:
			// The first relist after the sync: a change that is not the
			// sync's own (a container that exited already) asks for
			// another.
			if (changed || s.changed) && !(s.ok && s.own(st)) {
				e.needSync = true
			}
			e.settle = nil
		case changed:
			e.needSync = true
		}
		if first && hasRunning(st) {
			e.startObserved = true // adopted: it started in an earlier run
		}
		e.runtime = st
	}
	for uid, seq := range l.gone {
		if seq < r.seq {
			delete(l.gone, uid)
		}
	}
	if !l.sourcesReady {
		return
	}
	for uid, st := range r.statuses {
		if _, ok := l.pods[uid]; ok {
			continue
		}
		if _, ok := l.gone[uid]; ok {
			continue
		}
		l.a.log.Info("Removing orphaned pod", "pod", joinName(st.Namespace, st.Name), "podUID", uid)
		l.pods[uid] = &entry{uid: uid, state: stateTerminating, removed: true, runtime: st, startObserved: true}
	}
}

// setPods takes a source's complete set.
func (l *loop) setPods(u sourceUpdate) {
	old := l.desired[u.source]
	cur := make(map[types.UID]*v1.Pod, len(u.pods))
	for _, p := range u.pods {
		cur[p.UID] = p
	}
	l.desired[u.source] = cur
	if !l.sourcesReady && len(l.desired) == len(l.a.sources) {
		l.sourcesReady, l.changed = true, true
		l.a.log.Info("All pod sources are ready")
	}
	for uid := range old {
		if _, ok := cur[uid]; ok {
			continue
		}
		if e := l.pods[uid]; e != nil && e.source == u.source && !e.removed {
			l.remove(e)
		}
	}
	var added []*v1.Pod
	for _, p := range u.pods {
		e := l.pods[p.UID]
		switch {
		case e == nil:
			added = append(added, p)
		case e.removed && e.state == stateTerminated && !e.busy && l.givenAgain(e) != nil:
			l.revive(e)
		case e.removed && e.keep != nil && l.givenAgain(e) != nil:
			close(e.keep) // being stopped: revived once stopped (see result)
			e.keep = nil
		case e.pod == nil || e.removed:
			// An orphan, or a removed pod being stopped or removed: given
			// again once it left the table (see drop).
		case e.source != u.source:
			l.a.log.Error("Pod given by two sources; keeping the first", "pod", nodeapi.PodName(p), "podUID", p.UID,
				"source", u.source, "firstSource", e.source)
		default:
			changed := !equality.Semantic.DeepEqual(e.pod.Spec, p.Spec)
			if changed || !equality.Semantic.DeepEqual(e.pod.ObjectMeta, p.ObjectMeta) {
				e.pod, e.dirty = p, true
			}
			if p.DeletionTimestamp != nil && !e.deleting {
				l.deleting(e)
			} else if changed && e.state == stateActive {
				e.needSync, e.op = true, opUpdate
			}
		}
	}
	l.admitAll(u.source, added)
}

// admitAll admits new pods in creation order (then by name), each seeing the
// ones admitted before it among the active pods.
func (l *loop) admitAll(source string, pods []*v1.Pod) {
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range pods {
		now := time.Now()
		e := &entry{uid: p.UID, pod: p, source: source, firstSeen: now, dirty: true, op: opCreate, runtime: l.statuses[p.UID]}
		if seq, ok := l.gone[p.UID]; ok {
			// Given again right after its removal: the last relist may
			// still show what was removed.
			e.runtime, e.minRelist = nil, seq+1
		}
		if hasRunning(e.runtime) {
			e.startObserved = true
		}
		l.pods[p.UID] = e
		if ph := p.Status.Phase; ph == v1.PodSucceeded || ph == v1.PodFailed {
			// It finished in an earlier run (a source that keeps final
			// statuses, as the local pod store does): never started again,
			// and its final status stays.
			st := *p.Status.DeepCopy()
			e.state, e.final = stateTerminated, &st
			e.volumesLeft = true // its volumes may be there from that run
			if hasRunning(e.runtime) {
				e.state = stateTerminating
			}
			l.a.log.Info("Pod finished before; not starting it", "pod", nodeapi.PodName(p), "podUID", p.UID, "phase", ph, "reason", st.Reason)
			l.refresh(now)
			l.publish()
			continue
		}
		if p.DeletionTimestamp != nil {
			// Deleted before it ran here (or while the agent was down):
			// never started; stopped if it runs from an earlier run.
			e.deleting, e.grace, e.state = true, p.DeletionGracePeriodSeconds, stateTerminated
			if hasRunning(e.runtime) {
				e.state = stateTerminating
			}
			l.a.log.Info("Pod is being deleted; not starting it", "pod", nodeapi.PodName(p), "podUID", p.UID)
			l.refresh(now)
			l.publish()
			continue
		}
		resp := l.a.admit.Start(l.ctx, p)
		l.verdict(e, resp)
		// The next admission counts this pod, also while its own admission
		// is pending.
		l.refresh(now)
		l.publish()
		if resp.Pending != nil {
			l.waitAdmission(resp.Pending)
		}
	}
}

// verdict applies the admission's response to e, a pod being admitted.
func (l *loop) verdict(e *entry, resp admission.Response) {
	p := e.pod
	switch {
	case resp.Pending != nil:
		e.setState(stateAdmitting)
		e.admitting = resp.Pending
	case !resp.Admit:
		e.setState(stateTerminated)
		e.rejected = true
		e.final = &v1.PodStatus{Phase: v1.PodFailed, Reason: resp.Reason, Message: resp.Message}
		l.a.log.Info("Pod rejected by admission", "pod", nodeapi.PodName(p), "podUID", p.UID, "reason", resp.Reason, "message", resp.Message)
		l.a.rec.Event(p, v1.EventTypeWarning, resp.Reason, resp.Message)
		if hasRunning(e.runtime) {
			e.state = stateTerminating // adopted but no longer admissible
		}
	case len(resp.Victims()) > 0:
		e.setState(stateWaitingVictims)
		l.preempt(e.uid, resp.Preemption)
	default:
		e.setState(stateActive)
		e.needSync = true
	}
}

// waitAdmission runs a pending admission's slow step from a goroutine of its
// own, then hands it back to the loop: the loop admits other pods meanwhile.
func (l *loop) waitAdmission(p *admission.Pending) {
	l.wg.Go(func() {
		p.Wait(l.ctx)
		select {
		case l.admittedC <- p:
		case <-l.ctx.Done():
		}
	})
}

// admissionDone finishes an admission whose slow step is done, unless its
// pod was stopped (killed, deleted or dropped) meanwhile: such a pod is not
// started, and the devices it was given are freed as those of an inactive
// pod.
func (l *loop) admissionDone(p *admission.Pending) {
	e := l.pods[p.Pod().UID]
	if e == nil || e.admitting != p || e.state != stateAdmitting {
		return
	}
	e.admitting = nil
	resp := p.Resume(l.ctx)
	l.verdict(e, resp)
	if resp.Pending != nil {
		l.waitAdmission(resp.Pending)
	}
}

// preempt kills plan's victims from a goroutine of its own, each through
// KillPod (so through the loop and the victims' workers), then tells the loop
// the preemptor may start.
func (l *loop) preempt(uid types.UID, plan *preemption.Plan) {
	l.wg.Go(func() {
		if l.a.preempt != nil {
			if _, err := l.a.preempt.Execute(l.ctx, plan); err != nil && l.ctx.Err() != nil {
				return
			}
		} else {
			for _, v := range plan.Victims {
				if err := l.a.KillPod(l.ctx, v); err != nil {
					if l.ctx.Err() != nil {
						return
					}
					l.a.log.Error("Preempting pod failed", "pod", nodeapi.PodName(v.Pod), "podUID", v.Pod.UID, "err", err)
				}
			}
		}
		select {
		case l.victimsC <- uid:
		case <-l.ctx.Done():
		}
	})
}

func (l *loop) victimsDone(uid types.UID) {
	if e := l.pods[uid]; e != nil && e.state == stateWaitingVictims {
		e.setState(stateActive)
		e.needSync = true
	}
}

// remove handles a pod its source dropped: stop it, then remove it.
func (l *loop) remove(e *entry) {
	e.removed, e.dirty = true, true
	switch e.state {
	case stateAdmitting, stateWaitingVictims, stateActive:
		l.terminate(e)
	case stateTerminated:
		if e.runtime == nil && !e.busy {
			l.drop(e)
		}
	}
}

// deleting handles a pod that got a deletionTimestamp: it is stopped with
// the deletion's grace period (the shorter one if a kill is under way) and
// stays stopped.
func (l *loop) deleting(e *entry) {
	e.deleting, e.dirty = true, true
	if g := e.pod.DeletionGracePeriodSeconds; g != nil && (e.grace == nil || *g < *e.grace) {
		e.grace = g
	}
	switch e.state {
	case stateAdmitting, stateWaitingVictims, stateActive:
		args := []any{"pod", nodeapi.PodName(e.pod), "podUID", e.uid}
		if e.grace != nil {
			args = append(args, "gracePeriod", *e.grace)
		}
		l.a.log.Info("Killing pod being deleted", args...)
		l.terminate(e)
	}
}

// terminate moves a pod to stateTerminating: its next work is a kill.
func (l *loop) terminate(e *entry) {
	if e.abort != nil { // a sync in flight: the kill need not wait for it
		close(e.abort)
		e.abort = nil
	}
	e.setState(stateTerminating)
	e.needSync, e.syncAt, e.backoff, e.settle = false, time.Time{}, 0, nil
}

// kill handles a KillPod request.
func (l *loop) kill(k killMsg) {
	e := l.pods[k.req.Pod.UID]
	if e == nil || e.pod == nil || e.state == stateTerminated {
		l.replies = append(l.replies, pendingReply{k.done, nil})
		return
	}
	if e.final == nil {
		st := k.req.Status
		e.final, e.killed = &st, true
	}
	if g := k.req.GracePeriodOverride; g != nil && (e.grace == nil || *g < *e.grace) {
		e.grace = g
	}
	e.waiters = append(e.waiters, k.done)
	l.terminate(e)
	l.a.log.Info("Killing pod", "pod", nodeapi.PodName(e.pod), "podUID", e.uid, "reason", k.req.Status.Reason)
}

// resync asks for a sync of every active pod.
func (l *loop) resync() {
	for _, e := range l.pods {
		if e.state == stateActive {
			e.needSync = true
		}
	}
}

// result takes a worker's report.
func (l *loop) result(r result) {
	e := l.pods[r.uid]
	if e == nil {
		return
	}
	now := time.Now()
	e.busy, e.dirty, e.abort, e.keep = false, true, nil, nil
	e.minRelist = l.relistStarted + 1
	l.relistSoon()
	name := joinName(e.runtimeNamespace(), e.name())
	switch r.kind {
	case workSync:
		e.sync = r.sync.State
		if e.op != opUpdate || !e.needSync {
			e.op = opSync
		}
		s := e.settle
		if e.state != stateActive {
			e.settle = nil
			return // stopping: the sync was cancelled or is moot
		}
		if r.sync.Err != nil && s != nil {
			// A failed sync is retried on its back-off, or at once when the
			// pod changed meanwhile.
			e.settle = nil
			e.needSync = e.needSync || s.changed
		} else if s != nil {
			s.ok, s.started, s.removed = true, r.sync.Started, r.sync.Removed
		}
		if err := r.sync.Err; err != nil {
			l.a.log.Error("Error syncing pod, will retry", "pod", name, "podUID", e.uid, "err", err, "retryIn", l.backoff(e, now))
			return
		}
		e.backoff = 0
		e.syncAt = time.Time{}
		if r.sync.RetryAfter > 0 {
			e.syncAt = now.Add(r.sync.RetryAfter)
		}
	case workKill, workKillRemove:
		if r.killErr != nil {
			l.a.log.Error("Killing pod failed, will retry", "pod", name, "podUID", e.uid, "err", r.killErr, "retryIn", l.backoff(e, now))
			l.reply(e, r.killErr)
			return
		}
		e.setState(stateTerminated)
		e.backoff, e.syncAt = 0, time.Time{}
		l.reply(e, nil)
		if r.kind == workKill {
			e.volumesLeft = r.volumesErr != nil
			if e.volumesLeft {
				l.tearDownFailed(e, name, r.volumesErr, now)
			}
			if l.givenAgain(e) != nil {
				l.revive(e)
			}
			return
		}
		fallthrough
	case workTearDown:
		if r.volumesErr != nil {
			l.tearDownFailed(e, name, r.volumesErr, now)
			return
		}
		e.volumesLeft, e.backoff, e.syncAt = false, 0, time.Time{}
	case workRemove:
		if r.removeErr != nil {
			l.a.log.Error("Removing pod failed, will retry", "pod", name, "podUID", e.uid, "err", r.removeErr, "retryIn", l.backoff(e, now))
			return
		}
		l.drop(e)
	}
}

// tearDownFailed logs a failed volume tear-down of e and schedules its retry.
func (l *loop) tearDownFailed(e *entry, name string, err error, now time.Time) {
	l.a.log.Error("Tearing down the volumes of a stopped pod failed, will retry", "pod", name, "podUID", e.uid, "err", err, "retryIn", l.backoff(e, now))
}

// backoff schedules e's retry after a failure and returns the delay.
func (l *loop) backoff(e *entry, now time.Time) time.Duration {
	e.backoff = min(max(2*e.backoff, initialSyncBackoff), l.a.cfg.MaxSyncBackoff)
	e.syncAt = now.Add(e.backoff)
	return e.backoff
}

// reply answers e's KillPod callers once the table is published.
func (l *loop) reply(e *entry, err error) {
	for _, w := range e.waiters {
		l.replies = append(l.replies, pendingReply{w, err})
	}
	e.waiters = nil
}

// pendingReply is a KillPod answer held until the next snapshot is out.
type pendingReply struct {
	done chan error
	err  error
}

// givenAgain returns the pod that e's source gives again after removing it,
// or nil: the same UID, which for a static pod is the same manifest put back.
// Only a pod removed with no final status of its own (not rejected, evicted,
// preempted or deleted) and admitted before (not stopped while its admission
// was pending) qualifies.
func (l *loop) givenAgain(e *entry) *v1.Pod {
	if !e.removed || e.pod == nil || e.final != nil || e.rejected || e.deleting || e.admitting != nil {
		return nil
	}
	return l.desired[e.source][e.uid]
}

// revive starts again a removed pod that has stopped and that its source
// gives again, as the kubelet restarts a static pod whose manifest was
// removed and put back: its exited containers stay, so their restart counts
// go on from them.
func (l *loop) revive(e *entry) {
	e.pod = l.givenAgain(e)
	e.removed, e.grace, e.volumesLeft = false, nil, false
	e.setState(stateActive)
	e.needSync, e.op, e.syncAt, e.backoff = true, opSync, time.Time{}, 0
	l.a.log.Info("Starting again a pod its source gave back", "pod", nodeapi.PodName(e.pod), "podUID", e.uid)
}

// drop deletes a removed pod from the table. A source that gives the pod
// again gets it admitted anew.
func (l *loop) drop(e *entry) {
	delete(l.pods, e.uid)
	l.gone[e.uid] = l.relistStarted
	l.changed = true
	l.reply(e, nil)
	for _, src := range l.a.sources {
		if p, ok := l.desired[src][e.uid]; ok {
			l.admitAll(src, []*v1.Pod{p})
			return
		}
	}
}

// refresh recomputes the views of changed pods, each status derived once
// (podstatus.Derive; twice in the turn a pod's active deadline passes, to
// show the deadline's final status). A pod whose containers finished under
// its restartPolicy (phase Succeeded or Failed) is stopped.
func (l *loop) refresh(now time.Time) {
	var node podstatus.Node
	nodeRead := false
	for _, e := range l.pods {
		if !e.dirty {
			continue
		}
		e.dirty = false
		if e.pod == nil {
			continue
		}
		if !nodeRead {
			node, nodeRead = l.a.rt.StatusNode(), true
		}
		in := l.statusInput(e, node)
		st, done := l.a.derive(in, now)
		if e.state == stateActive && l.relisted && e.final == nil && done {
			l.terminate(e)
			e.dirty = false
		}
		if e.state == stateActive && e.final == nil {
			if at, ok := activeDeadline(e.pod, st); ok && !now.Before(at) {
				l.deadlineExceeded(e)
				in.Final = e.final
				st, _ = l.a.derive(in, now)
			} else if ok && (e.syncAt.IsZero() || at.Before(e.syncAt)) {
				e.syncAt = at // a sync then, whose result brings the pod here again
			}
		}
		if !e.startObserved && st.Phase == v1.PodRunning {
			e.startObserved = true
			l.a.m.startDuration.WithLabelValues().Observe(now.Sub(e.firstSeen).Seconds())
		}
		p := *e.pod
		p.Status = st
		e.view = &podView{pod: &p, deleted: e.removed, terminated: e.state == stateTerminated, cleanedUp: !hasRunning(e.runtime)}
		l.changed = true
	}
}

// statusInput is what e's status is derived from: its pod and runtime
// status, what its last sync left, the final status a kill, its deadline or
// its rejection fixed, whether it was deleted and stopped, and what it
// showed last.
func (l *loop) statusInput(e *entry, node podstatus.Node) podstatus.Input {
	in := podstatus.Input{
		Pod: e.pod, Runtime: e.runtime, Node: node, Waiting: e.sync.Waiting,
		Final: e.final, Killed: e.killed, Rejected: e.rejected,
		// The runtime listed after the kill: what did not finish never will.
		Deleted: e.deleting && e.state == stateTerminated, Settled: l.relistSeen >= e.minRelist,
	}
	if e.view != nil {
		in.Previous = &e.view.pod.Status
	}
	return in
}

// The kubelet's reason and message for a pod past its activeDeadlineSeconds.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline is when pod, with status st, has been active for its
// spec.activeDeadlineSeconds, counted from its start time, as the kubelet
// does; ok is false without a deadline or a start time.
func activeDeadline(pod *v1.Pod, st v1.PodStatus) (at time.Time, ok bool) {
	d := pod.Spec.ActiveDeadlineSeconds
	if d == nil || st.StartTime == nil || st.StartTime.IsZero() {
		return time.Time{}, false
	}
	return st.StartTime.Add(time.Duration(*d) * time.Second), true
}

// deadlineExceeded stops a pod past its active deadline: phase Failed with
// the kubelet's reason and message, and its event.
func (l *loop) deadlineExceeded(e *entry) {
	e.final = &v1.PodStatus{Phase: v1.PodFailed, Reason: reasonDeadlineExceeded, Message: messageDeadlineExceeded}
	l.a.rec.Eventf(e.pod, v1.EventTypeNormal, reasonDeadlineExceeded, messageDeadlineExceeded)
	l.a.log.Info("Killing pod past its active deadline", "pod", nodeapi.PodName(e.pod), "podUID", e.uid,
		"activeDeadlineSeconds", *e.pod.Spec.ActiveDeadlineSeconds)
	l.terminate(e)
}

// dispatch hands every idle pod its next work item, if any.
func (l *loop) dispatch(now time.Time) {
	if !l.relisted {
		return // adoption: nothing runs before the runtime was listed
	}
	stopping := map[string]bool{}
	for _, e := range l.pods {
		if e.state == stateTerminating && e.pod != nil {
			stopping[nodeapi.PodName(e.pod)] = true
		}
	}
	for _, e := range l.pods {
		if e.busy || e.minRelist > l.relistSeen {
			continue
		}
		w, ok := l.next(e, now, stopping)
		if !ok {
			continue
		}
		e.busy, e.needSync, e.syncAt = true, false, time.Time{}
		switch w.kind {
		case workSync:
			e.abort = make(chan struct{})
			w.abort = e.abort
			e.settle = &settling{base: e.runtime}
		case workKillRemove:
			e.keep = make(chan struct{})
			w.keep = e.keep
		}
		// A goroutine per item rather than per pod: an idle node's pods
		// hold no goroutine (and no stack) between their operations.
		uid := e.uid
		l.wg.Go(func() { l.a.runWork(l.ctx, uid, w, l.results) })
	}
}

// next is e's next work item at now, if it has one due.
func (l *loop) next(e *entry, now time.Time, stopping map[string]bool) (work, bool) {
	due := !e.syncAt.IsZero() && !now.Before(e.syncAt)
	waiting := !e.syncAt.IsZero() && now.Before(e.syncAt)
	switch e.state {
	case stateActive:
		// A static pod whose manifest changed gets a new UID: the new pod
		// starts once the old one of the same name stopped.
		if !(e.needSync || due) || stopping[nodeapi.PodName(e.pod)] {
			return work{}, false
		}
		return work{kind: workSync, op: e.op, pod: e.pod, status: e.runtime, state: e.sync}, true
	case stateTerminating:
		if waiting {
			return work{}, false
		}
		kind := workKill
		if e.removed && l.givenAgain(e) == nil {
			kind = workKillRemove
		}
		return work{kind: kind, op: opKill, pod: e.pod, status: e.runtime, grace: e.grace}, true
	case stateTerminated:
		if waiting {
			return work{}, false
		}
		if e.removed {
			return work{kind: workRemove, status: e.runtime}, true
		}
		if hasRunning(e.runtime) { // an adopted pod that may not run, or a restart behind our back
			return work{kind: workKill, op: opKill, pod: e.pod, status: e.runtime, grace: e.grace}, true
		}
		if e.volumesLeft {
			return work{kind: workTearDown}, true
		}
	}
	return work{}, false
}

// publish stores a new snapshot when anything changed.
func (l *loop) publish() {
	if !l.changed {
		return
	}
	l.changed = false
	s := &snapshot{byUID: make(map[types.UID]*podView, len(l.pods)), sourcesReady: l.sourcesReady}
	for _, e := range l.pods {
		if e.view == nil {
			continue
		}
		s.byUID[e.uid] = e.view
		s.pods = append(s.pods, e.view.pod)
	}
	slices.SortFunc(s.pods, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	for _, p := range s.pods {
		// A pod no source wants is not active while it is being stopped: as
		// in the kubelet, whose pod manager drops it at once, admission no
		// longer counts it (a static pod replaced by another).
		if e := l.pods[p.UID]; !e.rejected && !e.removed && e.state != stateTerminated {
			s.active = append(s.active, p)
		}
	}
	l.a.snap.Store(s)
	select {
	case l.a.changes <- struct{}{}:
	default: // one is pending already
	}
}

// arm sets the timer to the earliest future due time of an idle pod (due
// ones were dispatched, or wait for an event: a relist, another pod
// stopping).
func (l *loop) arm(now time.Time) {
	var at time.Time
	for _, e := range l.pods {
		if !e.busy && e.syncAt.After(now) && (at.IsZero() || e.syncAt.Before(at)) {
			at = e.syncAt
		}
	}
	if at.Equal(l.timerAt) {
		return
	}
	l.timer.Stop()
	l.timerAt = at
	if !at.IsZero() {
		l.timer.Reset(at.Sub(now))
	}
}

// runWork runs one work item of pod uid and reports its result to out,
// unless ctx ends first.
func (a *Agent) runWork(ctx context.Context, uid types.UID, w work, out chan<- result) {
	start := time.Now()
	r := result{uid: uid, kind: w.kind}
	switch w.kind {
	case workSync:
		r.sync = a.syncPod(ctx, w)
	case workKill, workKillRemove:
		if w.status != nil {
			r.killErr = a.rt.KillPod(ctx, w.pod, w.status, w.grace)
		}
		if w.kind == workKillRemove && isClosed(w.keep) {
			r.kind = workKill // given back while it stopped
		}
		if r.killErr == nil && r.kind == workKillRemove && w.status != nil {
			r.removeErr = a.rt.RemovePod(ctx, w.status)
		}
		if r.killErr == nil && r.kind == workKill {
			// Stopped for good (or until its source gives it
			// again): its volumes go now, as the kubelet's do.
			r.volumesErr = a.rt.TearDownVolumes(uid)
		}
	case workTearDown:
		r.volumesErr = a.rt.TearDownVolumes(uid)
	case workRemove:
		if w.status != nil {
			r.removeErr = a.rt.RemovePod(ctx, w.status)
		}
	}
	if w.op != "" {
		a.m.workerDuration.WithLabelValues(w.op).Observe(time.Since(start).Seconds())
	}
	select {
	case out <- r:
	case <-ctx.Done():
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (e *entry) name() string {
	if e.pod != nil {
		return e.pod.Name
	}
	if e.runtime != nil {
		return e.runtime.Name
	}
	return ""
}

func (e *entry) runtimeNamespace() string {
	if e.pod != nil {
		return e.pod.Namespace
	}
	if e.runtime != nil {
		return e.runtime.Namespace
	}
	return ""
}

func joinName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// syncPod runs one SyncPod, cancelled when w.abort closes.
func (a *Agent) syncPod(ctx context.Context, w work) podruntime.Result {
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-w.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel()
		<-watched
	}()
	return a.rt.SyncPod(ctx, w.pod, w.status, w.state)
}
