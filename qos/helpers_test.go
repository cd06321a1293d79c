package qos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// list builds a ResourceList from name, quantity pairs: list("cpu", "1", "memory", "1Gi").
func list(t testing.TB, kv ...string) v1.ResourceList {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("list: odd number of arguments %q", kv)
	}
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		q, err := resource.ParseQuantity(kv[i+1])
		if err != nil {
			t.Fatalf("list: %s=%q: %v", kv[i], kv[i+1], err)
		}
		l[v1.ResourceName(kv[i])] = q
	}
	return l
}

// ctr returns a container with the given requests and limits (either may be nil).
func ctr(name string, requests, limits v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Requests: requests, Limits: limits}}
}

// sidecar returns a restartable init container (restartPolicy Always).
func sidecar(name string, requests, limits v1.ResourceList) v1.Container {
	c := ctr(name, requests, limits)
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// podOpt changes a pod under construction.
type podOpt func(*v1.Pod)

func withInit(cs ...v1.Container) podOpt {
	return func(p *v1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, cs...) }
}

func withPodResources(requests, limits v1.ResourceList) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Resources = &v1.ResourceRequirements{Requests: requests, Limits: limits}
	}
}

func withStatusClass(c v1.PodQOSClass) podOpt {
	return func(p *v1.Pod) { p.Status.QOSClass = c }
}

func withAnnotation(key, value string) podOpt {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
	}
}

func withPriority(prio int32, className string) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Priority = &prio
		p.Spec.PriorityClassName = className
	}
}

func withPriorityClassName(className string) podOpt {
	return func(p *v1.Pod) { p.Spec.PriorityClassName = className }
}

// newPod returns a pod in namespace "default" with the given regular containers.
func newPod(ctrs []v1.Container, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace = "p", "default"
	p.Spec.Containers = ctrs
	for _, o := range opts {
		o(p)
	}
	return p
}

// ctrs is shorthand for a container slice.
func ctrs(cs ...v1.Container) []v1.Container { return cs }
