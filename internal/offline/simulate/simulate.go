// Package simulate replays a node's history through the real managers: the
// composition root (internal/core/node) builds the eviction manager, image and
// container GC, the admission chain and critical-pod preemption exactly as the
// agent does, over a scripted runtime and stats source, and calls their steps
// — the passes their Run loops make on real time — on virtual time
// (schedule.go). Every decision is reported with its time.
//
// The simulator owns time. At each instant it first applies the scenario's steps,
// then calls the managers' steps that are due, one at a time (the eviction
// monitor, container GC, image GC: the order of node.Loops), each time until the
// step has returned its next due time; then it moves to the next scenario step
// or due time. The schedules are the managers' own: the simulator has no copy
// of them. The node reacts as a real one would: an evicted or preempted
// pod's memory and disk are given back in the stats (when its shutdown
// completes: a scenario can make it hang), and a removed image's size is freed
// on the image filesystem.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/containergc"
	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	knode "github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// start is the virtual time at offset 0.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// maxWakeupsPerInstant bounds the steps called at one virtual instant: a step
// that keeps asking to be called "now" would otherwise stop time.
const maxWakeupsPerInstant = 1000

// sim is one run of a scenario. Only the simulation goroutine touches it, and
// the loop goroutines while the simulator waits for them.
type sim struct {
	sc    *Scenario
	n     *node
	sched *schedule
	mgrs  *knode.Node
	log   *slog.Logger
	// pending holds the events not yet handed to sink: those of the current
	// pass (passDepth > 0), whose threshold and condition records go in front
	// of what the pass did once it is over. Nothing else is kept, so memory
	// does not grow with virtual time.
	pending   []Event
	passDepth int
	sink      Sink
	// sinkErr is the first error of sink; the run stops at it.
	sinkErr error
	// reclaimReported: the current eviction pass's Reclaimed record is out.
	reclaimReported bool
	// inLoop is true while the simulator has called a manager's step and
	// waits for it: a kill then comes from a step, which may sleep on the
	// schedule.
	inLoop bool
	// killWait is the stuck pod a step's kill sleeps for; the loop touches it
	// while the simulator waits for it, the simulator while the kill sleeps.
	killWait *v1.Pod
}

// errKillTimeout is the kill's error when a pod's shutdown does not complete
// in time, as the kubelet's.
var errKillTimeout = errors.New("timeout waiting to kill pod")

// minKillTimeout is the least time the kubelet waits for a killed pod's
// shutdown before it gives up; it waits 1.5 times the grace period when longer.
const minKillTimeout = 10 * time.Second

// Sink receives a run's events as they become final, in time order, a batch
// at a time (one step's or one wake-up's). batch is reused after the call.
type Sink func(batch []Event) error

// Stream plays the scenario and hands its events to sink as it goes: when it
// returns early (ctx ended, sink failed), sink has had every event computed
// before. The managers log to logger with the virtual time as each record's time.
func Stream(ctx context.Context, sc *Scenario, logger *slog.Logger, sink Sink) error {
	return newSim(sc, logger).stream(ctx, sink)
}

func newSim(sc *Scenario, logger *slog.Logger) *sim {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &sim{sc: sc, sched: newSchedule(start)}
	s.log = slog.New(virtualTimeHandler{next: logger.Handler(), now: func() time.Time { return s.sched.now }})
	s.n = &node{now: start, layout: sc.Node.Layout(), emit: s.emit}
	return s
}

// stream plays the scenario once, handing its events to sink.
func (s *sim) stream(ctx context.Context, sink Sink) error {
	s.sink = sink
	if err := s.build(); err != nil {
		return err
	}
	loopCtx, stopLoops := context.WithCancel(ctx)
	s.startLoops(loopCtx)
	err := s.play(ctx)
	stopLoops()
	s.sched.stopLoops()
	s.passDepth = 0
	s.flush()
	if s.sinkErr != nil && !errors.Is(err, s.sinkErr) {
		err = errors.Join(s.sinkErr, err)
	}
	return err
}

