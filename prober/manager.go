package prober

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// maxTries is how many times a probe run is tried when its mechanism
// returns an error (not when the target is unhealthy).
const maxTries = 3

// Defaults for Config.
const (
	DefaultConcurrency  = 256
	DefaultUpdateBuffer = 256
)

// PodStatusGetter gives the last status the agent generated for a pod. It is
// the subset of the kubelet's status provider that probes read: the phase,
// the pod IP and the container statuses (IDs, states, started/ready as
// UpdatePodStatus set them). Called concurrently from probe goroutines.
type PodStatusGetter interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// Event reasons, as the kubelet's.
const (
	ReasonUnhealthy    = "Unhealthy"
	ReasonProbeWarning = "ProbeWarning"
)

// Config tunes a Manager. The zero value is valid.
type Config struct {
	// Concurrency caps the probe runs in flight, which is also the most
	// pool goroutines there will be: they start as runs need them (a node
	// without probes has none) and stay. A run holds its slot for up to the
	// probe's timeout
	// (times three if the mechanism errors), so size it for
	// probe rate × timeout of targets that hang. Default DefaultConcurrency.
	Concurrency int
	// UpdateBuffer is the capacity of each Updates channel. Default
	// DefaultUpdateBuffer.
	UpdateBuffer int
	// ResetStatusOnRestart is the kubelet's
	// ChangeContainerStatusOnKubeletRestart: when true, containers that were
	// running before the Manager was created start again as not ready and
	// not started. When false (the default, as kubelet ≥ 1.35), they keep
	// the ready/started values their pod status reports.
	ResetStatusOnRestart bool
}

// Deps are the outside things a Manager uses.
type Deps struct {
	// Status is required.
	Status PodStatusGetter
	// Exec runs exec probes, typically NewExec(criRuntime). When nil, pods
	// with exec probes are refused at AddPod.
	Exec Runner
	// HTTP, TCP and GRPC default to NewHTTP(), NewTCP() and NewGRPC().
	HTTP, TCP, GRPC Runner
	// Logger receives the Manager's logs; nil discards them.
	Logger *slog.Logger
	// Recorder, when set, receives the container events the kubelet's
	// prober emits, through its Event method: Unhealthy (Warning) for a
	// failed or errored run and ProbeWarning (Warning) for a run that
	// succeeded with a remark, about the container's *v1.ObjectReference.
	// client-go's record.EventRecorder satisfies it, and its correlator folds
	// the repeats of a probe failing every period. It is called from the
	// probe goroutines and must not block.
	Recorder nodeapi.Recorder
	// Registerer, when set, gets prober_probe_total and
	// prober_probe_duration_seconds.
	Registerer prometheus.Registerer
	// Jitter returns the delay before a new probe's first run, in
	// [0, period). Nil draws it uniformly at random, which spreads the
	// probes of many pods added at once over their first period.
	Jitter func(period time.Duration) time.Duration
	// OnProbeStart, when set, is called from the pool goroutines with how
	// late each scheduled run started against its schedule. It must be
	// cheap and safe for concurrent use. For benchmarks and tracing.
	OnProbeStart func(lateness time.Duration)
}

type probeKey struct {
	podUID    types.UID
	container string
	probeType ProbeType
}

// probe is one probe of one container.
type probe struct {
	key       probeKey
	spec      *spec
	runner    Runner
	initCtr   bool // a restartable init container
	podName   string
	namespace string
	name      string              // nodeapi.PodName, for logs
	ref       *v1.ObjectReference // the container, for events
	metrics   probeMetrics

	// Guarded by Manager.mu.
	pod       *v1.Pod   // latest pod object given to AddPod
	due       time.Time // heap key: when to run next
	next      time.Time // the next slot of the regular schedule
	index     int       // position in Manager.queue, -1 when not queued
	triggered bool      // due was moved forward by a manual trigger
	stopping  bool      // stop requested; the next run finalizes
	deleting  bool      // stop comes from pod deletion: report Success first

	// Touched only by the goroutine running the probe; a probe is never run
	// by two goroutines at once (it is out of the queue while it runs).
	st     state
	req    *http.Request
	reqIP  string
	warned bool
}

