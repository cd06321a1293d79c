package preemption

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/metrics"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Executor carries out preemption plans as the kubelet does: it kills the victims
// one by one, synchronously, recording an event and a log line before each kill
// and counting each one killed. The agent's composition root owns it, with the
// node's PodKiller; admission only plans. An Executor holds no state besides its
// collaborators: it is safe for concurrent use as far as they are. The agent
// runs each plan on a goroutine of its own, never on its sync loop, right
// after admitting the preemptor (agent.Preemptor).
type Executor struct {
	killer      nodeapi.PodKiller
	recorder    nodeapi.Recorder // nil: no events
	logger      *slog.Logger
	preemptions *prometheus.CounterVec
}

// ExecutorDeps are the outside things an Executor uses.
type ExecutorDeps struct {
	// Killer stops victims. Required.
	Killer nodeapi.PodKiller
	// Recorder, when set, gets the kubelet's Warning event "Preempting" about each
	// victim before it is killed.
	Recorder nodeapi.Recorder
	// Logger receives the executor's logs; nil discards them.
	Logger *slog.Logger
	// Registerer, when set, gets the kubelet's counter kubelet_preemptions
	// {preemption_signal}: one per victim killed, labelled with Plan.Signal.
	// Executors sharing a Registerer share the counter.
	Registerer prometheus.Registerer
}

// NewExecutor returns an Executor. Killer is required.
func NewExecutor(d ExecutorDeps) (*Executor, error) {
	if d.Killer == nil {
		return nil, errors.New("preemption: nil Killer")
	}
	reg := metrics.NewRegistrar(d.Registerer, "preemption")
	preemptions := reg.CounterVec(prometheus.CounterOpts{
		Subsystem: "kubelet",
		Name:      "preemptions",
		Help:      "Cumulative number of pod preemptions by preemption resource",
	}, "preemption_signal")
	if err := reg.Err(); err != nil {
		return nil, err
	}
	e := &Executor{killer: d.Killer, recorder: d.Recorder, logger: slog.New(slog.DiscardHandler), preemptions: preemptions}
	if d.Logger != nil {
		e.logger = d.Logger.With("subsystem", "preemption")
	}
	return e, nil
}

// Execute kills plan's victims in order and returns the pods killed, in that
// order. Before each kill it records the Warning event "Preempting" about the
// victim and logs "Preempting pod to free up resources" (keys pod, podUID,
// insufficientResources, requestingPod); after each successful kill it counts one
// preemption labelled with plan.Signal(). As in the kubelet, a victim whose kill
// fails is logged ("Failed to evict pod"), not counted and skipped (its pod worker
// retries the kill), and the rest go ahead: the preemptor is admitted anyway. Each
// KillPod call returns once that victim has stopped.
//
// err is non-nil only when ctx ends between kills; the victims not yet killed are
// then left alone. A nil plan kills nothing.
func (e *Executor) Execute(ctx context.Context, plan *Plan) (killed []*v1.Pod, err error) {
	if plan == nil {
		return nil, nil
	}
	for _, req := range plan.Victims {
		if err := ctx.Err(); err != nil {
			return killed, fmt.Errorf("preemption: %w", err)
		}
		v := req.Pod
		if e.recorder != nil {
			e.recorder.Event(v, v1.EventTypeWarning, Reason, Message)
		}
		e.logger.InfoContext(ctx, "Preempting pod to free up resources", "pod", nodeapi.PodName(v), "podUID", v.UID,
			"insufficientResources", plan.Requirements.String(), "requestingPod", nodeapi.PodName(plan.Preemptor))
		if err := e.killer.KillPod(ctx, req); err != nil {
			e.logger.ErrorContext(ctx, "Failed to evict pod", "pod", nodeapi.PodName(v), "err", err)
			continue
		}
		e.preemptions.WithLabelValues(plan.Signal()).Inc()
		killed = append(killed, v)
	}
	return killed, nil
}
