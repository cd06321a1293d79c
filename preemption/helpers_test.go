package preemption

import (
	"math"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/qos"
)

// podOpt changes a test pod.
type podOpt func(*v1.Pod)

// newPod returns a pod with one container and no resources (BestEffort).
func newPod(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func list(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// burstable sets requests only.
func burstable(kv ...string) podOpt {
	return func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = list(kv...) }
}

// guaranteed sets requests equal to limits; kv must include cpu and memory.
func guaranteed(kv ...string) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests = list(kv...)
		p.Spec.Containers[0].Resources.Limits = list(kv...)
	}
}

func priority(v int32) podOpt { return func(p *v1.Pod) { p.Spec.Priority = &v } }

func static() podOpt {
	return func(p *v1.Pod) {
		p.Annotations = map[string]string{qos.ConfigSourceAnnotation: "file"}
	}
}

func mirror() podOpt {
	return func(p *v1.Pod) {
		p.Annotations = map[string]string{qos.ConfigMirrorAnnotation: "abc"}
	}
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// referenceSelect is victim selection written the straightforward way the kubelet
// does it: it recomputes each pod's requests from its spec at every distance
// evaluation and scans every remaining pod at every step. It is the oracle that the
// fast SelectVictims must match, and the baseline of the benchmarks.
func referenceSelect(preemptor *v1.Pod, pods []*v1.Pod, reqs Requirements) ([]*v1.Pod, error) {
	var be, bu, g []*v1.Pod
	for _, p := range pods {
		if p == nil || !Preemptable(preemptor, p) {
			continue
		}
		switch qos.Class(p) {
		case v1.PodQOSBestEffort:
			be = append(be, p)
		case v1.PodQOSBurstable:
			bu = append(bu, p)
		case v1.PodQOSGuaranteed:
			g = append(g, p)
		}
	}
	cat := func(lists ...[]*v1.Pod) []*v1.Pod {
		var out []*v1.Pod
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	if rem := refSubtract(reqs, cat(be, bu, g)); len(rem) > 0 {
		return nil, ErrNoVictims
	}
	gv, err := refByDistance(g, refSubtract(reqs, cat(be, bu)))
	if err != nil {
		return nil, err
	}
	buv, err := refByDistance(bu, refSubtract(reqs, cat(be, gv)))
	if err != nil {
		return nil, err
	}
	bev, err := refByDistance(be, refSubtract(reqs, cat(buv, gv)))
	if err != nil {
		return nil, err
	}
	return cat(bev, buv, gv), nil
}

func refSubtract(reqs Requirements, pods []*v1.Pod) Requirements {
	var out Requirements
	for _, r := range reqs {
		q := r.Quantity
		for _, p := range pods {
			if q <= 0 {
				break
			}
			q -= Request(p, r.Resource)
		}
		if q > 0 {
			out = append(out, Requirement{Resource: r.Resource, Quantity: q})
		}
	}
	return out
}

func refDistance(reqs Requirements, p *v1.Pod) float64 {
	var d float64
	for _, r := range reqs {
		rem := float64(r.Quantity - Request(p, r.Resource))
		if rem > 0 {
			d += math.Pow(rem/float64(r.Quantity), 2)
		}
	}
	return d
}

func refSmaller(a, b *v1.Pod) bool {
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		ra, rb := Request(a, name), Request(b, name)
		if ra != rb {
			return ra < rb
		}
	}
	return true
}

func refByDistance(pods []*v1.Pod, reqs Requirements) ([]*v1.Pod, error) {
	pods = append([]*v1.Pod(nil), pods...)
	var out []*v1.Pod
	for len(reqs) > 0 {
		if len(pods) == 0 {
			return nil, ErrNoVictims
		}
		bestDist := float64(len(reqs) + 1)
		best := 0
		for i, p := range pods {
			d := refDistance(reqs, p)
			if d < bestDist || (d == bestDist && refSmaller(p, pods[best])) {
				bestDist, best = d, i
			}
		}
		reqs = refSubtract(reqs, []*v1.Pod{pods[best]})
		out = append(out, pods[best])
		pods[best] = pods[len(pods)-1]
		pods = pods[:len(pods)-1]
	}
	return out, nil
}