// Manager runs the probes of the pods added to it and publishes their
// results. Its methods are safe for concurrent use. The agent's sync loop
// calls AddPod, StopLivenessAndStartup and RemovePod and drains Updates()
// (a forwarding goroutine per channel hands each update to the loop); the pod
// runtime calls UpdatePodStatus when it derives a pod's status and Unhealthy
// when it syncs a pod.
type Manager struct {
	cfg      Config
	status   PodStatusGetter
	runners  [4]Runner // by handlerKind
	logger   *slog.Logger
	recorder nodeapi.Recorder
	metrics  *metrics
	jitter   func(time.Duration) time.Duration
	onStart  func(time.Duration)
	started  time.Time
	results  [3]*Results // by ProbeType
	poke     chan struct{}
	runCalls sync.Once

	mu sync.Mutex
	// probes and queue are guarded by mu. queue holds the probes waiting for
	// their due time; a probe being run is in probes but not in queue.
	probes map[probeKey]*probe
	queue  probeQueue
}

// New returns a Manager. Deps.Status is required.
func New(cfg Config, d Deps) (*Manager, error) {
	if d.Status == nil {
		return nil, errors.New("prober: nil Status")
	}
	if cfg.Concurrency < 0 || cfg.UpdateBuffer < 0 {
		return nil, fmt.Errorf("prober: negative Concurrency (%d) or UpdateBuffer (%d)", cfg.Concurrency, cfg.UpdateBuffer)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.UpdateBuffer == 0 {
		cfg.UpdateBuffer = DefaultUpdateBuffer
	}
	met, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		cfg:      cfg,
		status:   d.Status,
		logger:   logger.With("subsystem", "prober"),
		recorder: d.Recorder,
		metrics:  met,
		jitter:   d.Jitter,
		onStart:  d.OnProbeStart,
		started:  time.Now(),
		poke:     make(chan struct{}, 1),
		probes:   make(map[probeKey]*probe),
	}
	if m.jitter == nil {
		m.jitter = defaultJitter
	}
	m.runners[handlerExec] = d.Exec
	m.runners[handlerHTTP] = orDefault(d.HTTP, func() Runner { return NewHTTP() })
	m.runners[handlerTCP] = orDefault(d.TCP, func() Runner { return NewTCP() })
	m.runners[handlerGRPC] = orDefault(d.GRPC, func() Runner { return NewGRPC() })
	for _, t := range probeTypes {
		m.results[t] = newResults(cfg.UpdateBuffer)
	}
	return m, nil
}

func orDefault(r Runner, def func() Runner) Runner {
	if r != nil {
		return r
	}
	return def()
}

// Results returns the results of probes of type t.
func (m *Manager) Results(t ProbeType) *Results { return m.results[t] }

// Len returns the number of probes the Manager holds, including stopped
// ones not yet finalized.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.probes)
}

// probeSpec returns the probe of type t a container configures.
func probeSpec(c *v1.Container, t ProbeType) *v1.Probe {
	switch t {
	case Startup:
		return c.StartupProbe
	case Readiness:
		return c.ReadinessProbe
	}
	return c.LivenessProbe
}

