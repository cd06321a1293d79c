// Package agent is the node agent's sync loop: the one goroutine that owns the
// pod table. Pod sources hand it their complete pod sets (SetPods); it admits
// new pods in creation order (a pod that asks for devices finishes its
// admission off the loop, so no other pod waits on a device plugin), runs each
// admitted pod through the pod runtime
// (one operation of a pod at a time, each on a goroutine that ends with it),
// relists the runtime every second to notice what changed, kills and removes
// pods their sources dropped, kills pods on request (nodeapi.PodKiller:
// eviction and preemption), tears down the volumes of pods that stopped for
// good (as the kubelet's volume manager does, before the pod is deleted), and
// removes the runtime's pods that no source wants (orphans) once every source
// has spoken.
//
// A pod's lifecycle is one pure function, step (lifecycle.go, with its state
// diagram): the loop turns each message into an event for the pods it
// concerns and runs the work step asks for.
//
// The pod table (Table) is a value of its own, built before the loop: the
// readers (admission, eviction, container GC, the HTTP server) are built over
// it, and the loop (Agent) after them, with them as its hooks. Readers see the
// table through a snapshot published after every change with an atomic
// pointer: every read method is safe from any goroutine and never waits for
// the loop.
//
// Stopping the loop (its context ending) stops the workers and leaves the pods
// running: the next start adopts them, since SyncPod leaves containers whose
// spec has not changed alone.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
)

// Runtime is the part of *podruntime.Manager the agent uses. Calls for one pod
// come from that pod's worker, one at a time; Statuses comes from a relist
// goroutine of its own; StatusNode only from the sync loop.
type Runtime interface {
	// Statuses lists every pod the runtime holds, keyed by UID.
	Statuses(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error)
	// SyncPod makes the runtime run pod as its spec asks, given the pod's
	// status from a relist that started after the pod's previous call ended
	// and the State its previous SyncPod returned (the zero value for the
	// first), which the loop keeps in the pod's entry.
	SyncPod(ctx context.Context, pod *v1.Pod, status *podruntime.PodStatus, prev podruntime.SyncState) podruntime.Result
	// KillPod stops the pod's containers and sandbox within gracePeriod (nil:
	// the pod's own). pod is nil for an orphan.
	KillPod(ctx context.Context, pod *v1.Pod, status *podruntime.PodStatus, gracePeriod *int64) error
	// RemovePod removes the stopped pod's containers and sandboxes.
	RemovePod(ctx context.Context, status *podruntime.PodStatus) error
	// TearDownVolumes unmounts and removes the volumes of a pod that has
	// stopped for good; RemovePod removes them too.
	TearDownVolumes(uid types.UID) error
	// StatusNode is what of the node, the runtime and the prober every
	// pod's status shows (podstatus.Derive's Input.Node).
	StatusNode() podstatus.Node
}

// Admitter decides whether a new pod may run. *admission.Chain satisfies it.
// Start is called only from the sync loop, one pod at a time, in creation
// order; the pods admitted before, and those whose admission is pending, are
// in ActivePods by then. A Response with Pending set (the pod asks for
// devices, whose plugins may be slow) is finished off the loop: the loop runs
// Pending.Wait on a goroutine of its own and Pending.Resume back on the loop,
// and admits other pods meanwhile.
type Admitter interface {
	Start(ctx context.Context, pod *v1.Pod) admission.Response
}

// Preemptor carries out a preemption plan: it kills the victims in order,
// each through the agent's KillPod, and returns once they stopped.
// *preemption.Executor satisfies it (with the table as its Killer). It is
// called from a goroutine of its own, never from the sync loop.
type Preemptor interface {
	Execute(ctx context.Context, plan *preemption.Plan) ([]*v1.Pod, error)
}

// Devices is the part of *devicemanager.Manager the loop reads for the pod
// status's allocatedResourcesStatus. AllocatedResourcesStatus is called from
// the loop for each pod whose status it derives; HealthChanges (called once,
// when the loop starts) delivers the UIDs of the pods holding a device whose
// health changed, whose statuses the loop then derives again at once.
type Devices interface {
	AllocatedResourcesStatus(podUID string) map[string][]v1.ResourceStatus
	HealthChanges() <-chan []string
}

// Config is the agent's settings.
type Config struct {
	// NodeName names the node in logs.
	NodeName string
	// RelistPeriod is how often the runtime is listed; 0 is one second.
	RelistPeriod time.Duration
	// ResyncPeriod is how often every running pod is synced even when
	// nothing changed (the kubelet's syncFrequency); 0 is one minute.
	ResyncPeriod time.Duration
	// MaxSyncBackoff caps the retry delay after a failing SyncPod, KillPod or
	// RemovePod, which starts at one second and doubles; 0 is ten seconds.
	MaxSyncBackoff time.Duration
}

