package nodeapi

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
)

// KillRequest asks for one pod to be stopped and its final status recorded.
type KillRequest struct {
	// Pod is the pod to stop. The killer must not modify it.
	Pod *v1.Pod
	// Status is the final status to record: Phase, Reason and Message replace the
	// pod's, and Conditions are merged by type into its current conditions (an
	// eviction or a preemption sets a true DisruptionTarget condition).
	Status v1.PodStatus
	// GracePeriodOverride, when set, is the grace period in seconds given to the
	// pod's containers instead of the pod's own terminationGracePeriodSeconds.
	GracePeriodOverride *int64
}

// GracePeriod returns the grace period the pod's containers get: the override
// when set, else the pod's terminationGracePeriodSeconds, else the API default
// of 30 seconds. A negative value counts as zero.
func (r KillRequest) GracePeriod() time.Duration {
	s := int64(v1.DefaultTerminationGracePeriodSeconds)
	switch {
	case r.GracePeriodOverride != nil:
		s = *r.GracePeriodOverride
	case r.Pod != nil && r.Pod.Spec.TerminationGracePeriodSeconds != nil:
		s = *r.Pod.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(max(s, 0)) * time.Second
}

// PodKiller stops pods. The agent's pod workers implement it; eviction and
// preemption use it.
type PodKiller interface {
	// KillPod stops req.Pod, giving its containers req.GracePeriod(), records
	// req.Status as the pod's final status, and returns once the pod's containers
	// have stopped or ctx has ended. Killing a pod that is already stopped
	// succeeds. It may be called from any goroutine, for different pods at once.
	KillPod(ctx context.Context, req KillRequest) error
}

// PodKillerFunc adapts a function to PodKiller.
type PodKillerFunc func(ctx context.Context, req KillRequest) error

// KillPod calls f.
func (f PodKillerFunc) KillPod(ctx context.Context, req KillRequest) error { return f(ctx, req) }

// DisruptionTarget returns the true DisruptionTarget condition the kubelet sets
// on a pod it terminates (reason TerminationByKubelet) with message.
func DisruptionTarget(message string) v1.PodCondition {
	return v1.PodCondition{
		Type:    v1.DisruptionTarget,
		Status:  v1.ConditionTrue,
		Reason:  v1.PodReasonTerminationByKubelet,
		Message: message,
	}
}