// AddPod starts the probes of pod's containers and restartable init
// containers that are not running yet; probes already running get the new
// pod object (for its deletion timestamp). A probe that is invalid (no or
// several handlers, a port name no container port has, negative values, an
// exec probe without an exec runner) is not started and is reported in the
// returned error, which wraps ErrInvalidProbe; the pod's other probes start
// regardless. Idempotent.
func (m *Manager) AddPod(pod *v1.Pod) error {
	var errs []error
	type candidate struct {
		key     probeKey
		spec    *spec
		initCtr bool
	}
	var cands []candidate
	add := func(c *v1.Container, initCtr bool) {
		for _, t := range probeTypes {
			p := probeSpec(c, t)
			if p == nil {
				continue
			}
			s, err := compileProbe(t, p, c)
			if err == nil && s.kind == handlerExec && m.runners[handlerExec] == nil {
				err = fmt.Errorf("%w: exec probe but no exec runner configured", ErrInvalidProbe)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %s/%s container %q %s probe: %w", pod.Namespace, pod.Name, c.Name, t, err))
				continue
			}
			cands = append(cands, candidate{probeKey{pod.UID, c.Name, t}, s, initCtr})
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; nodeapi.IsSidecar(c) {
			add(c, true)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], false)
	}

	now := time.Now()
	m.mu.Lock()
	for _, cd := range cands {
		if p, ok := m.probes[cd.key]; ok {
			p.pod = pod
			continue
		}
		p := &probe{
			key:       cd.key,
			spec:      cd.spec,
			runner:    m.runners[cd.spec.kind],
			initCtr:   cd.initCtr,
			podName:   pod.Name,
			namespace: pod.Namespace,
			name:      nodeapi.PodName(pod),
			ref:       containerRef(pod, cd.key.container, cd.initCtr),
			metrics:   m.metrics.forProbe(cd.key, pod.Name, pod.Namespace),
			pod:       pod,
			index:     -1,
		}
		p.due = now.Add(m.jitter(cd.spec.period))
		p.next = p.due
		m.probes[cd.key] = p
		m.pushLocked(p)
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

// StopLivenessAndStartup stops the liveness and startup probes of a pod that
// is being deleted gracefully: each reports Success (so the agent does not
// restart a container it is stopping) and stops. Readiness keeps probing
// until RemovePod.
func (m *Manager) StopLivenessAndStartup(pod *v1.Pod) {
	m.stopPod(pod, true, Liveness, Startup)
}

// RemovePod stops all probes of pod and drops their results.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.stopPod(pod, false, probeTypes[:]...)
}

func (m *Manager) stopPod(pod *v1.Pod, deleting bool, types ...ProbeType) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stop := func(c *v1.Container) {
		for _, t := range types {
			if p, ok := m.probes[probeKey{pod.UID, c.Name, t}]; ok {
				m.stopLocked(p, deleting)
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		stop(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		stop(&pod.Spec.Containers[i])
	}
}

// stopLocked marks p for stopping and queues it to run now: the run
// finalizes it (publishing Success first when deleting). A probe being run
// is finalized when its run ends.
func (m *Manager) stopLocked(p *probe, deleting bool) {
	if p.stopping {
		return
	}
	p.stopping, p.deleting = true, deleting
	if p.index >= 0 {
		p.due = time.Now()
		heap.Fix(&m.queue, p.index)
		m.pokeIfHeadLocked(p)
	}
}

// UpdatePodStatus sets Started and Ready of the container statuses in
// status from the probe results, as the kubelet does when it generates a
// pod status: a running container is started when its startup probe
// succeeded or it has none, and ready when started and its readiness probe
// succeeded or it has none. A started container that is not ready yet gets
// its readiness probe run at once. Non-restartable init containers are ready
// when they exited 0.
//
// The Started and Ready the statuses come with are what the pod showed last
// for the same container (Started nil: nothing shown). Unless
// ResetStatusOnRestart, a probe with no result yet keeps them, as the
// kubelet ≥ 1.35 (ChangeContainerStatusOnKubeletRestart off) keeps a
// container's status across its restart: a started container stays started
// until its startup probe says otherwise, and a container that ran from
// before the Manager's start (restartGracePeriod) stays ready until its
// readiness probe has a result. Such a container that shows nothing (a
// static pod, whose status the agent does not keep) reads started and ready,
// as the kubelet's first status after its restart has them: the probes
// decide once they have run.
func (m *Manager) UpdatePodStatus(pod *v1.Pod, status *v1.PodStatus) {
	for i := range status.ContainerStatuses {
		m.updateContainerStatus(pod.UID, &status.ContainerStatuses[i])
	}
	for i := range status.InitContainerStatuses {
		c := &status.InitContainerStatuses[i]
		restartable := false
		for j := range pod.Spec.InitContainers {
			if pod.Spec.InitContainers[j].Name == c.Name {
				restartable = nodeapi.IsSidecar(&pod.Spec.InitContainers[j])
			}
		}
		if restartable {
			m.updateContainerStatus(pod.UID, c)
			continue
		}
		started := c.State.Running != nil
		c.Started = &started
		c.Ready = c.State.Terminated != nil && c.State.Terminated.ExitCode == 0
	}
}

func (m *Manager) updateContainerStatus(uid types.UID, c *v1.ContainerStatus) {
	keep := !m.cfg.ResetStatusOnRestart
	shown, wasStarted, wasReady := c.Started != nil, c.Started != nil && *c.Started, c.Ready
	preExisting := keep && m.preExisting(c)
	started := false
	if c.State.Running != nil {
		if r, ok := m.results[Startup].Get(c.ContainerID); ok {
			started = r == Success
		} else {
			started = (keep && wasStarted) || !m.has(probeKey{uid, c.Name, Startup}) || (preExisting && !shown)
		}
	}
	c.Started = &started
	c.Ready = false
	if !started {
		return
	}
	r, haveReadiness := m.results[Readiness].Get(c.ContainerID)
	if haveReadiness && r == Success {
		c.Ready = true
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.probes[probeKey{uid, c.Name, Readiness}]
	if !ok {
		c.Ready = true // no readiness probe: ready once started
		return
	}
	if !haveReadiness && preExisting {
		c.Ready = wasReady || !shown
	}
	if p.index >= 0 && !p.stopping && !p.triggered {
		p.triggered = true
		p.due = time.Now()
		heap.Fix(&m.queue, p.index)
		m.pokeIfHeadLocked(p)
	}
}

// preExisting reports whether running container c started before the
// Manager did, by more than restartGracePeriod: it ran before the agent's
// restart.
func (m *Manager) preExisting(c *v1.ContainerStatus) bool {
	return c.State.Running != nil && !c.State.Running.StartedAt.IsZero() &&
		c.State.Running.StartedAt.Time.Before(m.started.Add(-restartGracePeriod))
}

func (m *Manager) has(k probeKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.probes[k]
	return ok
}

func (m *Manager) pushLocked(p *probe) {
	heap.Push(&m.queue, p)
	m.pokeIfHeadLocked(p)
}

// pokeIfHeadLocked wakes the scheduler when p became the earliest probe.
func (m *Manager) pokeIfHeadLocked(p *probe) {
	if p.index == 0 {
		select {
		case m.poke <- struct{}{}:
		default:
		}
	}
}

// Run schedules and runs the probes until ctx ends, then waits for the runs
// in flight to finish (each is bounded by its timeout) and returns nil. Call
// it once. Due times are read with time.Now and waited for with one
// time.Timer, created at the first wait and reset for the earliest due time.
func (m *Manager) Run(ctx context.Context) error {
	ran := false
	m.runCalls.Do(func() { ran = true })
	if !ran {
		return errors.New("prober: Run called twice")
	}
	work := make(chan *probe)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(work)
	workers := 0
	// dispatch hands p to an idle worker, or to a new one while there are
	// fewer than Concurrency, or waits for one to be free.
	dispatch := func(p *probe) bool {
		select {
		case work <- p:
			return true
		default:
		}
		if workers < m.cfg.Concurrency {
			workers++
			wg.Go(func() {
				m.runOnce(ctx, p)
				for p := range work {
					m.runOnce(ctx, p)
				}
			})
			return true
		}
		select {
		case work <- p:
			return true
		case <-ctx.Done():
			return false
		}
	}

	var timer *time.Timer // created at the first wait for a due time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var batch []*probe
	for {
		batch = batch[:0]
		m.mu.Lock()
		now := time.Now()
		for m.queue.Len() > 0 && !m.queue[0].due.After(now) {
			batch = append(batch, heap.Pop(&m.queue).(*probe))
		}
		wait := time.Duration(-1)
		if m.queue.Len() > 0 {
			wait = m.queue[0].due.Sub(now)
		}
		m.mu.Unlock()

		for _, p := range batch {
			if !dispatch(p) {
				return nil
			}
		}
		if len(batch) > 0 {
			continue // time has passed while dispatching: look again
		}
		var tc <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tc:
		case <-m.poke:
		}
	}
}

// runOnce does one tick of p: decide, maybe probe, publish, requeue.
func (m *Manager) runOnce(ctx context.Context, p *probe) {
	m.mu.Lock()
	pod, stopping, deleting := p.pod, p.stopping, p.deleting
	scheduled, triggered := p.due, p.triggered
	p.triggered = false
	m.mu.Unlock()
	if stopping {
		m.finalize(ctx, p, deleting)
		return
	}
	start := time.Now()
	if m.onStart != nil && !triggered {
		m.onStart(start.Sub(scheduled))
	}

	status, haveStatus := m.status.GetPodStatus(p.key.podUID)
	in := tickInput{
		Now:                 start,
		AgentStart:          m.started,
		KeepStatusOnRestart: !m.cfg.ResetStatusOnRestart,
		Deleting:            pod.DeletionTimestamp != nil,
		Phase:               status.Phase,
		HaveStatus:          haveStatus,
		RestartPolicy:       pod.Spec.RestartPolicy,
	}
	in.Container = findContainerStatus(&status, p.key.container, p.initCtr)
	in.Spec = findContainerSpec(pod, p.key.container, p.initCtr)
	if p.initCtr {
		in.Role = nodeapi.InitContainer
	}
	if in.Container != nil && in.Container.ContainerID != "" && p.key.probeType != Startup {
		r, _ := m.results[Startup].Get(in.Container.ContainerID)
		in.StartupSucceeded = r == Success
	}
	st, t := decideTick(p.key.probeType, p.spec.initialDelay, p.st, in)
	if t.Remove != "" {
		m.results[p.key.probeType].remove(t.Remove)
	}
	for _, r := range t.Set {
		m.publish(ctx, p, st.ContainerID, r)
	}
	if t.Probe {
		if r, ok := m.probeWithRetries(ctx, p, &status, in.Container.ContainerID); ok {
			var out Result
			var report bool
			st, out, report = observe(p.key.probeType, p.spec.th, st, r)
			if report {
				m.publish(ctx, p, st.ContainerID, out)
			}
		}
	}
	p.st = st
	if t.Stop {
		m.finalize(ctx, p, false)
		return
	}

	m.mu.Lock()
	if p.stopping {
		deleting := p.deleting
		m.mu.Unlock()
		m.finalize(ctx, p, deleting)
		return
	}
	now := time.Now()
	if !p.next.After(now) {
		period := p.spec.period
		p.next = p.next.Add((now.Sub(p.next)/period + 1) * period)
	}
	p.due = p.next
	m.pushLocked(p)
	m.mu.Unlock()
}

// finalize drops a stopped probe: its result (after a last Success when
// the pod is being deleted), its metrics and its entry.
func (m *Manager) finalize(ctx context.Context, p *probe, deleting bool) {
	if deleting && p.key.probeType != Readiness && p.st.ContainerID != "" {
		m.publish(ctx, p, p.st.ContainerID, Success)
	}
	m.results[p.key.probeType].remove(p.st.ContainerID)
	m.metrics.deleteProbe(p.key, p.podName, p.namespace)
	m.mu.Lock()
	if m.probes[p.key] == p {
		delete(m.probes, p.key)
	}
	m.mu.Unlock()
}

func (m *Manager) publish(ctx context.Context, p *probe, containerID string, r Result) {
	u := Update{
		ContainerID:   containerID,
		Result:        r,
		PodUID:        p.key.podUID,
		ContainerName: p.key.container,
		ProbeType:     p.key.probeType,
	}
	if m.results[p.key.probeType].set(ctx, u) {
		m.logger.Info("Probe result changed", "probeType", p.key.probeType, "pod", p.name,
			"podUID", p.key.podUID, "containerName", p.key.container, "containerID", containerID, "result", r)
	}
}

// probeWithRetries runs p's mechanism, retrying errors, and counts the run.
// ok is false when the run produced no result (all tries errored, or the
// target could not be built).
func (m *Manager) probeWithRetries(ctx context.Context, p *probe, status *v1.PodStatus, containerID string) (r Result, ok bool) {
	t, err := m.target(p, status, containerID)
	if err != nil {
		p.metrics.unknown.Inc()
		m.logger.Debug("Probe target not ready", "probeType", p.key.probeType, "pod", p.name,
			"containerName", p.key.container, "err", err)
		return Unknown, false
	}
	start := time.Now()
	var out Outcome
	var msg string
	for range maxTries {
		// The probe's timeout bounds network I/O and the runtime's exec: a
		// context deadline.
		rctx, cancel := context.WithTimeout(ctx, p.spec.timeout)
		out, msg, err = p.runner.Probe(rctx, t)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		// The Manager is stopping: whatever the run saw, it says nothing
		// about the container.
		return Unknown, false
	}
	p.metrics.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		p.metrics.unknown.Inc()
		m.logger.Warn("Probe errored", "probeType", p.key.probeType, "pod", p.name,
			"containerName", p.key.container, "err", err)
		m.event(p, ReasonUnhealthy, fmt.Sprintf("%s probe errored and resulted in unknown state: %v", p.key.probeType, err))
		return Unknown, false
	}
	switch out {
	case OutcomeSuccess:
		p.metrics.successful.Inc()
	case OutcomeWarning:
		p.metrics.successful.Inc()
		if !p.warned {
			p.warned = true
			m.logger.Warn("Probe warning", "probeType", p.key.probeType, "pod", p.name,
				"containerName", p.key.container, "output", msg)
		}
		m.event(p, ReasonProbeWarning, fmt.Sprintf("%s probe warning: %s", p.key.probeType, msg))
	default:
		p.metrics.failed.Inc()
		m.logger.Debug("Probe failed", "probeType", p.key.probeType, "pod", p.name,
			"containerName", p.key.container, "output", msg)
		m.event(p, ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", p.key.probeType, msg))
	}
	return out.result(), true
}

// event records a Warning event about p's container, when a Recorder is set.
func (m *Manager) event(p *probe, reason, message string) {
	if m.recorder != nil {
		m.recorder.Event(p.ref, v1.EventTypeWarning, reason, message)
	}
}

// containerRef is the reference the kubelet's events name a container by.
func containerRef(pod *v1.Pod, container string, initCtr bool) *v1.ObjectReference {
	field := "spec.containers{" + container + "}"
	if initCtr {
		field = "spec.initContainers{" + container + "}"
	}
	return &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1",
		Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		FieldPath: field,
	}
}

// target resolves the run's target from the probe and the pod's status.
func (m *Manager) target(p *probe, status *v1.PodStatus, containerID string) (Target, error) {
	s := p.spec
	t := Target{ContainerID: containerID, Timeout: s.timeout}
	switch s.kind {
	case handlerExec:
		t.Command = s.command
	case handlerHTTP:
		if p.req == nil || p.reqIP != status.PodIP {
			req, err := newHTTPRequest(&s.http, status.PodIP, UserAgent)
			if err != nil {
				return t, err
			}
			p.req, p.reqIP = req, status.PodIP
		}
		t.Request = p.req
	case handlerTCP, handlerGRPC:
		t.Host, t.Port, t.Service = s.host, s.port, s.service
		if t.Host == "" {
			t.Host = status.PodIP
		}
		if t.Host == "" {
			return t, errors.New("pod has no IP yet")
		}
	}
	return t, nil
}

// findContainerStatus returns the status of the named container, or nil.
// findContainerSpec returns the spec of pod's container name, an init
// container when initCtr; nil when the pod has none of that name.
func findContainerSpec(pod *v1.Pod, name string, initCtr bool) *v1.Container {
	list := pod.Spec.Containers
	if initCtr {
		list = pod.Spec.InitContainers
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func findContainerStatus(s *v1.PodStatus, name string, initCtr bool) *v1.ContainerStatus {
	list := s.ContainerStatuses
	if initCtr {
		list = s.InitContainerStatuses
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// probeQueue is a min-heap of probes by due time.
type probeQueue []*probe

func (q probeQueue) Len() int           { return len(q) }
func (q probeQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q probeQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *probeQueue) Push(x any) {
	p := x.(*probe)
	p.index = len(*q)
	*q = append(*q, p)
}
func (q *probeQueue) Pop() any {
	old := *q
	n := len(old)
	p := old[n-1]
	old[n-1] = nil
	p.index = -1
	*q = old[:n-1]
	return p
}

// defaultJitter draws the first run's delay uniformly in [0, period).
func defaultJitter(period time.Duration) time.Duration { return rand.N(period) }
