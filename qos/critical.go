package qos

import v1 "k8s.io/api/core/v1"

const (
	// ConfigSourceAnnotation is the pod annotation the kubelet sets to the source
	// a pod came from: "api" for pods from the API server, "file" or "http" for
	// static pods.
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	// ConfigMirrorAnnotation marks a mirror pod: the API server's copy of a static
	// pod. Only its presence matters, not its value.
	ConfigMirrorAnnotation = "kubernetes.io/config.mirror"

	// SystemCriticalPriority is the lowest priority that makes a pod critical,
	// whatever its source. It is the priority of the system-cluster-critical class;
	// system-node-critical is 1000 above it.
	SystemCriticalPriority int32 = 2_000_000_000

	// apiSource is the ConfigSourceAnnotation value of pods from the API server.
	apiSource = "api"
	// systemNodeCritical is the priority class name of node-critical pods.
	systemNodeCritical = "system-node-critical"
)

// IsStatic reports whether pod is a static pod: its ConfigSourceAnnotation is
// present and is not "api". A pod without the annotation (as the API server
// returns most pods) is not static. pod must not be nil.
func IsStatic(pod *v1.Pod) bool {
	source, ok := pod.Annotations[ConfigSourceAnnotation]
	return ok && source != apiSource
}

// IsMirror reports whether pod is a mirror pod, that is, whether it carries the
// ConfigMirrorAnnotation (with any value). pod must not be nil.
func IsMirror(pod *v1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotation]
	return ok
}

// IsCritical reports whether pod is critical as the kubelet judges it for
// eviction, admission and preemption: it is static, a mirror pod, or has a
// spec.priority of at least SystemCriticalPriority. The priority class name
// alone does not count; only the resolved spec.priority does. pod must not be nil.
func IsCritical(pod *v1.Pod) bool {
	return IsStatic(pod) || IsMirror(pod) ||
		(pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority)
}

// IsNodeCritical reports whether pod is critical (IsCritical) and its
// spec.priorityClassName is "system-node-critical". Such pods get
// GuaranteedOOMScoreAdj whatever their QoS class. pod must not be nil.
func IsNodeCritical(pod *v1.Pod) bool {
	return IsCritical(pod) && pod.Spec.PriorityClassName == systemNodeCritical
}

// Priority returns pod's spec.priority, or 0 when it is not set (as for pods
// created before priority admission resolved it). pod must not be nil.
func Priority(pod *v1.Pod) int32 {
	if pod.Spec.Priority == nil {
		return 0
	}
	return *pod.Spec.Priority
}
