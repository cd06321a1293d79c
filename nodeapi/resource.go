package nodeapi

import (
	"math"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// DefaultMaxPods is the kubelet's maxPods default: the pods a node admits when
// its configuration or its allocatable does not say.
const DefaultMaxPods = 110

// maxMilli is math.MaxInt64 thousandths: the largest cpu quantity whose
// millicore value fits an int64.
var maxMilli = resource.NewScaledQuantity(math.MaxInt64, resource.Milli)

// Amount returns q, an amount of the resource name, as the int64 the kubelet's
// admission and preemption compare: millicores for cpu, the integer value
// (bytes, counts) otherwise. This is the one overflow policy: a negative
// amount counts as 0 and one beyond int64 as math.MaxInt64. Loaders reject
// single quantities that large at the input, so only sums (a pod's containers
// and overhead) can reach it.
func Amount(name v1.ResourceName, q resource.Quantity) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	if name == v1.ResourceCPU {
		if q.Cmp(*maxMilli) >= 0 {
			return math.MaxInt64
		}
		return q.MilliValue()
	}
	if q.CmpInt64(math.MaxInt64) >= 0 {
		return math.MaxInt64
	}
	return q.Value()
}

// PodRequests returns pod's effective requests, as the kubelet computes them:
// init containers, restartable (sidecar) init containers, pod-level resources
// and overhead included. It does not modify pod.
func PodRequests(pod *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

// PodRequest returns the Amount of name in pod's effective requests; every pod
// requests one of "pods".
func PodRequest(pod *v1.Pod, name v1.ResourceName) int64 {
	return RequestIn(PodRequests(pod), name)
}

// RequestIn returns the Amount of name in reqs, a pod's effective requests;
// every pod requests one of "pods".
func RequestIn(reqs v1.ResourceList, name v1.ResourceName) int64 {
	if name == v1.ResourcePods {
		return 1
	}
	return Amount(name, reqs[name])
}

// IsExtendedResourceName reports whether name is an extended resource name as
// Kubernetes defines it: domain-prefixed ("example.com/gpu"; a prefix without a
// dot is allowed), outside the kubernetes.io domain, and such that
// "requests.<name>" is a qualified name. Device plugins register such names.
func IsExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+s)) == 0
}
