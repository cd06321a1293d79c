package agent

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/prober"
)

// entry is one pod of the table: its lifecycle (podState, changed only by
// step) and what the loop keeps beside it. Only the loop goroutine touches
// it.
type entry struct {
	podState
	// firstSeen is when a source first gave the pod.
	firstSeen time.Time
	// startObserved: the pod's start time was recorded (or it was adopted
	// running).
	startObserved bool
	// abort, while a sync is in flight, is closed to cancel it (workAbort).
	abort chan struct{}
	// keep, while a kill-and-remove is in flight, is closed when the pod's
	// source gives it back (workKeep): the worker then leaves its stopped
	// containers.
	keep chan struct{}
	// view is what the snapshot shows; dirty asks to recompute it.
	view  *podView
	dirty bool
}

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
	m   machine

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
	// buf is the scratch buffer step's work goes into (see step).
	buf []work
	// waits are the admissions whose slow step is to run once the pods
	// being admitted are published (waitAdmissions).
	waits []*admission.Pending

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
		m:            machine{maxBackoff: a.cfg.MaxSyncBackoff},
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
	var deviceHealth <-chan []string // nil without Devices: never ready
	if a.devices != nil {
		deviceHealth = a.devices.HealthChanges()
	}

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
			if e := l.pods[uid]; e != nil {
				l.on(e, event{kind: evVictimsDone})
			}
		case p := <-l.admittedC:
			if e := l.pods[p.Pod().UID]; e != nil {
				l.on(e, event{kind: evAdmitted, pending: p})
			}
		case u := <-l.probeC:
			if e := l.pods[u.PodUID]; e != nil && e.pod != nil {
				l.on(e, event{kind: evProbe, probe: &u})
			}
		case uids := <-deviceHealth:
			// A device of these pods changed health: their statuses show
			// it now, not at their next sync.
			for _, uid := range uids {
				if e := l.pods[types.UID(uid)]; e != nil {
					e.dirty = true
				}
			}
		case <-relistT.C:
			l.startRelist()
		case <-resyncT.C:
			for _, e := range l.pods {
				l.on(e, event{kind: evResync})
			}
		case <-l.timer.C:
			l.timerAt = time.Time{}
		}
		now := time.Now()
		l.syncProbes()
		l.refresh(now)
		l.syncProbes() // pods refresh found finished
		l.dispatch(now)
		l.publish()
		l.waitAdmissions() // a Resume that is Pending again
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

// on hands ev to e's state machine (step) and runs the work it asks for.
func (l *loop) on(e *entry, ev event) {
	w := l.step(e, ev, time.Now())
	l.do(e, w)
	l.release(w)
}

// step runs e's state machine on ev at now. The work it returns lies in the
// loop's scratch buffer, which the caller hands back with release once the
// work ran; a step taken meanwhile (the verdict of an admission the work
// starts) gets a buffer of its own.
func (l *loop) step(e *entry, ev event, now time.Time) []work {
	buf := l.buf
	l.buf = nil
	e.podState, buf = l.m.step(e.podState, ev, now, buf[:0])
	return buf
}

// release hands w back as the scratch buffer, cleared so that it holds on
// to no pod or caller.
func (l *loop) release(w []work) {
	clear(w)
	l.buf = w[:0]
}

// do runs the work step asked for e, in order.
func (l *loop) do(e *entry, ws []work) {
	for _, w := range ws {
		switch w.kind {
		case workSync, workKill, workKillRemove, workRemove, workTearDown:
			l.start(e, w)
		case workAbort:
			if e.abort != nil {
				close(e.abort)
				e.abort = nil
			}
		case workKeep:
			if e.keep != nil {
				close(e.keep)
				e.keep = nil
			}
		case workReply:
			for _, c := range w.waiters {
				l.replies = append(l.replies, pendingReply{c, w.err})
			}
		case workPublish:
			e.dirty = true
		case workDrop:
			l.drop(e)
		case workAdmit:
			l.on(e, event{kind: evVerdict, resp: l.a.admit.Start(l.ctx, e.pod)})
		case workResume:
			l.on(e, event{kind: evVerdict, resp: w.pending.Resume(l.ctx)})
		case workWaitAdmission:
			l.waits = append(l.waits, w.pending)
		case workPreempt:
			l.preempt(e.uid, w.plan)
		case workLog:
			l.a.log.Log(l.ctx, w.level, w.msg, w.args...)
		case workEvent:
			l.a.rec.Event(e.pod, w.eventType, w.msg, w.message)
		}
	}
}