func (s *sim) emit(e Event) {
	e.At = s.n.now.Sub(start)
	s.pending = append(s.pending, e)
	if s.passDepth == 0 {
		s.flush()
	}
}

// flush hands the pending events to the sink, unless it has failed, and
// forgets them.
func (s *sim) flush() {
	if len(s.pending) > 0 && s.sinkErr == nil {
		s.sinkErr = s.sink(s.pending)
	}
	clear(s.pending)
	s.pending = s.pending[:0]
}

// build makes the managers over the scripted node, through the composition root.
func (s *sim) build() error {
	layout := s.sc.Node.Layout()
	gc := s.sc.Container
	mgrs, err := knode.New(s.sc.Config, knode.Options{
		ContainerGC: containergc.Policy{MinAge: gc.MinAge, MaxPerPodContainer: gc.MaxPerPodContainer, MaxContainers: gc.MaxContainers},
		Layout:      &layout,
	}, knode.Collaborators{
		Capacity: func() (v1.ResourceList, error) { return s.sc.Node.Capacity.DeepCopy(), nil },
		Stats:    s.n,
		Runtime:  s.n,
		Pods:     s.n,
		// The eviction manager waits for an evicted pod's cleanup.
		PodCleanedUp: s.n.podCleanedUp,
		Killer:       nodeapi.PodKillerFunc(s.kill),
		Recorder:     recorder{s},
		Start:        start,
		Statfs: func(string) (imagegc.FsStats, error) {
			c, a, err := s.n.statfs()
			return imagegc.FsStats{CapacityBytes: int64(c), AvailableBytes: int64(a)}, err
		},
		Logger: s.log,
	})
	if err != nil {
		return decode.Bad(err)
	}
	s.mgrs = mgrs
	return nil
}

// startLoops puts the managers' steps, when the scenario runs them, on the
// schedule, due at once, in the order of node.Loops. They run on ctx, which
// must end before the schedule stops them.
func (s *sim) startLoops(ctx context.Context) {
	if !s.sc.Loops {
		return
	}
	for _, l := range s.mgrs.Loops() {
		if l.Step != nil {
			s.sched.startLoop(ctx, l.Name, l.Step)
		}
	}
}

