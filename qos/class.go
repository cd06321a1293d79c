package qos

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// qosResources are the only resources that decide a QoS class and an OOM score.
var qosResources = [...]v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}

// Class returns pod's QoS class as the kubelet computes it from the spec.
//
// When pod.Spec.Resources is non-nil, the pod-level requests and limits alone
// decide the class and the containers are not looked at. Otherwise every init
// container (restartable or not) and every regular container is classified and
// the results combined: all BestEffort gives BestEffort, all Guaranteed gives
// Guaranteed, anything else Burstable. A set of resources is BestEffort when
// neither cpu nor memory has a non-zero request or limit, Guaranteed when both
// have a request equal to their limit, and Burstable otherwise. Resources other
// than cpu and memory are ignored. A pod without containers is BestEffort.
//
// Absent requests are defaulted first as the API server does (see the package
// doc), so a container with limits only is Guaranteed. pod.Status.QOSClass is
// ignored. pod must not be nil; it is not modified.
func Class(pod *v1.Pod) v1.PodQOSClass {
	return class(withDefaults(pod))
}

// class is Class for a pod that already has its defaults.
func class(pod *v1.Pod) v1.PodQOSClass {
	if r := pod.Spec.Resources; r != nil {
		return resourcesClass(r.Requests, r.Limits)
	}
	var got v1.PodQOSClass
	for _, ctrs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range ctrs {
			c := resourcesClass(ctrs[i].Resources.Requests, ctrs[i].Resources.Limits)
			switch {
			case c == v1.PodQOSBurstable:
				return v1.PodQOSBurstable
			case got == "":
				got = c
			case got != c:
				return v1.PodQOSBurstable
			}
		}
	}
	if got == "" {
		return v1.PodQOSBestEffort
	}
	return got
}

// resourcesClass classifies one set of requests and limits by cpu and memory.
func resourcesClass(requests, limits v1.ResourceList) v1.PodQOSClass {
	var got v1.PodQOSClass
	for _, name := range qosResources {
		req, lim := requests[name], limits[name]
		if req.Cmp(lim) != 0 {
			return v1.PodQOSBurstable
		}
		c := v1.PodQOSGuaranteed
		if req.IsZero() {
			c = v1.PodQOSBestEffort
		}
		if got != "" && got != c {
			return v1.PodQOSBurstable
		}
		got = c
	}
	return got
}

// withDefaults returns pod with the API defaults for cpu and memory requests
// applied (see the package doc). It never modifies pod: when something needs a
// default it returns a shallow copy whose changed containers and resource lists
// are fresh, and otherwise pod itself.
func withDefaults(pod *v1.Pod) *v1.Pod {
	inits, initsChanged := defaultContainers(pod.Spec.InitContainers)
	ctrs, ctrsChanged := defaultContainers(pod.Spec.Containers)
	podRes := pod.Spec.Resources
	needPodDefaults := podRes != nil && len(podRes.Limits) > 0 && missingAny(podRes.Requests)
	if !initsChanged && !ctrsChanged && !needPodDefaults {
		return pod
	}
	cp := *pod
	cp.Spec.InitContainers = inits
	cp.Spec.Containers = ctrs
	if needPodDefaults {
		// The containers' requests are aggregated after their own defaults, with
		// restartable init containers counted as the scheduler counts them.
		aggregated := resourcehelper.AggregateContainerRequests(&cp, resourcehelper.PodResourcesOptions{})
		res := *podRes
		res.Requests = cloneList(podRes.Requests)
		for _, name := range qosResources {
			if _, ok := res.Requests[name]; ok {
				continue
			}
			if q, ok := aggregated[name]; ok {
				res.Requests[name] = q.DeepCopy()
			} else if q, ok := podRes.Limits[name]; ok {
				res.Requests[name] = q.DeepCopy()
			}
		}
		cp.Spec.Resources = &res
	}
	return &cp
}

// missingAny reports whether requests lacks cpu or memory.
func missingAny(requests v1.ResourceList) bool {
	for _, name := range qosResources {
		if _, ok := requests[name]; !ok {
			return true
		}
	}
	return false
}

// defaultContainers returns ctrs with every absent cpu or memory request set to
// the container's limit, and whether anything changed. Without a change it
// returns ctrs itself; otherwise a new slice with fresh request lists where needed.
func defaultContainers(ctrs []v1.Container) ([]v1.Container, bool) {
	var out []v1.Container
	for i := range ctrs {
		var req v1.ResourceList
		for _, name := range qosResources {
			lim, hasLim := ctrs[i].Resources.Limits[name]
			if _, hasReq := ctrs[i].Resources.Requests[name]; !hasLim || hasReq {
				continue
			}
			if req == nil {
				req = cloneList(ctrs[i].Resources.Requests)
			}
			req[name] = lim.DeepCopy()
		}
		if req == nil {
			continue
		}
		if out == nil {
			out = make([]v1.Container, len(ctrs))
			copy(out, ctrs)
		}
		out[i].Resources.Requests = req
	}
	if out == nil {
		return ctrs, false
	}
	return out, true
}

// cloneList returns a copy of l that is never nil and shares no quantities with l.
func cloneList(l v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(l)+len(qosResources))
	for name, q := range l {
		out[name] = q.DeepCopy()
	}
	return out
}
