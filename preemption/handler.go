package preemption

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// The status a preempted pod gets, as the kubelet sets it.
const (
	// Reason is the pod status reason (and event reason) of a preempted pod.
	Reason = "Preempting"
	// Message is the pod status message (and event message) of a preempted pod.
	Message = "Preempted in order to admit critical pod"
	// ConditionMessage is the message of the DisruptionTarget condition.
	ConditionMessage = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// PreemptedStatus returns the final status a preempted pod is given: phase Failed,
// reason Preempting, the kubelet's message, and a true DisruptionTarget condition
// with reason TerminationByKubelet. Each call returns a new value.
func PreemptedStatus() v1.PodStatus {
	return v1.PodStatus{
		Phase:      v1.PodFailed,
		Reason:     Reason,
		Message:    Message,
		Conditions: []v1.PodCondition{nodeapi.DisruptionTarget(ConditionMessage)},
	}
}

// Plan is preemption's decision for one pod: the pods to kill so that it fits. It
// is a plain value the Handler keeps no reference to; making it happen is the
// caller's job ([Executor] does it as the kubelet does). Its pods are the ones
// ActivePods returned, not copies: nobody may modify them through the Plan.
type Plan struct {
	// Preemptor is the pod being admitted.
	Preemptor *v1.Pod
	// Requirements are the amounts to free, one per insufficient resource, in the
	// order the admission failures were reported.
	Requirements Requirements
	// Victims are the kills to make, in the kubelet's kill order (BestEffort, then
	// Burstable, then Guaranteed victims; see SelectVictims). Each has
	// PreemptedStatus and no grace period override: the pod's own grace period.
	Victims []nodeapi.KillRequest
}

// Signal returns the value of the preemption_signal label of kubelet_preemptions
// for p's victims: the first insufficient resource, or "" when there is none.
func (p *Plan) Signal() string {
	if len(p.Requirements) == 0 {
		return ""
	}
	return string(p.Requirements[0].Resource)
}

// Handler decides how critical pods recover from resource admission failures: which
// other pods to preempt. It only plans; it never kills. It holds no state of its
// own, so concurrent calls are safe as far as ActivePods is, but the agent calls it
// only from its sync loop, which is what makes the active-pod list it sees current.
type Handler struct {
	activePods func() []*v1.Pod
}

// Deps are the outside things a Handler uses.
type Deps struct {
	// ActivePods returns the pods admitted and not yet terminated: the candidates.
	// The Handler does not modify the pods or the slice.
	ActivePods func() []*v1.Pod
}

// NewHandler returns a Handler. ActivePods is required.
func NewHandler(d Deps) (*Handler, error) {
	if d.ActivePods == nil {
		return nil, errors.New("preemption: nil ActivePods")
	}
	return &Handler{activePods: d.ActivePods}, nil
}

// HandleAdmissionFailure is called when pod failed admission for failures. It
// returns the failures that still stand and, when preempting other pods would make
// pod fit, the plan to do so:
//
//   - pod not critical: failures are returned unchanged, with no plan.
//   - some failure is not an *InsufficientResource: only those other failures are
//     returned, with no plan, because preempting would not make pod admissible.
//   - otherwise nil failures and the plan: the victims from SelectVictims for what
//     the failures say is missing, in the kubelet's kill order.
//
// err, wrapping ErrNoVictims, is returned when no set of pods frees the
// requirement. HandleAdmissionFailure kills nothing and modifies nothing.
func (h *Handler) HandleAdmissionFailure(pod *v1.Pod, failures []error) (remaining []error, plan *Plan, err error) {
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
	plan = &Plan{Preemptor: pod, Requirements: reqs, Victims: make([]nodeapi.KillRequest, len(selected))}
	for i, v := range selected {
		plan.Victims[i] = nodeapi.KillRequest{Pod: v, Status: PreemptedStatus()}
	}
	return nil, plan, nil
}
