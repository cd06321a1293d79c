package eviction

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/base/metrics"
	"github.com/nodekeeper/nodekeeper/internal/base/periodic"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// StatsSource provides fresh node and pod stats. The real one reads /proc, cgroups
// and the runtime; explain and tests use a fixed Summary.
type StatsSource interface {
	// Summary returns stats sampled now. It is called from the manager's loop only.
	Summary(ctx context.Context) (*statsapi.Summary, error)
}

// NodeStatsSource is a StatsSource that can also sample the node-level
// figures alone, which is far cheaper than a Summary with every pod's stats.
// A pass given one reads the pods' stats (Summary) only when it needs them:
// when a threshold is to be reclaimed, or when local-storage isolation is on
// and an active pod has a local-storage limit.
type NodeStatsSource interface {
	StatsSource
	// NodeSummary returns stats sampled now: Node as Summary fills it, Pods
	// empty. It is called from the manager's loop only.
	NodeSummary(ctx context.Context) (*statsapi.Summary, error)
}

// ContainerGC removes dead containers; the eviction manager calls it to reclaim
// disk before evicting (the kubelet's DeleteAllUnusedContainers), with its
// pass's now, from the goroutine running the pass.
type ContainerGC interface {
	DeleteAllUnusedContainers(ctx context.Context, now time.Time) error
}

// ImageGC removes unused images; the eviction manager calls it to reclaim disk
// before evicting (the kubelet's DeleteUnusedImages), with its pass's now, from
// the goroutine running the pass.
type ImageGC interface {
	DeleteUnusedImages(ctx context.Context, now time.Time) error
}

// Deps are the manager's collaborators.
type Deps struct {
	Stats StatsSource // required
	// Killer stops evicted pods. Required. It is called from the goroutine
	// running the pass and blocks it until the pod's containers have stopped.
	Killer nodeapi.PodKiller
	// ActivePods returns the pods that may be evicted. Required. Called from the loop.
	ActivePods func() []*v1.Pod
	// PodCleanedUp reports whether an evicted pod's resources are released; Step
	// waits for it (polling every DefaultPodCleanupPoll, up to PodCleanupTimeout)
	// before its next pass. Nil means a pod counts as cleaned up at the first poll.
	PodCleanedUp func(pod *v1.Pod) bool
	ContainerGC  ContainerGC // optional; nil reclaims nothing
	ImageGC      ImageGC     // optional; nil reclaims nothing
	// Recorder gets the kubelet's events: Evicted on each evicted pod (with the
	// offending-container annotations), EvictionThresholdMet on the node.
	// Optional; nil discards them.
	Recorder nodeapi.Recorder
	// NodeName names the Node object node-level events are about.
	NodeName string
	Logger   *slog.Logger
	// Registerer, when set, gets the kubelet's counter kubelet_evictions
	// {eviction_signal}: evictions by signal, or by local-storage limit
	// (emptydirfs.limit, ephemeralpodfs.limit, ephemeralcontainerfs.limit).
	Registerer prometheus.Registerer
}

// Status is a read-only snapshot of the manager's view, published by every pass
// before it reclaims or evicts anything.
type Status struct {
	Time          time.Time
	Conditions    []v1.NodeConditionType
	ThresholdsMet []Threshold
	Observations  Observations
	Layout        DiskLayout
	// Reclaiming is the signal the pass acts on (after its grace period and with
	// fresh stats), "" when none or when the pass evicts local-storage violators
	// instead.
	Reclaiming Signal
}

// HasCondition reports whether c is among the conditions.
func (s *Status) HasCondition(c v1.NodeConditionType) bool { return slices.Contains(s.Conditions, c) }

// Manager is the eviction manager: a loop that observes stats, keeps node
// conditions and evicts at most one pod per pass (or every pod over its
// local-storage limits). Create it with New and run it with Run (or drive
// Step); Status, Conditions, Admit and Wake may be called from any goroutine.
type Manager struct {
	cfg       Config
	deps      Deps
	recorder  nodeapi.Recorder
	log       *slog.Logger
	evictions *prometheus.CounterVec
	status    atomic.Pointer[Status] // written by the goroutine running passes
	wakeC     chan struct{}          // Wake's requests to Run, buffered 1
	// st is the state carried between passes, and wait Step's wait for
	// evicted pods' cleanup (nil when none). Only the goroutine running a pass
	// touches them: the caller of Step (Run's), or of Pass (never both at once).
	st   state
	wait *cleanupWait
}

