package eviction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/metrics"
	"github.com/nodekeeper/nodekeeper/qos"
)

// StatsSource provides fresh node and pod stats. The real one reads /proc, cgroups
// and the runtime; explain and tests use a fixed Summary.
type StatsSource interface {
	// Summary returns stats sampled now. It is called from the manager's loop only.
	Summary(ctx context.Context) (*statsapi.Summary, error)
}

// Eviction says why and how a pod is killed.
type Eviction struct {
	Signal      Signal // the signal reclaimed, or "" for a local-storage limit
	Reason      string // pod status reason: "Evicted"
	Message     string // the kubelet's eviction message
	Annotations map[string]string
	GracePeriod time.Duration
}

// PodKiller stops a pod and marks its status Failed with the eviction's reason and
// message (and a DisruptionTarget condition). KillPod blocks until the pod's
// containers are stopped or ctx ends. It must be safe to call from the manager's
// loop goroutine while the agent runs.
type PodKiller interface {
	KillPod(ctx context.Context, pod *v1.Pod, ev Eviction) error
}

// ContainerGC removes dead containers; the eviction manager calls it to reclaim
// disk before evicting (the kubelet's DeleteAllUnusedContainers).
type ContainerGC interface {
	DeleteAllUnusedContainers(ctx context.Context) error
}

// ImageGC removes unused images; the eviction manager calls it to reclaim disk
// before evicting (the kubelet's DeleteUnusedImages).
type ImageGC interface {
	DeleteUnusedImages(ctx context.Context) error
}

// Recorder receives node-level events such as EvictionThresholdMet. Optional.
type Recorder interface {
	NodeEvent(eventType, reason, message string)
}

// Deps are the manager's collaborators.
type Deps struct {
	Stats  StatsSource // required
	Killer PodKiller   // required
	// ActivePods returns the pods that may be evicted. Required. Called from the loop.
	ActivePods func() []*v1.Pod
	// PodCleanedUp reports whether an evicted pod's resources are released; the
	// loop waits for it (polling every second, up to PodCleanupTimeout) before its
	// next pass. Nil means a pod counts as cleaned up at the first poll.
	PodCleanedUp func(pod *v1.Pod) bool
	ContainerGC  ContainerGC // optional; nil reclaims nothing
	ImageGC      ImageGC     // optional; nil reclaims nothing
	Recorder     Recorder    // optional
	Logger       *slog.Logger
	// Registerer, when set, gets the kubelet's counter kubelet_evictions
	// {eviction_signal}: evictions by signal, or by local-storage limit
	// (emptydirfs.limit, ephemeralpodfs.limit, ephemeralcontainerfs.limit).
	Registerer prometheus.Registerer
}

// Status is a read-only snapshot of the manager's view, published after every pass.
type Status struct {
	Time          time.Time
	Conditions    []v1.NodeConditionType
	ThresholdsMet []Threshold
	Observations  Observations
	Layout        DiskLayout
	// Reclaiming is the signal the pass acts on (after its grace period and with
	// fresh stats), "" when none.
	Reclaiming Signal
}

// HasCondition reports whether c is among the conditions.
func (s *Status) HasCondition(c v1.NodeConditionType) bool { return slices.Contains(s.Conditions, c) }

// Manager is the eviction manager: a loop that observes stats, keeps node
// conditions and evicts at most one pod per pass. Create it with New and run it
// with Run; Conditions and Admit may be called from any goroutine.
type Manager struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	evictions *prometheus.CounterVec
	status    atomic.Pointer[Status] // written by the goroutine running passes
	// st is the state carried between passes. Only the goroutine running passes
	// touches it: Run's, or the caller of Pass when Run is not running.
	st state
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
	evictions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubelet_evictions",
		Help: "Cumulative number of pod evictions by eviction signal.",
	}, []string{"eviction_signal"})
	evictions, err := metrics.Register(deps.Registerer, "eviction", evictions)
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, deps: deps, log: log.With("subsystem", "eviction"), evictions: evictions}
	m.status.Store(&Status{})
	return m, nil
}

// Status returns the latest published snapshot. Never nil.
func (m *Manager) Status() *Status { return m.status.Load() }

// Conditions returns the node pressure conditions currently in force.
func (m *Manager) Conditions() []v1.NodeConditionType { return m.status.Load().Conditions }

// Admit decides whether pod may start under the current node conditions.
func (m *Manager) Admit(pod *v1.Pod) AdmitResult { return Admit(pod, m.Conditions()) }

// state is owned by the Run goroutine.
type state struct {
	layout       *DiskLayout
	thresholds   []Threshold // config thresholds with containerfs derived for the layout
	met          []Threshold // met and past their grace period in the last pass
	firstSeen    map[thresholdKey]time.Time
	condObserved map[v1.NodeConditionType]time.Time
	lastObs      Observations
}

// Run monitors until ctx ends. After a pass that evicts a pod it waits for that
// pod's cleanup (polled every second) and then starts the next pass; otherwise
// it waits one monitoring interval. It returns nil when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		evicted := m.synchronize(ctx, &m.st, time.Now())
		if len(evicted) > 0 {
			m.waitForCleanup(ctx, evicted)
			timer.Reset(0)
		} else {
			timer.Reset(m.cfg.MonitoringInterval)
		}
	}
}

// Pass runs one pass of the control loop at now and returns the pods it evicted.
// It does not wait for their cleanup. Pass must not be called while Run is running:
// it is for driving the manager on a virtual clock (nodekeeper simulate).
func (m *Manager) Pass(ctx context.Context, now time.Time) []*v1.Pod {
	return m.synchronize(ctx, &m.st, now)
}

