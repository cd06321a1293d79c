// Package simulate replays a node's history through the real managers: the
// eviction manager, image and container garbage collection, the admission chain and
// critical-pod preemption run unchanged against a scripted runtime and stats source
// on a virtual clock, and every decision is reported with its time.
//
// The virtual clock is driven by the simulator: it calls each manager's pass at the
// times its loop would (eviction every monitoring interval, or one second after a
// pass that evicted, once the pod is gone; container GC every minute; image detection
// and image GC every five minutes; all first at 0s), with the virtual time passed in.
// The node reacts as a real one would: an evicted or preempted pod's memory and disk
// are given back in the stats, and a removed image's size is freed on the image
// filesystem.
package simulate

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekeeper/nodekeeper/containergc"
	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/admission"
	"github.com/nodekeeper/nodekeeper/preemption"
)

// Start is the virtual time at offset 0.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Loop periods: the managers' own defaults, which are the kubelet's.
const (
	containerGCPeriod = containergc.DefaultPeriod
	imageGCPeriod     = imagegc.DefaultGCPeriod
	cleanupPoll       = eviction.DefaultPodCleanupPoll // the next pass after an eviction
)

// sim is one run of a scenario.
type sim struct {
	sc              *Scenario
	n               *node
	events          []Event
	mgr             *eviction.Manager
	chain           *admission.Chain
	preempt         *preemption.Executor
	gc              collectors
	log             *slog.Logger
	reclaim         bool // set by the GC adapters during an eviction pass
	reclaimReported bool // the pass's Reclaimed record is out
	status          *eviction.Status
	clock           *testingclock.FakeClock // the eviction manager's, set to the node's time for each pass
}

// Run plays the scenario and returns its events in time order.
func Run(ctx context.Context, sc *Scenario, logger *slog.Logger) ([]Event, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &sim{sc: sc, log: logger, status: &eviction.Status{}, clock: testingclock.NewFakeClock(start)}
	s.n = &node{now: start, dedicated: sc.Node.DedicatedImageFs, emit: s.emit}
	if err := s.build(); err != nil {
		return nil, err
	}
	return s.play(ctx)
}

func (s *sim) emit(e Event) {
	e.At = s.n.now.Sub(start)
	s.events = append(s.events, e)
}

func (s *sim) build() error {
	cfg := s.sc.Config
	ev := cfg.Eviction
	layout := eviction.NoImageFs
	if s.sc.Node.DedicatedImageFs {
		layout = eviction.DedicatedImageFs
	}
	ev.Layout = &layout
	gc, err := newCollectors(s)
	if err != nil {
		return err
	}
	s.gc = gc
	deps := eviction.Deps{
		Stats:      s.n,
		Killer:     evictionKiller{n: s.n, before: s.reportReclaim, signal: func() string { return string(s.mgr.Status().Reclaiming) }},
		ActivePods: func() []*v1.Pod { return slices.Clone(s.n.pods) },
		Clock:      s.clock,
		Logger:     s.log,
	}
	deps.ContainerGC = reclaimer{s, gc.containers.DeleteAllUnusedContainers}
	deps.ImageGC = reclaimer{s, gc.images.DeleteUnusedImages}
	if s.mgr, err = eviction.New(ev, deps); err != nil {
		return err
	}
	alloc := admission.NodeAllocatable(s.sc.Node.Capacity, cfg.KubeReserved, cfg.SystemReserved, cfg.Eviction.Thresholds)
	if _, ok := alloc[v1.ResourcePods]; !ok {
		alloc[v1.ResourcePods] = *resource.NewQuantity(int64(cfg.MaxPods), resource.DecimalSI)
	}
	s.chain, err = admission.New(admission.Deps{
		ActivePods: func() []*v1.Pod { return slices.Clone(s.n.pods) },
		Conditions: s.mgr,
		Node:       func() (admission.Node, error) { return admission.Node{Allocatable: alloc}, nil },
		Preemption: true,
	})
	if err != nil {
		return err
	}
	s.preempt, err = preemption.NewExecutor(preemption.ExecutorDeps{Killer: preemptionKiller{s.n}, Logger: s.log})
	return err
}

// reclaimer adapts a GC function to the eviction manager's reclaim interfaces and
// notes that node-level reclaim ran.
type reclaimer struct {
	s *sim
	f func(context.Context) error
}

func (r reclaimer) DeleteAllUnusedContainers(ctx context.Context) error {
	r.s.reclaim = true
	return r.f(ctx)
}
func (r reclaimer) DeleteUnusedImages(ctx context.Context) error { r.s.reclaim = true; return r.f(ctx) }

