package plan

import (
	stdcmp "cmp"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sb is a ready pod-network sandbox with an IP, created at t0+created.
func sb(id string, attempt uint32, created time.Duration, mut ...func(*runtimeapi.PodSandboxStatus)) *runtimeapi.PodSandboxStatus {
	s := &runtimeapi.PodSandboxStatus{
		Id: id, Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1", Attempt: attempt},
		State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: t0.Add(created).UnixNano(),
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.1.0.5"},
		Linux:   &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD}}},
	}
	for _, f := range mut {
		f(s)
	}
	return s
}

// ctr is container id named name of spec c (for its hash) in sandbox sbID.
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

func ctr(id string, spec *v1.Container, sbID string, restarts int, created time.Duration, opts ...ctrOpt) *runtimeapi.ContainerStatus {
	c := &runtimeapi.ContainerStatus{
		Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: spec.Name, Attempt: uint32(restarts)},
		CreatedAt: t0.Add(created).UnixNano(), State: runtimeapi.ContainerState_CONTAINER_CREATED, Image: &runtimeapi.ImageSpec{Image: spec.Image}, ImageRef: "sha256:" + spec.Image,
		Annotations: map[string]string{criconfig.AnnotationSandboxID: sbID, criconfig.AnnotationContainerHash: criconfig.Hash(spec), criconfig.AnnotationRestartCount: strconv.Itoa(restarts)},
		Labels:      map[string]string{criconfig.LabelPodUID: "uid-1", criconfig.LabelContainerName: spec.Name},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func status(sbs []*runtimeapi.PodSandboxStatus, ctrs ...*runtimeapi.ContainerStatus) *podstatus.Runtime {
	s := &podstatus.Runtime{UID: "uid-1", Name: "web", Namespace: "ns", Sandboxes: sbs, Containers: ctrs}
	// Newest first, as the pod runtime's relist orders them.
	slices.SortStableFunc(s.Sandboxes, func(a, b *runtimeapi.PodSandboxStatus) int { return stdcmp.Compare(b.CreatedAt, a.CreatedAt) })
	slices.SortStableFunc(s.Containers, func(a, b *runtimeapi.ContainerStatus) int { return stdcmp.Compare(b.CreatedAt, a.CreatedAt) })
	return s
}

type actSummary struct {
	CreateSandbox, KillPod, InitPhase bool
	Attempt                           uint32
	SandboxID                         string
	Kill, Start, Remove               []string
	Ephemeral                         []string
	Waiting                           map[string]string
	RetryAfter                        time.Duration
}

func summarize(a Actions) actSummary {
	s := actSummary{CreateSandbox: a.CreateSandbox, KillPod: a.KillPod, InitPhase: a.InitPhase, Attempt: a.Attempt, SandboxID: a.SandboxID, Remove: a.Remove, RetryAfter: a.RetryAfter}
	for _, k := range a.Kill {
		s.Kill = append(s.Kill, k.ID)
	}
	for _, st := range a.Start {
		x := fmt.Sprintf("%s/%d", st.Container.Name, st.RestartCount)
		if !st.PrevFinished.IsZero() {
			x += "+backoff"
		}
		s.Start = append(s.Start, x)
	}
	for _, st := range a.Ephemeral {
		x := st.Container.Name
		if st.Target != "" {
			x += ">" + st.Target + "=" + st.TargetID
		}
		s.Ephemeral = append(s.Ephemeral, x)
	}
	for n, w := range a.Waiting {
		if s.Waiting == nil {
			s.Waiting = map[string]string{}
		}
		s.Waiting[n] = w.Reason + ": " + w.Message
	}
	return s
}

func TestComputeActions(t *testing.T) {
	t.Parallel()
	sidecar := v1.ContainerRestartPolicyAlways
	withInit := func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{Name: "i1", Image: "img:1"}, {Name: "side", Image: "img:1", RestartPolicy: &sidecar}, {Name: "i2", Image: "img:1"}}
	}
	never := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever }
	onFailure := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyOnFailure }
	app := &v1.Container{Name: "app", Image: "img:1"}
	i1, side, i2 := &v1.Container{Name: "i1", Image: "img:1"}, &v1.Container{Name: "side", Image: "img:1", RestartPolicy: &sidecar}, &v1.Container{Name: "i2", Image: "img:1"}
	changedApp := &v1.Container{Name: "app", Image: "img:0"}
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	noBackoff := map[string]Backoff{}
	tests := []struct {
		name    string
		mut     []func(*v1.Pod)
		status  *podstatus.Runtime
		backoff map[string]Backoff
		now     time.Duration
		// notStarted are the running sidecars whose startup probe has
		// not succeeded.
		notStarted map[string]bool
		want       actSummary
	}{
		{name: "new pod: sandbox and container", status: nil,
			want: actSummary{CreateSandbox: true, Start: []string{"app/0"}}},
		{name: "new pod with init containers: the first one only", mut: []func(*v1.Pod){withInit},
			want: actSummary{CreateSandbox: true, InitPhase: true, Start: []string{"i1/0"}}},
		{name: "running: nothing", status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))),
			want: actSummary{SandboxID: "s1"}},
		{name: "first init running: wait", mut: []func(*v1.Pod){withInit}, status: status(ready, ctr("c1", i1, "s1", 0, 1, running(1))),
			want: actSummary{SandboxID: "s1", InitPhase: true}},
		{name: "first init done: the sidecar starts, the second init waits for it", mut: []func(*v1.Pod){withInit}, status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2))),
			want: actSummary{SandboxID: "s1", InitPhase: true, Start: []string{"side/0"}}},
		{name: "sidecar running, startup probe not passed: wait", mut: []func(*v1.Pod){withInit},
			status:     status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 0, 3, running(3))),
			notStarted: map[string]bool{"c2": true},
			want:       actSummary{SandboxID: "s1", InitPhase: true}},
		{name: "sidecar started: the second init starts", mut: []func(*v1.Pod){withInit},
			status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 0, 3, running(3))),
			want:   actSummary{SandboxID: "s1", InitPhase: true, Start: []string{"i2/0"}}},
		{name: "initialized pod: a sidecar not started holds nothing up", mut: []func(*v1.Pod){withInit},
			status:     status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 1, 3, running(3)), ctr("c3", i2, "s1", 0, 4, exited(0, 4, 5)), ctr("c4", app, "s1", 0, 6, exited(1, 6, 7))),
			now:        time.Minute,
			notStarted: map[string]bool{"c2": true},
			want:       actSummary{SandboxID: "s1", Start: []string{"app/1+backoff"}}},
		{name: "init containers removed after the pod was initialized: not run again", mut: []func(*v1.Pod){withInit},
			status: status(ready, ctr("c2", side, "s1", 0, 3, running(3)), ctr("c4", app, "s1", 0, 6, running(6))),
			want:   actSummary{SandboxID: "s1"}},
		{name: "init done, sidecar running: containers start", mut: []func(*v1.Pod){withInit},
			status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 0, 3, running(3)), ctr("c3", i2, "s1", 0, 4, exited(0, 4, 5))),
			want:   actSummary{SandboxID: "s1", Start: []string{"app/0"}}},
		{name: "pod done: an exited sidecar is not restarted", mut: []func(*v1.Pod){withInit, never},
			status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 0, 3, exited(1, 3, 10*time.Second)), ctr("c3", i2, "s1", 0, 4, exited(0, 4, 5)), ctr("c4", app, "s1", 0, 6, exited(0, 6, 7))),
			now:    20 * time.Second,
			want:   actSummary{SandboxID: "s1"}},
		{name: "OnFailure pod not done: the sidecar is restarted", mut: []func(*v1.Pod){withInit, onFailure},
			status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 0, 3, exited(1, 3, 10*time.Second)), ctr("c3", i2, "s1", 0, 4, exited(0, 4, 5)), ctr("c4", app, "s1", 0, 6, exited(1, 6, 7))),
			now:    20 * time.Second,
			want:   actSummary{SandboxID: "s1", Start: []string{"side/1+backoff", "app/1+backoff"}}},
		{name: "sidecar exited: restarted alongside", mut: []func(*v1.Pod){withInit},
			status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c2", side, "s1", 0, 3, exited(1, 3, 10*time.Second)), ctr("c3", i2, "s1", 0, 4, exited(0, 4, 5)), ctr("c4", app, "s1", 0, 6, running(6))),
			now:    20 * time.Second,
			want:   actSummary{SandboxID: "s1", Start: []string{"side/1+backoff"}}},
		{name: "init failed, Always: restarted", mut: []func(*v1.Pod){withInit}, status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(1, 1, 2))), now: time.Minute,
			want: actSummary{SandboxID: "s1", InitPhase: true, Start: []string{"i1/1+backoff"}}},
		{name: "init failed, Never: nothing more", mut: []func(*v1.Pod){withInit, never}, status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(1, 1, 2))),
			want: actSummary{SandboxID: "s1", InitPhase: true}},
		{name: "exited, Always, first time: restart at once", status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 5*time.Second))), now: 6 * time.Second,
			want: actSummary{SandboxID: "s1", Start: []string{"app/1+backoff"}}},
		{name: "exited, in back-off: CrashLoopBackOff and RetryAfter",
			status:  status(ready, ctr("c2", app, "s1", 1, 10*time.Second, exited(1, 10*time.Second, 15*time.Second)), ctr("c1", app, "s1", 0, 1, exited(1, 1, 5*time.Second))),
			backoff: map[string]Backoff{"app": {Delay: 20 * time.Second, Last: t0.Add(5 * time.Second)}}, now: 18 * time.Second,
			want: actSummary{SandboxID: "s1", RetryAfter: 17 * time.Second, Remove: []string{"c1"},
				Waiting: map[string]string{"app": "CrashLoopBackOff: back-off 20s restarting failed container=app pod=web_ns(uid-1)"}}},
		{name: "exited 0, OnFailure: done", mut: []func(*v1.Pod){onFailure}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2))),
			want: actSummary{SandboxID: "s1"}},
		{name: "exited 1, OnFailure: restart", mut: []func(*v1.Pod){onFailure}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 2))), now: time.Minute,
			want: actSummary{SandboxID: "s1", Start: []string{"app/1+backoff"}}},
		{name: "exited 1, Never: done", mut: []func(*v1.Pod){never}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 2))),
			want: actSummary{SandboxID: "s1"}},
		{name: "spec changed: kill and start", status: status(ready, ctr("c1", changedApp, "s1", 0, 1, running(1))),
			want: actSummary{SandboxID: "s1", Kill: []string{"c1"}, Start: []string{"app/1"}}},
		{name: "created, never started: start again", status: status(ready, ctr("c1", app, "s1", 0, 1)),
			want: actSummary{SandboxID: "s1", Start: []string{"app/1"}}},
		{name: "sandbox not ready: kill, new sandbox attempt 1, all restart",
			status: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0, func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })}, ctr("c1", app, "s1", 0, 1, exited(137, 1, 2))),
			now:    time.Minute,
			want:   actSummary{CreateSandbox: true, KillPod: true, Attempt: 1, Start: []string{"app/1+backoff"}}},
		{name: "sandbox lost its IP: recreated", status: status([]*runtimeapi.PodSandboxStatus{sb("s1", 3, 0, func(s *runtimeapi.PodSandboxStatus) { s.Network = nil })}, ctr("c1", app, "s1", 0, 1, running(1))),
			want: actSummary{CreateSandbox: true, KillPod: true, Attempt: 4, Start: []string{"app/1"}}},
		{name: "host network changed: recreated", mut: []func(*v1.Pod){func(p *v1.Pod) { p.Spec.HostNetwork = true }}, status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))),
			want: actSummary{CreateSandbox: true, KillPod: true, Attempt: 1, Start: []string{"app/1"}}},
		{name: "two ready sandboxes: recreated", status: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0), sb("s2", 1, time.Second)}),
			want: actSummary{CreateSandbox: true, KillPod: true, Attempt: 2, Start: []string{"app/0"}}},
		{name: "Never pod whose sandbox died: not run again", mut: []func(*v1.Pod){never},
			status: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0, func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })}, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2))),
			want:   actSummary{Attempt: 1}},
		{name: "new sandbox with init containers: init runs again", mut: []func(*v1.Pod){withInit},
			status: status([]*runtimeapi.PodSandboxStatus{sb("s2", 1, time.Minute), sb("s1", 0, 0, func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })},
				ctr("c1", i1, "s1", 0, 1, exited(0, 1, 2)), ctr("c4", app, "s1", 0, 6, exited(137, 6, 30*time.Second))),
			now:  2 * time.Minute,
			want: actSummary{SandboxID: "s2", Attempt: 1, InitPhase: true, Start: []string{"i1/1+backoff"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bo := tc.backoff
			if bo == nil {
				bo = noBackoff
			}
			pod := testPod(tc.mut...)
			hashes := criconfig.Hashes(pod)
			crash := map[string]Backoff{}
			for n, e := range bo {
				e.Spec = hashes[n] // counted for the container's spec
				crash[n] = e
			}
			got := Compute(Input{Pod: pod, Status: tc.status, Hashes: hashes, Crash: crash, NotStarted: tc.notStarted}, t0.Add(tc.now))
			if diff := cmp.Diff(tc.want, summarize(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestOldContainers(t *testing.T) {
	t.Parallel()
	app := &v1.Container{Name: "app", Image: "img:1"}
	side := &v1.Container{Name: "side", Image: "img:1"}
	st := status(nil,
		ctr("c4", app, "s1", 3, 4, running(4)),
		ctr("c3", app, "s1", 2, 3, exited(1, 3, 3)),
		ctr("c2", app, "s1", 1, 2, exited(1, 2, 2)),
		ctr("c1", app, "s1", 0, 1, exited(1, 1, 1)),
		ctr("d2", side, "s1", 1, 2, exited(0, 2, 2)),
		ctr("d1", side, "s1", 0, 1, exited(0, 1, 1)),
	)
	if diff := cmp.Diff([]string{"c2", "c1", "d1"}, oldContainers(st)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestComputeActionsEphemeral(t *testing.T) {
	t.Parallel()
	app := &v1.Container{Name: "app", Image: "img:1"}
	i1 := &v1.Container{Name: "i1", Image: "img:1"}
	dbg := &v1.Container{Name: "dbg", Image: "img:2"}
	withDebug := func(target string) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
				EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "dbg", Image: "img:2"}, TargetContainerName: target,
			})
		}
	}
	withInit := func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{*i1} }
	never := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever }
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	notReady := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0, func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })}
	tests := []struct {
		name   string
		mut    []func(*v1.Pod)
		status *podstatus.Runtime
		want   actSummary
	}{
		{name: "added to a running pod: started alone, the container left running", mut: []func(*v1.Pod){withDebug("")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))),
			want:   actSummary{SandboxID: "s1", Ephemeral: []string{"dbg"}}},
		{name: "with a target: its container's ID", mut: []func(*v1.Pod){withDebug("app")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))),
			want:   actSummary{SandboxID: "s1", Ephemeral: []string{"dbg>app=c1"}}},
		{name: "target absent: no ID (the start fails)", mut: []func(*v1.Pod){withDebug("nope")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))),
			want:   actSummary{SandboxID: "s1", Ephemeral: []string{"dbg>nope="}}},
		{name: "running: nothing", mut: []func(*v1.Pod){withDebug("")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, running(1)), ctr("e1", dbg, "s1", 0, 2, running(2))),
			want:   actSummary{SandboxID: "s1"}},
		{name: "exited: never restarted", mut: []func(*v1.Pod){withDebug("")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, running(1)), ctr("e1", dbg, "s1", 0, 2, exited(1, 2, 3))),
			want:   actSummary{SandboxID: "s1"}},
		{name: "created, never started: not started again", mut: []func(*v1.Pod){withDebug("")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, running(1)), ctr("e1", dbg, "s1", 0, 2)),
			want:   actSummary{SandboxID: "s1"}},
		{name: "while init runs: started", mut: []func(*v1.Pod){withInit, withDebug("i1")},
			status: status(ready, ctr("c1", i1, "s1", 0, 1, running(1))),
			want:   actSummary{SandboxID: "s1", InitPhase: true, Ephemeral: []string{"dbg>i1=c1"}}},
		{name: "new sandbox: not started in it", mut: []func(*v1.Pod){withDebug("")},
			status: status(notReady, ctr("c1", app, "s1", 0, 1, exited(137, 1, 2))),
			want:   actSummary{CreateSandbox: true, KillPod: true, Attempt: 1, Start: []string{"app/1+backoff"}}},
		{name: "an ephemeral container of the old sandbox: not run again in the new", mut: []func(*v1.Pod){withDebug("")},
			status: status([]*runtimeapi.PodSandboxStatus{sb("s2", 1, time.Minute), notReady[0]}, ctr("c1", app, "s1", 0, 1, exited(137, 1, 2)), ctr("e1", dbg, "s1", 0, 2, exited(137, 2, 2))),
			want:   actSummary{SandboxID: "s2", Attempt: 1, Start: []string{"app/1+backoff"}}},
		{name: "pod finished: not started", mut: []func(*v1.Pod){never, withDebug("")},
			status: status(ready, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2))),
			want:   actSummary{SandboxID: "s1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod(tc.mut...)
			got := Compute(Input{Pod: pod, Status: tc.status, Hashes: criconfig.Hashes(pod)}, t0.Add(time.Hour))
			if diff := cmp.Diff(tc.want, summarize(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