// Deps are the agent's collaborators.
type Deps struct {
	// Table is the pod table the loop owns (NewTable), built before the
	// collaborators that read it. Required; one Agent per table.
	Table *Table
	// Runtime runs the pods. Required.
	Runtime Runtime
	// Admit decides whether new pods may run. Required.
	Admit Admitter
	// Preempt, when set, carries out admission's preemption plans; nil makes
	// the agent kill the victims itself, in order, through KillPod.
	Preempt Preemptor
	// Logger receives the loop's logs; nil discards them.
	Logger *slog.Logger
	// Recorder receives pod events (admission rejections); nil discards them.
	Recorder nodeapi.Recorder
	// Registerer, when set, gets the agent's metrics.
	Registerer prometheus.Registerer
	// Probes, when set, is told of pods as they start and stop, and its
	// results are drained by the loop (see Prober).
	Probes Prober
	// Devices, when set, gives the health of the pods' device-plugin
	// devices (see Devices); nil shows none.
	Devices Devices
}

// Default periods.
const (
	DefaultRelistPeriod   = time.Second
	DefaultResyncPeriod   = time.Minute
	DefaultMaxSyncBackoff = 10 * time.Second
	initialSyncBackoff    = time.Second
	// RelistThreshold is how long without a successful relist makes the
	// agent unhealthy (the kubelet's PLEG health threshold).
	RelistThreshold = 3 * time.Minute
)

// ErrUnknownSource is returned by SetPods for a source not among the table's
// sources (NewTable).
var ErrUnknownSource = errors.New("agent: unknown pod source")

// Agent is the sync loop over its pod table, whose methods it has too. Its
// exported methods may be called from any goroutine. The loop runs in Run;
// SetPods and KillPod wait for it.
type Agent struct {
	*Table
	cfg     Config
	rt      Runtime
	admit   Admitter
	preempt Preemptor
	log     *slog.Logger
	rec     nodeapi.Recorder
	m       *agentMetrics
	probes  Prober
	devices Devices
	// derive is podstatus.Derive (tests settle a fake runtime's view
	// instead).
	derive func(podstatus.Input, time.Time) (v1.PodStatus, bool)

	running atomic.Bool
	// lastRelist is when the last successful relist came in (UnixNano; 0:
	// none yet). Only the loop stores it.
	lastRelist atomic.Int64
}

// New returns the sync loop over deps.Table; it starts nothing.
func New(cfg Config, deps Deps) (*Agent, error) {
	if deps.Table == nil || deps.Runtime == nil || deps.Admit == nil {
		return nil, errors.New("agent: Table, Runtime and Admit are required")
	}
	for name, d := range map[string]time.Duration{"RelistPeriod": cfg.RelistPeriod, "ResyncPeriod": cfg.ResyncPeriod, "MaxSyncBackoff": cfg.MaxSyncBackoff} {
		if d < 0 {
			return nil, fmt.Errorf("agent: %s %v is negative", name, d)
		}
	}
	if cfg.RelistPeriod == 0 {
		cfg.RelistPeriod = DefaultRelistPeriod
	}
	if cfg.ResyncPeriod == 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.MaxSyncBackoff == 0 {
		cfg.MaxSyncBackoff = DefaultMaxSyncBackoff
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeName != "" {
		deps.Logger = deps.Logger.With("node", cfg.NodeName)
	}
	if deps.Recorder == nil {
		deps.Recorder = nodeapi.LogRecorder{}
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	if !deps.Table.owned.CompareAndSwap(false, true) {
		return nil, errors.New("agent: the table has a sync loop already")
	}
	return &Agent{
		Table: deps.Table, cfg: cfg, rt: deps.Runtime, admit: deps.Admit, preempt: deps.Preempt,
		log: deps.Logger.With("subsystem", "agent"), rec: deps.Recorder, m: m,
		probes: deps.Probes, devices: deps.Devices, derive: podstatus.Derive,
	}, nil
}

// Healthy returns nil while the runtime was listed successfully within
// RelistThreshold, else an error saying for how long it was not (for
// /healthz). It is an error too before the first successful relist.
func (a *Agent) Healthy() error {
	last := a.lastRelist.Load()
	if last == 0 {
		return errors.New("agent: the runtime has not been listed yet")
	}
	if since := time.Since(time.Unix(0, last)); since > RelistThreshold {
		return fmt.Errorf("agent: the runtime was last listed %v ago (threshold %v)", since.Round(time.Second), RelistThreshold)
	}
	return nil
}

var _ nodeapi.PodKiller = (*Table)(nil)

// The agent's collaborators as the composition root wires them.
var (
	_ Runtime   = (*podruntime.Manager)(nil)
	_ Admitter  = (*admission.Chain)(nil)
	_ Preemptor = (*preemption.Executor)(nil)
)