// play moves virtual time from step to step and deadline to deadline, until the
// scenario's end.
func (s *sim) play(ctx context.Context) error {
	steps := s.sc.Steps
	for {
		t, ok := time.Duration(0), false
		if at, due := s.sched.next(); due {
			t, ok = at.Sub(start), true
		}
		if len(steps) > 0 && (!ok || steps[0].At <= t) {
			t, ok = steps[0].At, true
		}
		if !ok || t > s.sc.Until {
			return nil
		}
		s.n.now = start.Add(t)
		s.sched.now = s.n.now
		for len(steps) > 0 && steps[0].At == t {
			if err := s.apply(ctx, steps[0]); err != nil {
				return err
			}
			steps = steps[1:]
			if s.sinkErr != nil {
				return s.sinkErr
			}
		}
		for i := 0; ; i++ {
			if i == maxWakeupsPerInstant {
				return fmt.Errorf("simulate: clock did not advance at %s", t)
			}
			var fired bool
			s.inLoop = true
			s.observePass(func() { fired = s.sched.fireDue() })
			s.inLoop = false
			if s.sinkErr != nil {
				return s.sinkErr
			}
			if !fired {
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// apply makes a step's changes, then runs its admission and actions.
func (s *sim) apply(ctx context.Context, st Step) error {
	n := s.n
	if st.Pods != nil {
		n.pods = slices.Clone(st.Pods)
	}
	if st.Summary != nil {
		c, err := copySummary(st.Summary)
		if err != nil {
			return err
		}
		n.summary = c
	}
	if st.Images != nil {
		n.images = slices.Clone(st.Images)
	}
	if st.Containers != nil {
		n.containers = slices.Clone(st.Containers)
	}
	if st.ImageFs != nil {
		fs := *st.ImageFs
		n.imageFs = &fs
	}
	if len(st.StuckTerminating) > 0 && n.stuck == nil {
		n.stuck = map[string]bool{}
	}
	for _, name := range st.StuckTerminating {
		n.stuck[name] = true
	}
	for _, name := range st.FinishTerminating {
		delete(n.stuck, name)
		pod := n.finishTerminating(name)
		if pod == nil {
			continue
		}
		s.emit(Event{Event: EventTerminated, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
		if s.killWait != nil && samePod(s.killWait, pod) {
			s.sched.expedite() // the step's kill returns now
		}
	}
	if st.Admit != nil {
		s.admit(ctx, st.Admit)
	}
	for _, a := range st.Do {
		s.do(ctx, a)
	}
	return nil
}

// admit runs pod through the admission chain and carries out its preemption
// plan, as the agent's sync loop does.
func (s *sim) admit(ctx context.Context, pod *v1.Pod) {
	resp := s.mgrs.Admission.Admit(ctx, pod)
	if !resp.Admit {
		s.emit(Event{Event: EventRejected, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			Reason: resp.Reason, Message: resp.Message})
		return
	}
	msg := "The pod fits the node."
	if resp.Preemption != nil {
		killed, _ := s.mgrs.Preemption.Execute(ctx, resp.Preemption) // ends early only when ctx does
		var names, stuck []string
		for _, v := range resp.Preemption.Victims {
			names = append(names, nodeapi.PodName(v.Pod))
			if !slices.ContainsFunc(killed, func(p *v1.Pod) bool { return samePod(p, v.Pod) }) {
				stuck = append(stuck, nodeapi.PodName(v.Pod))
			}
		}
		msg = fmt.Sprintf("The pod fits the node after preempting %s.", strings.Join(names, ", "))
		if len(stuck) > 0 {
			msg += fmt.Sprintf(" The shutdown of %s did not complete.", strings.Join(stuck, ", "))
		}
	}
	s.emit(Event{Event: EventAdmitted, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
		Reason: "Admitted", Message: msg})
	s.n.pods = append(s.n.pods, pod)
	// A started pod has stats; without them it would rank first for eviction.
	if s.n.summary != nil {
		zero := uint64(0)
		s.n.summary.Pods = append(s.n.summary.Pods, statsapi.PodStats{
			PodRef: statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			Memory: &statsapi.MemoryStats{WorkingSetBytes: &zero},
		})
	}
}

// do runs one of a step's explicit actions.
func (s *sim) do(ctx context.Context, a Action) {
	var freed int64
	var err error
	s.n.freed = 0
	images, containers := s.mgrs.Images, s.mgrs.Containers
	switch a.Name {
	case "evictionPass":
		if s.killWait != nil {
			err = errors.New("simulate: the eviction loop's pass is waiting for a pod's shutdown")
			break
		}
		if s.n.summary == nil {
			err = errNoSummary // the manager would only log it
		}
		s.observePass(func() { s.mgrs.Eviction.Pass(ctx, s.n.now) })
	case "detectImages":
		err = images.Detect(ctx, s.n.now)
	case "garbageCollectImages":
		err = images.GarbageCollect(ctx, s.n.now)
	case "deleteUnusedImages":
		err = images.DeleteUnusedImages(ctx, s.n.now)
	case "freeImageSpace":
		freed, err = images.FreeSpace(ctx, a.Bytes, s.n.now)
	case "garbageCollectContainers":
		err = containers.GarbageCollect(ctx, false, s.n.now)
	}
	if a.Name != "freeImageSpace" {
		freed = s.n.freed
	}
	e := Event{Event: EventActionResult, Action: a.Name, Freed: ptr(freed)}
	if err != nil {
		msg := err.Error()
		e.Error = &msg
	}
	s.emit(e)
}

// observePass runs f, which may run an eviction pass, and reports what the pass
// changed: thresholds newly met and conditions set or cleared come first, then
// what the pass did (the reclaim's removals and a Reclaimed record, the
// eviction). A pass is recognised by the new status it publishes.
func (s *sim) observePass(f func()) {
	s.n.freed = 0
	s.reclaimReported = false
	before := s.mgrs.Eviction.Status()
	s.passDepth++
	defer func() {
		if s.passDepth--; s.passDepth == 0 {
			s.flush()
		}
	}()
	mark := len(s.pending)
	f()
	after := s.mgrs.Eviction.Status()
	if after == before {
		return
	}
	var pre []Event
	for _, t := range after.ThresholdsMet {
		if eviction.ContainsThreshold(before.ThresholdsMet, t) {
			continue
		}
		e := Event{Event: EventThresholdMet, Signal: string(t.Signal), Operator: string(t.Operator), Value: t.Value.String()}
		if o, ok := after.Observations[t.Signal]; ok && o.Available != nil {
			e.Available = o.Available.String()
		}
		pre = append(pre, e)
	}
	for _, c := range after.Conditions {
		if !slices.Contains(before.Conditions, c) {
			pre = append(pre, Event{Event: EventConditionChanged, Condition: string(c), Status: "True"})
		}
	}
	for _, c := range before.Conditions {
		if !slices.Contains(after.Conditions, c) {
			pre = append(pre, Event{Event: EventConditionChanged, Condition: string(c), Status: "False"})
		}
	}
	for i := range pre {
		pre[i].At = s.n.now.Sub(start)
	}
	s.pending = append(s.pending[:mark], append(pre, s.pending[mark:]...)...)
	s.reportReclaim()
}

// reportReclaim records the current pass's node-level reclaim once: before its
// eviction, or at the end of the pass when nobody was evicted. The pass
// reclaimed when it acted on a signal that has reclaim steps on this layout.
func (s *sim) reportReclaim() {
	st := s.mgrs.Eviction.Status()
	if s.reclaimReported || st.Reclaiming == "" || eviction.ReclaimSteps(st.Reclaiming, st.Layout) == (eviction.Steps{}) {
		return
	}
	s.reclaimReported = true
	s.emit(Event{Event: EventReclaimed, Signal: string(st.Reclaiming), Freed: ptr(s.n.freed)})
}

// kill is the node's PodKiller. The timeline records the final status the kill
// asked for. A pod stops at once and gives back what it used, unless the
// scenario says its shutdown is stuck: then it stops being active but keeps
// its resources, and the kill waits for its shutdown as the kubelet's does,
// for 1.5 times the grace period and at least 10 s (of virtual time; a kill
// from a step — admission's preemption, an explicit evictionPass — cannot let
// time pass and gives up at once), then records ExceededGracePeriod and fails.
func (s *sim) kill(ctx context.Context, req nodeapi.KillRequest) error {
	pod := req.Pod
	grace := int64(req.GracePeriod() / time.Second)
	e := Event{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Reason: req.Status.Reason,
		Message: req.Status.Message, Phase: string(req.Status.Phase), GracePeriodSeconds: ptr(grace)}
	for _, c := range req.Status.Conditions {
		e.Conditions = append(e.Conditions, PodCondition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	switch req.Status.Reason {
	case eviction.Reason:
		s.reportReclaim()
		e.Event, e.Signal = EventEvicted, string(s.mgrs.Eviction.Status().Reclaiming)
	default:
		e.Event = EventPreempted
	}
	s.emit(e)
	if !s.n.stuck[nodeapi.PodName(pod)] {
		s.n.removePod(pod)
		return nil
	}
	s.n.startTerminating(pod)
	if s.inLoop {
		timeout := max(time.Duration(grace+grace/2)*time.Second, minKillTimeout)
		s.killWait = pod
		if !s.sched.sleep(s.n.now.Add(timeout)) {
			s.sched.cancelSleep()
			return ctx.Err()
		}
		s.killWait = nil
		if s.n.podCleanedUpQuiet(pod) {
			return nil
		}
	}
	s.emit(Event{Event: EventExceededGracePeriod, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
		Reason: EventExceededGracePeriod, Message: "Container runtime did not kill the pod within specified grace period."})
	return errKillTimeout
}
