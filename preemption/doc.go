// Package preemption admits critical pods on a full node by preempting
// lower-priority pods, as the kubelet's critical-pod admission handler does, split
// into a decision and its execution.
//
// A pod is critical when it is a static pod, a mirror pod, or has a priority of at
// least [qos.SystemCriticalPriority]. When such a pod fails admission only because
// the node lacks resources ([InsufficientResource] failures), [Handler] picks a set
// of victims with [SelectVictims] and returns a [Plan]: the victims as
// [nodeapi.KillRequest]s, in the order the kubelet kills them. Any other kind of
// failure is returned unchanged: preempting would not make the pod fit. The Handler
// never kills; the agent that admits the pod carries out the plan before it starts
// the pod, with an [Executor] (the kubelet's event, log lines and
// kubelet_preemptions counter) or its own loop.
//
// Victim selection is a pure function of the pods and the requirement. It keeps the
// kubelet's result exactly (see SelectVictims) but computes each pod's requests
// once, so a greedy step scans integers.
//
// # Where we differ from the kubelet, on purpose
//
//   - Requests are effective requests (component-helpers PodRequests: sidecars,
//     pod-level resources, overhead), the same the fit check counts, so a victim frees
//     exactly what the fit check charged for it. The kubelet's preemption code sums
//     container requests and takes the init-container maximum, ignoring sidecars.
//   - Victims are grouped by QoS class only, as in kubelet 1.32 and the seed. Newer
//     kubelet sources also group by priority within the preemptable pods; we do not.
//   - Deciding and killing are apart: the admission chain checks the plan (the fit
//     without the victims) before it admits the pod; Executor.Execute reports the
//     pods it killed, and stops between kills when its context ends.
//
// The package is importable on its own: it depends only on the Kubernetes API types,
// component-helpers, the Prometheus client and nodekeeper's qos and nodeapi
// packages.
package preemption