// start runs a worker operation of e on a goroutine of its own: a goroutine
// per item rather than per pod, so an idle node's pods hold no goroutine
// (and no stack) between their operations.
func (l *loop) start(e *entry, w work) {
	switch w.kind {
	case workSync:
		e.abort = make(chan struct{})
		w.abort = e.abort
	case workKillRemove:
		e.keep = make(chan struct{})
		w.keep = e.keep
	}
	uid := e.uid
	l.wg.Go(func() { l.a.runWork(l.ctx, uid, w, l.results) })
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

// relistDone takes a relist's statuses to every pod (evRelist), and, once
// every source has spoken, puts the runtime's pods that no source wants in
// the table as orphans, to be killed and removed.
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
		l.on(e, event{kind: evRelist, status: st, seq: r.seq, seen: seen, first: first})
		if first && hasRunning(st) {
			e.startObserved = true // adopted: it started in an earlier run
		}
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
		if st.InspectErr != nil {
			continue // known in part: judged when the runtime tells all of it
		}
		l.a.log.Info("Removing orphaned pod", "pod", joinName(st.Namespace, st.Name), "podUID", uid)
		l.pods[uid] = &entry{podState: podState{uid: uid, phase: phaseTerminating, removed: true, runtime: st}, startObserved: true}
	}
}

// setPods takes a source's complete set: each pod it no longer gives is
// dropped, each it gives is added, given back or changed.
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
		if e := l.pods[uid]; e != nil && e.source == u.source {
			l.on(e, event{kind: evDropped})
		}
	}
	var added []*v1.Pod
	for _, p := range u.pods {
		e := l.pods[p.UID]
		switch {
		case e == nil:
			added = append(added, p)
		case e.removed:
			// Started again once stopped, or, for an orphan or a pod
			// being removed, given again once it left the table (drop).
			l.on(e, event{kind: evGivenBack, given: l.desired[e.source][e.uid]})
		case e.source != u.source:
			l.a.log.Error("Pod given by two sources; keeping the first", "pod", nodeapi.PodName(p), "podUID", p.UID,
				"source", u.source, "firstSource", e.source)
		default:
			l.on(e, event{kind: evSourceChanged, pod: p})
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
		s := podState{uid: p.UID, pod: p, source: source, runtime: l.statuses[p.UID], resources: podResources{desired: desiredResources(p)}}
		if seq, ok := l.gone[p.UID]; ok {
			// Given again right after its removal: the last relist may
			// still show what was removed.
			s.runtime, s.minRelist = nil, seq+1
		}
		e := &entry{podState: s, firstSeen: now, startObserved: hasRunning(s.runtime), dirty: true}
		l.pods[p.UID] = e
		l.on(e, event{kind: evAdded})
		// The next admission counts this pod, also while its own admission
		// is pending.
		l.refresh(now)
		l.publish()
		l.waitAdmissions()
	}
}

