// Package preemption admits critical pods on a full node by killing lower-priority
// pods, as the kubelet's critical-pod admission handler does.
//
// A pod is critical when it is a static pod, a mirror pod, or has a priority of at
// least [qos.SystemCriticalPriority]. When such a pod fails admission only because
// the node lacks resources ([InsufficientResource] failures), [Handler] picks a set
// of victims with [SelectVictims] and kills them through a [PodKiller] before the pod
// is admitted. Any other kind of failure is returned unchanged: preempting would not
// make the pod fit.
//
// Victim selection is a pure function of the pods and the requirement. It keeps the
// kubelet's result exactly (see SelectVictims) but precomputes requests and groups
// pods with identical requests, so it does far less work on large nodes.
//
// # Where we differ from the kubelet, on purpose
//
//   - Requests are effective requests (component-helpers PodRequests: sidecars,
//     pod-level resources, overhead), the same the fit check counts, so a victim frees
//     exactly what the fit check charged for it. The kubelet's preemption code sums
//     container requests and takes the init-container maximum, ignoring sidecars.
//   - Victims are grouped by QoS class only, as in kubelet 1.32 and the seed. Newer
//     kubelet sources also group by priority within the preemptable pods; we do not.
//   - HandleAdmissionFailure reports the pods it killed, and stops between kills when
//     its context ends.
//   - The Preempting warning event is not emitted yet (no event sink).
//
// The package is importable on its own: it depends only on the Kubernetes API types,
// component-helpers and nodekeeper's qos package.
package preemption