// play advances the virtual clock from step to step and loop tick to loop tick.
func (s *sim) play(ctx context.Context) ([]Event, error) {
	var nextEviction, nextContainerGC, nextImageGC time.Duration
	interval := s.sc.Config.Eviction.MonitoringInterval
	if interval <= 0 {
		interval = eviction.DefaultMonitoringInterval
	}
	step := 0
	for t := time.Duration(0); t <= s.sc.Until; {
		s.n.now = start.Add(t)
		for step < len(s.sc.Steps) && s.sc.Steps[step].At == t {
			if err := s.apply(ctx, s.sc.Steps[step]); err != nil {
				return s.events, err
			}
			step++
		}
		if s.sc.Loops {
			if t == nextEviction {
				if evicted := s.evictionPass(ctx); len(evicted) > 0 {
					nextEviction = t + cleanupPoll
				} else {
					nextEviction = t + interval
				}
			}
			if t == nextContainerGC {
				_ = s.gc.containers.GarbageCollect(ctx, false)
				nextContainerGC = t + containerGCPeriod
			}
			if t == nextImageGC {
				_ = s.gc.images.Detect(ctx)
				if s.gc.imagePeriodic {
					_ = s.gc.images.PeriodicGC(ctx) // failures become ImageGCFailed events
				}
				nextImageGC = t + imageGCPeriod
			}
		}
		next := s.sc.Until + 1
		if step < len(s.sc.Steps) {
			next = s.sc.Steps[step].At
		}
		if s.sc.Loops {
			next = min(next, nextEviction, nextContainerGC, nextImageGC)
		}
		if next <= t {
			return s.events, fmt.Errorf("simulate: clock did not advance at %s", t)
		}
		t = next
		if err := ctx.Err(); err != nil {
			return s.events, err
		}
	}
	return s.events, nil
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
	if st.Admit != nil {
		s.admit(ctx, st.Admit)
	}
	for _, a := range st.Do {
		s.do(ctx, a)
	}
	return nil
}

func (s *sim) admit(ctx context.Context, pod *v1.Pod) {
	resp := s.chain.Admit(ctx, pod)
	if !resp.Admit {
		s.emit(Event{Event: EventRejected, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			Reason: resp.Reason, Message: resp.Message})
		return
	}
	// The plan's kills come first, as the kubelet makes them inside admission.
	victims, _ := s.preempt.Execute(ctx, resp.Preemption) // fails only when ctx ends
	msg := "The pod fits the node."
	if len(victims) > 0 {
		names := make([]string, len(victims))
		for i, v := range victims {
			names[i] = podKey(v)
		}
		msg = fmt.Sprintf("The pod fits the node after preempting %s.", strings.Join(names, ", "))
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

func (s *sim) do(ctx context.Context, a Action) {
	var freed int64
	var err error
	s.n.freed = 0
	switch a.Name {
	case "evictionPass":
		if s.n.summary == nil {
			err = errNoSummary // the manager would only log it
		}
		s.evictionPass(ctx)
	case "detectImages":
		err = s.gc.images.Detect(ctx)
	case "garbageCollectImages":
		err = s.gc.images.GarbageCollect(ctx)
	case "deleteUnusedImages":
		err = s.gc.images.DeleteUnusedImages(ctx)
	case "freeImageSpace":
		freed, err = s.gc.images.FreeSpace(ctx, a.Bytes)
	case "garbageCollectContainers":
		err = s.gc.containers.GarbageCollect(ctx, false)
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

// evictionPass runs one eviction pass and reports what changed: thresholds newly
// met and conditions set or cleared come first, then the reclaim's removals and a
// Reclaimed record, then the eviction.
func (s *sim) evictionPass(ctx context.Context) []*v1.Pod {
	s.reclaim, s.reclaimReported = false, false
	s.n.freed = 0
	before := s.status
	mark := len(s.events)
	s.clock.SetTime(s.n.now)
	evicted := s.mgr.Pass(ctx)
	after := s.mgr.Status()
	s.status = after
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
	s.events = append(s.events[:mark], append(pre, s.events[mark:]...)...)
	s.reportReclaim()
	return evicted
}

// reportReclaim records the node-level reclaim of the current pass once: before
// its eviction, or at the end of the pass when nobody was evicted.
func (s *sim) reportReclaim() {
	if !s.reclaim || s.reclaimReported {
		return
	}
	s.reclaimReported = true
	s.emit(Event{Event: EventReclaimed, Signal: string(s.mgr.Status().Reclaiming), Freed: ptr(s.n.freed)})
}