// waitAdmissions runs the pending admissions' slow steps, each from a
// goroutine of its own, then hands them back to the loop (evAdmitted): the
// loop admits other pods meanwhile. It runs after the pods were published
// among the active ones.
func (l *loop) waitAdmissions() {
	for _, p := range l.waits {
		l.wg.Go(func() {
			p.Wait(l.ctx)
			select {
			case l.admittedC <- p:
			case <-l.ctx.Done():
			}
		})
	}
	l.waits = l.waits[:0]
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

// kill routes a KillPod request; a pod the table does not hold is answered
// at once.
func (l *loop) kill(k killMsg) {
	e := l.pods[k.req.Pod.UID]
	if e == nil {
		l.replies = append(l.replies, pendingReply{k.done, nil})
		return
	}
	l.on(e, event{kind: evKill, kill: &k.req, done: k.done})
}

// result routes a worker's report; the relist it asks for starts before
// the work the report asks for runs (a dropped pod's removal is dated by
// it).
func (l *loop) result(r result) {
	e := l.pods[r.uid]
	if e == nil {
		return
	}
	e.abort, e.keep = nil, nil
	w := l.step(e, event{kind: evResult, result: &r, relistStarted: l.relistStarted, given: l.desired[e.source][e.uid]}, time.Now())
	l.relistSoon()
	l.do(e, w)
	l.release(w)
}

// pendingReply is a KillPod answer held until the next snapshot is out.
type pendingReply struct {
	done chan error
	err  error
}

// drop deletes a removed pod from the table. A source that gives the pod
// again gets it admitted anew.
func (l *loop) drop(e *entry) {
	delete(l.pods, e.uid)
	l.gone[e.uid] = l.relistStarted
	l.changed = true
	for _, src := range l.a.sources {
		if p, ok := l.desired[src][e.uid]; ok {
			l.admitAll(src, []*v1.Pod{p})
			return
		}
	}
}

// refresh recomputes the views of changed pods, each status derived once
// (podstatus.Derive; twice in the turn a pod's active deadline passes, to
// show the deadline's final status), and hands each to its pod (evDerived):
// a pod whose containers finished under its restartPolicy (phase Succeeded
// or Failed), or past its active deadline, is stopped.
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
		final := e.final
		w := l.step(e, event{kind: evDerived, started: st.StartTime, finished: done, relisted: l.relisted}, now)
		l.do(e, w)
		l.release(w)
		if e.final != final {
			in.Final = e.final
			st, _ = l.a.derive(in, now)
		}
		if !e.startObserved && st.Phase == v1.PodRunning {
			e.startObserved = true
			l.a.m.startDuration.WithLabelValues().Observe(now.Sub(e.firstSeen).Seconds())
		}
		p := *e.pod
		p.Status = st
		e.view = &podView{pod: &p, deleted: e.removed, terminated: e.phase == phaseTerminated, cleanedUp: !hasRunning(e.runtime)}
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
		Final: e.final, Killed: e.finalByKill, Rejected: e.rejected,
		// The runtime listed after the kill: what did not finish never will.
		Deleted: e.deleting && e.phase == phaseTerminated, Settled: l.relistSeen >= e.minRelist,
		// From a sync's dispatch until the runtime was listed after it.
		Syncing: e.settle != nil,
	}
	if e.view != nil {
		in.Previous = &e.view.pod.Status
	}
	if l.a.devices != nil {
		in.Devices = l.a.devices.AllocatedResourcesStatus(string(e.uid))
	}
	return in
}

// The kubelet's reason and message for a pod past its activeDeadlineSeconds.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline is when pod, started at start (its status's StartTime),
// has been active for its spec.activeDeadlineSeconds, as the kubelet
// counts; ok is false without a deadline or a start time.
func activeDeadline(pod *v1.Pod, start *metav1.Time) (at time.Time, ok bool) {
	d := pod.Spec.ActiveDeadlineSeconds
	if d == nil || start == nil || start.IsZero() {
		return time.Time{}, false
	}
	return start.Add(time.Duration(*d) * time.Second), true
}

// dispatch hands every idle pod its next worker operation, if one is due
// (evDispatch).
func (l *loop) dispatch(now time.Time) {
	if !l.relisted {
		return // adoption: nothing runs before the runtime was listed
	}
	stopping := map[string]bool{}
	for _, e := range l.pods {
		if e.phase == phaseTerminating && e.pod != nil {
			stopping[nodeapi.PodName(e.pod)] = true
		}
	}
	for _, e := range l.pods {
		if !e.idle() || e.minRelist > l.relistSeen {
			continue
		}
		w := l.step(e, event{kind: evDispatch, relistSeen: l.relistSeen, stopping: stopping, given: l.desired[e.source][e.uid]}, now)
		l.do(e, w)
		l.release(w)
	}
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
		if e := l.pods[p.UID]; !e.rejected && !e.removed && e.phase != phaseTerminated {
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
		if e.idle() && e.syncAt.After(now) && (at.IsZero() || e.syncAt.Before(at)) {
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
	abort := w.abort // the goroutine takes the channel, not the whole item
	go func() {
		defer close(watched)
		select {
		case <-abort:
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