// New validates cfg and deps and returns a manager.
func New(cfg Config, deps Deps) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Stats == nil || deps.Killer == nil || deps.ActivePods == nil {
		return nil, errors.New("eviction: Stats, Killer and ActivePods are required")
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := metrics.NewRegistrar(deps.Registerer, "eviction")
	evictions := reg.CounterVec(prometheus.CounterOpts{
		Name: "kubelet_evictions",
		Help: "Cumulative number of pod evictions by eviction signal.",
	}, "eviction_signal")
	if err := reg.Err(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, deps: deps, recorder: deps.Recorder,
		log: log.With("subsystem", "eviction"), evictions: evictions, wakeC: make(chan struct{}, 1)}
	if m.recorder == nil {
		m.recorder = nodeapi.LogRecorder{} // discards
	}
	m.status.Store(&Status{})
	return m, nil
}

// Status returns the latest published snapshot. Never nil.
func (m *Manager) Status() *Status { return m.status.Load() }

// Conditions returns the node pressure conditions currently in force.
func (m *Manager) Conditions() []v1.NodeConditionType { return m.status.Load().Conditions }

// Wake asks Run for a pass now instead of at its next timer: a pressure
// notifier calls it when memory crosses a mark between passes. The pass reads
// fresh stats, as every pass does. Wake never blocks; wakes that arrive while
// one is pending are merged into it. While Run waits for evicted pods' cleanup,
// a wake checks the cleanup at once and passes only when it is done. It may be
// called from any goroutine, before or during Run.
func (m *Manager) Wake() {
	select {
	case m.wakeC <- struct{}{}:
	default:
	}
}

// Admit decides whether pod may start under the current node conditions.
func (m *Manager) Admit(pod *v1.Pod) AdmitResult { return Admit(pod, m.Conditions()) }

// state is carried from pass to pass; see Manager.st for who may touch it.
type state struct {
	layout       *DiskLayout
	thresholds   []Threshold // config thresholds with containerfs derived for the layout
	met          []Threshold // met and past their grace period in the last pass
	firstSeen    map[thresholdKey]time.Time
	condObserved map[v1.NodeConditionType]time.Time
	lastObs      Observations
}

// Run monitors until ctx ends, then returns nil: Step on real time
// (periodic.Loop), at once, at each time Step returns and at once on a Wake.
// A pass runs at once, then every MonitoringInterval; after a pass that
// evicted, Run waits for the evicted pods' cleanup (checked every
// DefaultPodCleanupPoll, for at most PodCleanupTimeout) and runs the next pass
// as soon as that wait ends. Call Run once, and not together with Step.
func (m *Manager) Run(ctx context.Context) error {
	return periodic.Loop(ctx, m.Step, m.wakeC)
}

// cleanupWait is Step's wait for evicted pods to be cleaned up.
type cleanupWait struct {
	pods []*v1.Pod
	// deadline is when Step gives up waiting; zero until the first call
	// after the pass that evicted, which starts the wait.
	deadline time.Time
}

// Step does what is due at now and returns when it is due again. Without a
// wait for evicted pods' cleanup it runs a pass: one that evicted nobody is
// due again MonitoringInterval after now; one that evicted returns now, so
// that the next call, at the time its kills have ended, starts the wait: due
// again min(DefaultPodCleanupPoll, PodCleanupTimeout) after that call, until
// PodCleanupTimeout. While waiting, it checks the pods' cleanup and runs the
// next pass once they are cleaned up or the wait has timed out. A call before
// the due time (a Wake) does the same at once. Call it from one goroutine at
// a time: Run's, or nodekeeper simulate's on virtual time.
func (m *Manager) Step(ctx context.Context, now time.Time) time.Time {
	if w := m.wait; w != nil {
		if w.deadline.IsZero() {
			// As in the kubelet, the wait starts when the pass has ended and
			// the first cleanup check is one poll after.
			w.deadline = now.Add(m.cfg.PodCleanupTimeout)
			return now.Add(min(DefaultPodCleanupPoll, m.cfg.PodCleanupTimeout))
		}
		if !m.cleanedUp(w.pods) {
			if now.Before(w.deadline) {
				return now.Add(min(DefaultPodCleanupPoll, w.deadline.Sub(now)))
			}
			m.log.Warn("Eviction manager: timed out waiting for pods to be cleaned up", "pods", len(w.pods))
		}
		m.wait = nil
	}
	evicted := m.synchronize(ctx, &m.st, now)
	if len(evicted) == 0 {
		return now.Add(m.cfg.MonitoringInterval)
	}
	m.wait = &cleanupWait{pods: evicted}
	return now
}

