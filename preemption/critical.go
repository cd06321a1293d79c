package preemption

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// IsCritical reports whether pod may preempt others to be admitted: a static pod, a
// mirror pod, or a pod with priority >= qos.SystemCriticalPriority.
func IsCritical(pod *v1.Pod) bool {
	return pod != nil && qos.IsCritical(pod)
}

// Preemptable reports whether preemptor may preempt preemptee: when preemptor is
// critical and preemptee is not, or when both have a priority set and preemptor's is
// strictly higher. A pod without spec.priority never wins on priority. Both pods may
// be nil (a nil pod is neither critical nor has a priority).
func Preemptable(preemptor, preemptee *v1.Pod) bool {
	if IsCritical(preemptor) && !IsCritical(preemptee) {
		return true
	}
	if preemptor == nil || preemptee == nil || preemptor.Spec.Priority == nil || preemptee.Spec.Priority == nil {
		return false
	}
	return *preemptor.Spec.Priority > *preemptee.Spec.Priority
}
