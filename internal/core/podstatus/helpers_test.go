package podstatus

import (
	"slices"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mt(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }

// testPod is a pod named web in ns with one container app (image img:1).
func testPod(mut ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			Containers:    []v1.Container{{Name: "app", Image: "img:1"}},
		},
	}
	for _, f := range mut {
		f(p)
	}
	return p
}

// debugger adds ephemeral container name (image img:2) targeting target.
func debugger(name, target string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "img:2"},
			TargetContainerName:      target,
		})
	}
}

// sb is a ready sandbox with IP 10.1.0.5 made at t0+created.
func sb(id string, attempt uint32, created time.Duration, mut ...func(*runtimeapi.PodSandboxStatus)) *runtimeapi.PodSandboxStatus {
	s := &runtimeapi.PodSandboxStatus{
		Id: id, Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1", Attempt: attempt},
		State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: t0.Add(created).UnixNano(),
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.1.0.5"},
	}
	for _, f := range mut {
		f(s)
	}
	return s
}

type ctrOpt func(*runtimeapi.ContainerStatus)

func running(started time.Duration) ctrOpt {
	return func(c *runtimeapi.ContainerStatus) {
		c.State, c.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, t0.Add(started).UnixNano()
	}
}

func exited(code int32, started, finished time.Duration) ctrOpt {
	return func(c *runtimeapi.ContainerStatus) {
		c.State, c.ExitCode = runtimeapi.ContainerState_CONTAINER_EXITED, code
		c.StartedAt, c.FinishedAt = t0.Add(started).UnixNano(), t0.Add(finished).UnixNano()
	}
}

// ctr is container id of spec container spec, restarted restarts times,
// made at t0+created (sbID names its sandbox, as the pod runtime's do).
func ctr(id string, spec *v1.Container, sbID string, restarts int, created time.Duration, opts ...ctrOpt) *runtimeapi.ContainerStatus {
	c := &runtimeapi.ContainerStatus{
		Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: spec.Name, Attempt: uint32(restarts)},
		CreatedAt: t0.Add(created).UnixNano(), State: runtimeapi.ContainerState_CONTAINER_CREATED, Image: &runtimeapi.ImageSpec{Image: spec.Image}, ImageRef: "sha256:" + spec.Image,
		Annotations: map[string]string{"nodekeeper.io/sandbox-id": sbID, AnnotationRestartCount: strconv.Itoa(restarts)},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// status is the runtime's view of sandboxes and containers as a relist
// makes it: newest first, the IPs of the newest ready sandbox.
func status(sbs []*runtimeapi.PodSandboxStatus, ctrs ...*runtimeapi.ContainerStatus) *Runtime {
	s := &Runtime{UID: "uid-1", Name: "web", Namespace: "ns", Sandboxes: sbs, Containers: ctrs}
	newest := func(a, b int64) int { return -int(max(-1, min(1, a-b))) }
	slices.SortStableFunc(s.Sandboxes, func(a, b *runtimeapi.PodSandboxStatus) int { return newest(a.CreatedAt, b.CreatedAt) })
	slices.SortStableFunc(s.Containers, func(a, b *runtimeapi.ContainerStatus) int { return newest(a.CreatedAt, b.CreatedAt) })
	for _, b := range s.Sandboxes {
		if b.State == runtimeapi.PodSandboxState_SANDBOX_READY && b.GetNetwork().GetIp() != "" {
			s.IPs = []string{b.GetNetwork().GetIp()}
			break
		}
	}
	return s
}

// condSummary is "Type=Status(Reason)" per condition.
func condSummary(cs []v1.PodCondition) []string {
	var out []string
	for _, c := range cs {
		s := string(c.Type) + "=" + string(c.Status)
		if c.Reason != "" {
			s += "(" + c.Reason + ")"
		}
		out = append(out, s)
	}
	return out
}

// notReady is a prober whose every running container has started and is
// not ready.
type notReady struct{}

func (notReady) UpdatePodStatus(_ *v1.Pod, st *v1.PodStatus) {
	for _, ss := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range ss {
			ss[i].Ready = false
		}
	}
}
