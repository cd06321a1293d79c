package preemption

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/metrics"
)

// The status a preempted pod gets, as the kubelet sets it.
const (
	// Reason is the pod status reason (and event reason) of a preempted pod.
	Reason = "Preempting"
	// Message is the pod status message of a preempted pod.
	Message = "Preempted in order to admit critical pod"
	// ConditionMessage is the message of the DisruptionTarget condition.
	ConditionMessage = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// PodKiller stops pods. It is declared here, by its consumer; the agent's pod workers
// implement it.
type PodKiller interface {
	// KillPod stops pod and returns once all its containers have stopped, giving
	// them the pod's own termination grace period when gracePeriodOverride is nil.
	// The killer records status as the pod's final status: it sets Phase, Reason and
	// Message and merges Conditions by type into the pod's current conditions.
	// KillPod is called from the admitting goroutine, one pod at a time; it must
	// return when ctx ends. Killing a pod that is already stopped succeeds.
	KillPod(ctx context.Context, pod *v1.Pod, status v1.PodStatus, gracePeriodOverride *int64) error
}

// PreemptedStatus returns the status KillPod is asked to record for a preempted pod:
// phase Failed, reason Preempting, the kubelet's message, and a true DisruptionTarget
// condition with reason TerminationByKubelet.
func PreemptedStatus() v1.PodStatus {
	return v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  Reason,
		Message: Message,
		Conditions: []v1.PodCondition{{
			Type:    v1.DisruptionTarget,
			Status:  v1.ConditionTrue,
			Reason:  v1.PodReasonTerminationByKubelet,
			Message: ConditionMessage,
		}},
	}
}

// Handler recovers critical pods from resource admission failures by preempting
// other pods. It holds no state of its own: concurrent calls are safe as far as
// ActivePods and the PodKiller are, but the agent calls it only from its sync loop,
// which is what makes the active-pod list it sees current.
type Handler struct {
	activePods  func() []*v1.Pod
	killer      PodKiller
	logger      *slog.Logger
	preemptions *prometheus.CounterVec // nil without a Registerer
}

// Deps are the outside things a Handler uses.
type Deps struct {
	// ActivePods returns the pods admitted and not yet terminated: the candidates.
	ActivePods func() []*v1.Pod
	// Killer stops victims.
	Killer PodKiller
	// Logger receives the handler's logs; nil discards them.
	Logger *slog.Logger
	// Registerer, when set, gets the kubelet's counter kubelet_preemptions
	// {preemption_signal}: one per victim killed, labelled with the first
	// insufficient resource. Handlers sharing a Registerer share the counter.
	Registerer prometheus.Registerer
}

// NewHandler returns a Handler. ActivePods and Killer are required.
func NewHandler(d Deps) (*Handler, error) {
	if d.ActivePods == nil {
		return nil, errors.New("preemption: nil ActivePods")
	}
	if d.Killer == nil {
		return nil, errors.New("preemption: nil Killer")
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{activePods: d.ActivePods, killer: d.Killer, logger: logger.With("subsystem", "preemption")}
	if d.Registerer != nil {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "preemptions",
			Help:      "Cumulative number of pod preemptions by preemption resource",
		}, []string{"preemption_signal"})
		c, err := metrics.Register(d.Registerer, "preemption", c)
		if err != nil {
			return nil, err
		}
		h.preemptions = c
	}
	return h, nil
}

// HandleAdmissionFailure is called when pod failed admission for failures. It
// returns the failures that still stand (nil when pod may now be admitted) and the
// pods it killed, in the order killed.
//
//   - pod not critical: failures are returned unchanged; nothing is killed.
//   - some failure is not an *InsufficientResource: only those other failures are
//     returned; nothing is killed, because preempting would not make pod admissible.
//   - otherwise the victims from SelectVictims are killed one by one, synchronously,
//     with PreemptedStatus and their own grace period, and nil failures are returned.
//     As in the kubelet, a victim whose kill fails is logged and skipped (its pod
//     worker retries the kill), and the pod is admitted anyway; it is not among the
//     returned victims.
//
// err is non-nil when no set of pods frees the requirement (it wraps ErrNoVictims
// and nothing is killed) or when ctx ends between kills.
func (h *Handler) HandleAdmissionFailure(ctx context.Context, pod *v1.Pod, failures []error) (remaining []error, victims []*v1.Pod, err error) {
	if !IsCritical(pod) {
		return failures, nil, nil
	}
	var other []error
	var reqs Requirements
	for _, f := range failures {
		var ir *InsufficientResource
		if errors.As(f, &ir) {
			reqs = append(reqs, Requirement{Resource: ir.ResourceName, Quantity: ir.Insufficient()})
		} else {
			other = append(other, f)
		}
	}
	if len(other) > 0 {
		return other, nil, nil
	}
	selected, err := SelectVictims(pod, h.activePods(), reqs)
	if err != nil {
		return nil, nil, fmt.Errorf("preemption: error finding a set of pods to preempt: %w", err)
	}
	for _, v := range selected {
		if err := ctx.Err(); err != nil {
			return nil, victims, fmt.Errorf("preemption: %w", err)
		}
		h.logger.InfoContext(ctx, "Preempting pod to free up resources",
			"pod", klogName(v), "podUID", v.UID, "insufficientResources", reqs.String(), "requestingPod", klogName(pod))
		if err := h.killer.KillPod(ctx, v, PreemptedStatus(), nil); err != nil {
			h.logger.ErrorContext(ctx, "Failed to evict pod", "pod", klogName(v), "err", err)
			continue
		}
		victims = append(victims, v)
		if h.preemptions != nil {
			h.preemptions.WithLabelValues(string(reqs[0].Resource)).Inc()
		}
	}
	return nil, victims, nil
}

// klogName renders a pod as the kubelet's logs do: namespace/name.
func klogName(p *v1.Pod) string {
	if p.Namespace == "" {
		return p.Name
	}
	return p.Namespace + "/" + p.Name
}