// synchronize is one pass of the control loop; it returns the pods it evicted.
func (m *Manager) synchronize(ctx context.Context, st *state, now time.Time) []*v1.Pod {
	summary, err := m.deps.Stats.Summary(ctx)
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
	stats := PodStatsFunc(summary.Pods)

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

	m.logConditionChanges(m.status.Load().Conditions, conds)
	st.met, st.firstSeen, st.condObserved, st.lastObs = graced, firstSeen, condObserved, obs
	target, res, acting := ReclaimTarget(actionable)
	status := &Status{Time: now, Conditions: conds, ThresholdsMet: met, Observations: obs, Layout: *st.layout}
	if acting {
		status.Reclaiming = target.Signal
	}
	m.status.Store(status)

	pods := m.deps.ActivePods()
	if m.cfg.LocalStorageCapacityIsolation {
		if evicted := m.evictLocalStorageViolators(ctx, pods, stats, *st.layout); len(evicted) > 0 {
			return evicted
		}
	}
	if !acting {
		return nil
	}
	m.log.Warn("Eviction manager: attempting to reclaim", "resourceName", string(res), "signal", string(target.Signal))
	if r := m.deps.Recorder; r != nil {
		r.NodeEvent(v1.EventTypeWarning, "EvictionThresholdMet", fmt.Sprintf("Attempting to reclaim %s", res))
	}
	if m.reclaimNodeLevel(ctx, st, target.Signal) {
		return nil
	}
	if len(pods) == 0 {
		m.log.Error("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil
	}
	for _, r := range Rank(target.Signal, *st.layout, pods, stats) {
		pod := r.Pod
		if qos.IsCritical(pod) {
			m.log.Info("Eviction manager: cannot evict a critical pod", "pod", podKey(pod))
			continue
		}
		msg, ann := Message(res, pod, stats, actionable, obs)
		m.evict(ctx, pod, Eviction{
			Signal: target.Signal, Reason: Reason, Message: msg, Annotations: ann,
			GracePeriod: EvictionGracePeriod(target, pod, m.cfg.MaxPodGracePeriod),
		})
		m.evictions.WithLabelValues(string(target.Signal)).Inc()
		return []*v1.Pod{pod}
	}
	m.log.Info("Eviction manager: unable to evict any pods from the node")
	return nil
}

func (m *Manager) evictLocalStorageViolators(ctx context.Context, pods []*v1.Pod, stats StatsFunc, l DiskLayout) []*v1.Pod {
	var evicted []*v1.Pod
	for _, v := range LocalStorageViolations(pods, stats, l) {
		if qos.IsCritical(v.Pod) {
			m.log.Info("Eviction manager: cannot evict a critical pod", "pod", podKey(v.Pod))
			continue
		}
		m.evict(ctx, v.Pod, Eviction{Reason: Reason, Message: v.Message, GracePeriod: HardEvictionGracePeriod})
		m.evictions.WithLabelValues(v.Limit).Inc()
		evicted = append(evicted, v.Pod)
	}
	return evicted
}

// evict kills pod. A kill error is logged and the pass still ends, as in the kubelet.
func (m *Manager) evict(ctx context.Context, pod *v1.Pod, ev Eviction) {
	m.log.Info("Eviction manager: evicting pod", "pod", podKey(pod), "podUID", string(pod.UID),
		"signal", string(ev.Signal), "gracePeriod", ev.GracePeriod, "message", ev.Message)
	if err := m.deps.Killer.KillPod(ctx, pod, ev); err != nil {
		m.log.Error("Eviction manager: pod failed to evict", "pod", podKey(pod), "err", err)
	}
}

// reclaimFuncs lists the node-level reclaim steps for signal s on layout l.
func (m *Manager) reclaimFuncs(s Signal, l DiskLayout) []func(context.Context) error {
	steps := ReclaimSteps(s, l)
	var out []func(context.Context) error
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

// reclaimNodeLevel runs the reclaim steps for s; it reports true when, after them,
// fresh stats show no threshold met any more (minimum reclaim included).
func (m *Manager) reclaimNodeLevel(ctx context.Context, st *state, s Signal) bool {
	funcs := m.reclaimFuncs(s, *st.layout)
	if len(funcs) == 0 {
		return false
	}
	for _, f := range funcs {
		if err := f(ctx); err != nil {
			m.log.Warn("Eviction manager: node-level reclaim step failed", "signal", string(s), "err", err)
		}
	}
	summary, err := m.deps.Stats.Summary(ctx)
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

// waitForCleanup polls every second, up to PodCleanupTimeout, until every evicted
// pod is cleaned up. As in the kubelet, the first check is one poll after the
// eviction, so the next pass starts one second later at the earliest; with no
// PodCleanedUp, that first check succeeds.
func (m *Manager) waitForCleanup(ctx context.Context, pods []*v1.Pod) {
	timeout := time.NewTimer(m.cfg.PodCleanupTimeout)
	defer timeout.Stop()
	tick := time.NewTicker(DefaultPodCleanupPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout.C:
			m.log.Warn("Eviction manager: timed out waiting for pods to be cleaned up", "pods", len(pods))
			return
		case <-tick.C:
			done := true
			for _, p := range pods {
				done = done && (m.deps.PodCleanedUp == nil || m.deps.PodCleanedUp(p))
			}
			if done {
				return
			}
		}
	}
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

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }
