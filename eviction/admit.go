package eviction

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekeeper/nodekeeper/qos"
)

// AdmitResult is the verdict of admission under node pressure.
type AdmitResult struct {
	Admit   bool
	Reason  string // Reason ("Evicted") when rejected
	Message string // e.g. "The node had condition: [DiskPressure]. "
}

// Admit decides whether pod may start on a node with the given pressure conditions:
//
//   - no condition, or a critical pod: admitted;
//   - MemoryPressure alone: admitted unless the pod is BestEffort, and a BestEffort
//     pod is admitted if it tolerates the node.kubernetes.io/memory-pressure
//     NoSchedule taint;
//   - any other condition (disk, PID, or several): rejected.
func Admit(pod *v1.Pod, conditions []v1.NodeConditionType) AdmitResult {
	if len(conditions) == 0 || qos.IsCritical(pod) {
		return AdmitResult{Admit: true}
	}
	if len(conditions) == 1 && conditions[0] == v1.NodeMemoryPressure {
		if qos.Class(pod) != v1.PodQOSBestEffort {
			return AdmitResult{Admit: true}
		}
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		for i := range pod.Spec.Tolerations {
			if pod.Spec.Tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
				return AdmitResult{Admit: true}
			}
		}
	}
	return AdmitResult{
		Reason:  Reason,
		Message: fmt.Sprintf("The node had condition: %v. ", conditions),
	}
}
