package containergc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/periodic"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// DefaultPeriod is the kubelet's container GC period.
const DefaultPeriod = time.Minute

// EventContainerGCFailed is the event reason of a failed GC pass.
const EventContainerGCFailed = "ContainerGCFailed"

// Runtime is the part of CRI's RuntimeService the Collector uses; internal/machine/cri's
// Client and cri-api's FakeRuntimeService satisfy it. Removals are idempotent.
type Runtime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	// StopContainer is called, with timeout 0, only for containers in unknown state.
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
}

// Deps are the Collector's collaborators.
type Deps struct {
	Runtime Runtime  // required
	Pods    PodState // nil: no pod counts as deleted or terminated
	// Recorder receives ContainerGCFailed, a node-level event about the Node
	// NodeName. Nil discards it.
	Recorder nodeapi.Recorder
	// NodeName names the node the events are about.
	NodeName string
	Logger   *slog.Logger // nil: discard
	// LogDirs, when set, are cleaned after each pass as the kubelet does:
	// the log directories of deleted pods and dangling log symlinks.
	LogDirs LogDirs
}

// Collector removes dead containers and sandboxes. Its methods may be called
// from any goroutine; passes are serialized.
type Collector struct {
	policy Policy
	period time.Duration
	deps   Deps
	log    *slog.Logger
	pass   periodic.Serial // held by the running pass
}

// New validates the policy. period 0 means DefaultPeriod.
func New(p Policy, period time.Duration, deps Deps) (*Collector, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if deps.Runtime == nil {
		return nil, errors.New("containergc: Deps.Runtime is required")
	}
	if period <= 0 {
		period = DefaultPeriod
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{policy: p, period: period, deps: deps, log: log.With("subsystem", "containergc"), pass: periodic.NewSerial()}, nil
}

// Run collects at once and then every period until ctx ends; then it returns
// nil: Step on real time (periodic.Loop). Call Run once.
func (c *Collector) Run(ctx context.Context) error {
	return periodic.Loop(ctx, c.Step, nil)
}

// Step is one pass of Run at now and returns when the next is due, now plus
// the period. A failed pass is logged, emits ContainerGCFailed and is retried
// at the next. It may be called from any goroutine (passes are serialized);
// nodekeeper simulate calls it on virtual time.
func (c *Collector) Step(ctx context.Context, now time.Time) time.Time {
	if err := c.GarbageCollect(ctx, false, now); err != nil && ctx.Err() == nil {
		c.log.Error("container garbage collection failed", "err", err)
		if c.deps.Recorder != nil {
			c.deps.Recorder.Event(nodeapi.NodeRef(c.deps.NodeName), v1.EventTypeWarning, EventContainerGCFailed, err.Error())
		}
	}
	return now.Add(c.period)
}

// DeleteAllUnusedContainers is eviction's reclaim step at now: a pass that
// also removes the dead containers and sandboxes of terminated pods.
func (c *Collector) DeleteAllUnusedContainers(ctx context.Context, now time.Time) error {
	return c.GarbageCollect(ctx, true, now)
}

// GarbageCollect runs one pass, with now as the time the containers' ages
// count to. Removal errors do not stop it; they are returned together.
func (c *Collector) GarbageCollect(ctx context.Context, evictNonDeleted bool, now time.Time) error {
	if err := c.pass.Lock(ctx); err != nil {
		return err
	}
	defer c.pass.Unlock()
	rt := c.deps.Runtime
	sandboxes, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	containers, err := rt.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, r := range PlanContainers(containers, sandboxes, c.policy, c.deps.Pods, evictNonDeleted, now) {
		c.log.Info("removing dead container", "containerID", r.ID, "podUID", r.PodUID, "containerName", r.Name, "reason", r.Why)
		if r.Unknown {
			if err := rt.StopContainer(ctx, r.ID, 0); err != nil {
				errs = append(errs, fmt.Errorf("stop container %q in unknown state: %w", r.ID, err))
				continue
			}
		}
		if err := rt.RemoveContainer(ctx, r.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove container %q: %w", r.ID, err))
		}
	}
	containers, err = rt.ListContainers(ctx, nil)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list containers: %w", err))...)
	}
	for _, r := range PlanSandboxes(sandboxes, containers, c.deps.Pods, evictNonDeleted) {
		c.log.Info("removing sandbox", "podSandboxID", r.ID, "podUID", r.PodUID, "reason", r.Why)
		if err := rt.RemovePodSandbox(ctx, r.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %q: %w", r.ID, err))
		}
	}
	if err := c.removeLogs(containers); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