// cleanedUp reports whether every pod in pods is cleaned up.
func (m *Manager) cleanedUp(pods []*v1.Pod) bool {
	if m.deps.PodCleanedUp == nil {
		return true
	}
	for _, p := range pods {
		if !m.deps.PodCleanedUp(p) {
			return false
		}
	}
	return true
}

// Pass runs one pass of the control loop at now and returns the pods it
// evicted. It does not wait for their cleanup, nor change Step's wait. It is
// for driving the manager from outside (nodekeeper simulate's scripted passes)
// and must not run at the same time as another pass: not concurrently with
// another Pass or Step, so not while Run runs.
func (m *Manager) Pass(ctx context.Context, now time.Time) []*v1.Pod {
	return m.synchronize(ctx, &m.st, now)
}

// synchronize is one pass of the control loop at now; it returns the pods it
// evicted.
func (m *Manager) synchronize(ctx context.Context, st *state, now time.Time) []*v1.Pod {
	summary, partial, err := m.nodeSummary(ctx)
	if err != nil {
		m.log.Error("Eviction manager: failed to get summary stats", "err", err)
		return nil
	}
	if st.layout == nil {
		l := DetectLayout(summary)
		if m.cfg.Layout != nil {
			l = *m.cfg.Layout
		}
		st.layout = &l
		st.thresholds = WithContainerFsThresholds(m.cfg.Thresholds, l)
		m.log.Info("Eviction manager: detected disk layout", "layout", l.String())
	}
	obs := Observe(summary)

	met := ThresholdsMet(st.thresholds, obs, false)
	if len(st.met) > 0 {
		// Thresholds met before stay until their minimum reclaim is satisfied.
		met = mergeThresholds(met, ThresholdsMet(st.met, obs, true))
	}
	firstSeen := firstObservedAt(met, st.firstSeen, now)
	condObserved := conditionsLastObservedAt(Conditions(met), st.condObserved, now)
	conds := conditionsObservedSince(condObserved, m.cfg.PressureTransitionPeriod, now)
	// Only thresholds past their grace period are carried to the next pass for
	// minimum-reclaim hysteresis (the kubelet stores thresholdsMet after
	// thresholdsMetGracePeriod).
	graced := metGracePeriod(met, firstSeen, now)
	actionable := updatedStats(graced, obs, st.lastObs)
	pods := m.deps.ActivePods()
	podStats := summary.Pods
	if partial && needPodStats(pods, actionable, m.cfg.LocalStorageCapacityIsolation) {
		full, err := m.deps.Stats.Summary(ctx)
		if err != nil {
			m.log.Error("Eviction manager: failed to get summary stats", "err", err)
			return nil
		}
		podStats = full.Pods
	}

	m.logConditionChanges(m.status.Load().Conditions, conds)
	st.met, st.firstSeen, st.condObserved, st.lastObs = graced, firstSeen, condObserved, obs
	plan := planPass(passInput{layout: *st.layout, pods: pods, stats: PodStatsFunc(podStats), obs: obs,
		actionable: actionable, localStorage: m.cfg.LocalStorageCapacityIsolation, maxPodGrace: m.cfg.MaxPodGracePeriod})
	status := &Status{Time: now, Conditions: conds, ThresholdsMet: met, Observations: obs, Layout: *st.layout}
	if plan.Target != nil {
		status.Reclaiming = plan.Target.Signal
	}
	m.status.Store(status)

	if t := plan.Target; t != nil {
		m.log.Warn("Eviction manager: attempting to reclaim", "resourceName", string(plan.Resource), "signal", string(t.Signal))
		m.recorder.Eventf(nodeapi.NodeRef(m.deps.NodeName), v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", plan.Resource)
		if m.reclaimNodeLevel(ctx, st, t.Signal, now) {
			return nil
		}
		if len(pods) == 0 {
			m.log.Error("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
			return nil
		}
	}
	for _, p := range plan.Skipped {
		m.log.Info("Eviction manager: cannot evict a critical pod", "pod", nodeapi.PodName(p))
	}
	if plan.Target != nil && len(plan.Evictions) == 0 {
		m.log.Info("Eviction manager: unable to evict any pods from the node")
		return nil
	}
	evicted := make([]*v1.Pod, 0, len(plan.Evictions))
	for _, e := range plan.Evictions {
		m.evict(ctx, e)
		evicted = append(evicted, e.Pod)
	}
	return evicted
}

// evict records the Evicted event and kills the pod. A kill error is logged and
// the pass still ends, as in the kubelet.
func (m *Manager) evict(ctx context.Context, e Evicted) {
	m.log.Info("Eviction manager: evicting pod", "pod", nodeapi.PodName(e.Pod), "podUID", string(e.Pod.UID),
		"signal", string(e.Signal), "limit", e.Limit, "gracePeriod", e.GracePeriod, "message", e.Message)
	m.recorder.AnnotatedEventf(e.Pod, e.Annotations, v1.EventTypeWarning, Reason, "%s", e.Message)
	if err := m.deps.Killer.KillPod(ctx, e.KillRequest()); err != nil {
		m.log.Error("Eviction manager: pod failed to evict", "pod", nodeapi.PodName(e.Pod), "err", err)
	}
	m.evictions.WithLabelValues(e.metricLabel()).Inc()
}

// reclaimFuncs lists the node-level reclaim steps for signal s on layout l.
func (m *Manager) reclaimFuncs(s Signal, l DiskLayout) []func(context.Context, time.Time) error {
	steps := ReclaimSteps(s, l)
	var out []func(context.Context, time.Time) error
	if g := m.deps.ContainerGC; g != nil && steps.Containers {
		out = append(out, g.DeleteAllUnusedContainers)
	}
	if g := m.deps.ImageGC; g != nil && steps.Images {
		out = append(out, g.DeleteUnusedImages)
	}
	return out
}

// Steps names the node-level reclaim a signal triggers: dead containers first,
// then unused images.
type Steps struct{ Containers, Images bool }

// ReclaimSteps is the kubelet's per-signal node-level reclaim table:
//
//	layout      nodefs.*              imagefs.*             containerfs.*
//	no imagefs  containers, images    containers, images    containers, images
//	dedicated   nothing               containers, images    containers, images
//	split       containers            images                containers
//
// Memory and PID signals reclaim nothing at node level.
func ReclaimSteps(s Signal, l DiskLayout) Steps {
	r, _ := s.Resource()
	if r != v1.ResourceEphemeralStorage && r != ResourceInodes {
		return Steps{}
	}
	node := s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree
	image := s == SignalImageFsAvailable || s == SignalImageFsInodesFree
	switch l {
	case DedicatedImageFs:
		if node {
			return Steps{}
		}
		return Steps{Containers: true, Images: true}
	case SplitImageFs:
		if image {
			return Steps{Images: true}
		}
		return Steps{Containers: true}
	}
	return Steps{Containers: true, Images: true}
}

// nodeSummary samples stats for the node-level signals: NodeSummary when
// the source has it (partial: the pods' stats are missing), else Summary.
func (m *Manager) nodeSummary(ctx context.Context) (summary *statsapi.Summary, partial bool, err error) {
	if src, ok := m.deps.Stats.(NodeStatsSource); ok {
		summary, err = src.NodeSummary(ctx)
		return summary, true, err
	}
	summary, err = m.deps.Stats.Summary(ctx)
	return summary, false, err
}

// needPodStats reports whether a pass needs the pods' stats: to rank pods
// for an actionable threshold, or to check local-storage limits (with
// localStorage) when a pod has one.
func needPodStats(pods []*v1.Pod, actionable []Threshold, localStorage bool) bool {
	if _, _, ok := ReclaimTarget(actionable); ok {
		return true
	}
	return localStorage && slices.ContainsFunc(pods, hasLocalStorageLimit)
}

// reclaimNodeLevel runs the reclaim steps for s at now; it reports true when,
// after them, fresh stats show no threshold met any more (minimum reclaim
// included).
func (m *Manager) reclaimNodeLevel(ctx context.Context, st *state, s Signal, now time.Time) bool {
	funcs := m.reclaimFuncs(s, *st.layout)
	if len(funcs) == 0 {
		return false
	}
	for _, f := range funcs {
		if err := f(ctx, now); err != nil {
			m.log.Warn("Eviction manager: node-level reclaim step failed", "signal", string(s), "err", err)
		}
	}
	summary, _, err := m.nodeSummary(ctx)
	if err != nil {
		m.log.Error("Eviction manager: failed to get summary stats after reclaim", "err", err)
		return false
	}
	if len(ThresholdsMet(st.thresholds, Observe(summary), true)) == 0 {
		m.log.Info("Eviction manager: node-level reclaim freed enough; no pod evicted", "signal", string(s))
		return true
	}
	return false
}

func (m *Manager) logConditionChanges(before, after []v1.NodeConditionType) {
	for _, c := range after {
		if !slices.Contains(before, c) {
			m.log.Warn("Eviction manager: node condition set", "condition", string(c))
		}
	}
	for _, c := range before {
		if !slices.Contains(after, c) {
			m.log.Info("Eviction manager: node condition cleared", "condition", string(c))
		}
	}
}
