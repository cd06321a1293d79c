package podruntime

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func mt(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }

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

func TestDerivePodStatusPhases(t *testing.T) {
	t.Parallel()
	sidecar := v1.ContainerRestartPolicyAlways
	app := &v1.Container{Name: "app", Image: "img:1"}
	i1 := &v1.Container{Name: "i1", Image: "img:1"}
	side := &v1.Container{Name: "side", Image: "img:1", RestartPolicy: &sidecar}
	withInit := func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{*i1} }
	withSidecar := func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{*side} }
	never := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever }
	onFailure := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyOnFailure }
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	tests := []struct {
		name      string
		mut       []func(*v1.Pod)
		status    *PodStatus
		waiting   map[string]v1.ContainerStateWaiting
		notReady  bool
		wantPhase v1.PodPhase
		wantConds []string
	}{
		{name: "nothing yet", wantPhase: v1.PodPending,
			wantConds: []string{"PodReadyToStartContainers=False", "Initialized=True", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
		{name: "running", status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))), wantPhase: v1.PodRunning,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=True", "Ready=True", "PodScheduled=True"}},
		{name: "running, readiness says no", status: status(ready, ctr("c1", app, "s1", 0, 1, running(1))), notReady: true, wantPhase: v1.PodRunning,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
		{name: "init running", mut: []func(*v1.Pod){withInit}, status: status(ready, ctr("c1", i1, "s1", 0, 1, running(1))), wantPhase: v1.PodPending,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=False(ContainersNotInitialized)", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
		{name: "init failed, Never", mut: []func(*v1.Pod){withInit, never}, status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(1, 1, 2))), wantPhase: v1.PodFailed,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=False(ContainersNotInitialized)", "ContainersReady=False(PodCompleted)", "Ready=False(PodCompleted)", "PodScheduled=True"}},
		{name: "init failed, Always: pending", mut: []func(*v1.Pod){withInit}, status: status(ready, ctr("c1", i1, "s1", 0, 1, exited(1, 1, 2))), wantPhase: v1.PodPending,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=False(ContainersNotInitialized)", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
		{name: "sidecar running and app running", mut: []func(*v1.Pod){withSidecar}, status: status(ready, ctr("c1", side, "s1", 0, 1, running(1)), ctr("c2", app, "s1", 0, 2, running(2))), wantPhase: v1.PodRunning,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=True", "Ready=True", "PodScheduled=True"}},
		{name: "crash loop, Always: running", status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 2))),
			waiting: map[string]v1.ContainerStateWaiting{"app": {Reason: "CrashLoopBackOff"}}, wantPhase: v1.PodRunning,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
		{name: "exited 0, Never: succeeded", mut: []func(*v1.Pod){never}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2))), wantPhase: v1.PodSucceeded,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(PodCompleted)", "Ready=False(PodCompleted)", "PodScheduled=True"}},
		{name: "exited 1, Never: failed", mut: []func(*v1.Pod){never}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 2))), wantPhase: v1.PodFailed,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(PodCompleted)", "Ready=False(PodCompleted)", "PodScheduled=True"}},
		{name: "exited 0, OnFailure: succeeded", mut: []func(*v1.Pod){onFailure}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2))), wantPhase: v1.PodSucceeded,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(PodCompleted)", "Ready=False(PodCompleted)", "PodScheduled=True"}},
		{name: "exited 1, OnFailure: running (restarting)", mut: []func(*v1.Pod){onFailure}, status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 2))), wantPhase: v1.PodRunning,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
		{name: "exited 1, Always: running", status: status(ready, ctr("c1", app, "s1", 0, 1, exited(1, 1, 2))), wantPhase: v1.PodRunning,
			wantConds: []string{"PodReadyToStartContainers=True", "Initialized=True", "ContainersReady=False(ContainersNotReady)", "Ready=False(ContainersNotReady)", "PodScheduled=True"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := statusInput{pod: testPod(tc.mut...), status: tc.status, waiting: tc.waiting, runtimeName: "containerd", now: t0.Add(time.Hour)}
			if tc.notReady {
				in.probes = &fakeProbes{ready: map[string]bool{"app": false}}
			}
			got := derivePodStatus(in)
			if got.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", got.Phase, tc.wantPhase)
			}
			if diff := cmp.Diff(tc.wantConds, condSummary(got.Conditions)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDerivePodStatusContainers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msg := filepath.Join(dir, "msg")
	if err := os.WriteFile(msg, []byte("bye"), 0o644); err != nil {
		t.Fatal(err)
	}
	i1 := &v1.Container{Name: "i1", Image: "img:1"}
	app := &v1.Container{Name: "app", Image: "img:1"}
	sidecar := v1.ContainerRestartPolicyAlways
	pod := testPod(func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{*i1, {Name: "side", Image: "img:1", RestartPolicy: &sidecar}}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "job", Image: "img:2"})
	})
	last := ctr("c1", app, "s1", 0, 2, exited(2, 2, 3), func(c *runtimeapi.ContainerStatus) {
		c.Annotations[annoTermMsgPath] = "/dev/termination-log"
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: msg}}
		c.Message = terminationMessage(c)
	})
	st := status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)},
		ctr("i", i1, "s1", 0, 1, exited(0, 1, 1)),
		ctr("c2", app, "s1", 1, 4, running(5)),
		last,
	)
	in := statusInput{pod: pod, status: st, runtimeName: "containerd", hostIP: "192.168.1.2", now: t0.Add(time.Hour),
		waiting: map[string]v1.ContainerStateWaiting{"job": {Reason: "ErrImagePull", Message: "no registry"}}}
	got := derivePodStatus(in)
	start := mt(0)
	want := v1.PodStatus{
		Phase:     v1.PodPending,
		HostIP:    "192.168.1.2",
		HostIPs:   []v1.HostIP{{IP: "192.168.1.2"}},
		PodIP:     "10.1.0.5",
		PodIPs:    []v1.PodIP{{IP: "10.1.0.5"}},
		StartTime: &start,
		QOSClass:  v1.PodQOSBestEffort,
		InitContainerStatuses: []v1.ContainerStatus{
			{Name: "i1", Image: "img:1", ImageID: "sha256:img:1", ContainerID: "containerd://i", Started: new(false), Ready: true,
				State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: mt(1), FinishedAt: mt(1), ContainerID: "containerd://i"}}},
			{Name: "side", Image: "img:1", Started: new(false), State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}},
		},
		ContainerStatuses: []v1.ContainerStatus{
			{Name: "app", Image: "img:1", ImageID: "sha256:img:1", ContainerID: "containerd://c2", Started: new(true), Ready: true, RestartCount: 1,
				State:                v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: mt(5)}},
				LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: "bye", StartedAt: mt(2), FinishedAt: mt(3), ContainerID: "containerd://c1"}}},
			{Name: "job", Image: "img:2", Started: new(false), State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "no registry"}}},
		},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(v1.PodStatus{}, "Conditions")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLogTail(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "0.log")
	log := "2026-01-01T00:00:00Z stdout F one\n2026-01-01T00:00:00Z stderr P tw\n2026-01-01T00:00:00Z stderr F o\n2026-01-01T00:00:00Z stdout F three\n"
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(p, 2, 100), "two\nthree\n"; got != want {
		t.Errorf("logTail = %q, want %q", got, want)
	}
	if got, want := logTail(p, 80, 7), "\nthree\n"; got != want {
		t.Errorf("logTail bytes = %q, want %q", got, want)
	}
	// Output that ends without a newline is a last partial line: kept as it is.
	q := filepath.Join(t.TempDir(), "1.log")
	if err := os.WriteFile(q, []byte("2026-01-01T00:00:00Z stdout P DONE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(q, 80, 2048), "DONE"; got != want {
		t.Errorf("logTail of a last partial line = %q, want %q", got, want)
	}
	st := &runtimeapi.ContainerStatus{ExitCode: 1, LogPath: p, Annotations: map[string]string{annoTermMsgPolicy: "FallbackToLogsOnError"}}
	if got := terminationMessage(st); got != "one\ntwo\nthree\n" {
		t.Errorf("fallback message = %q", got)
	}
	st.ExitCode = 0
	if got := terminationMessage(st); got != "" {
		t.Errorf("fallback on success = %q, want none", got)
	}
}

// A container's status names the image its container was made from, not
// the spec's after a change (node e2e "should not restart the init container
// if the image is updated during termination"); a container made before the
// annotation existed shows the runtime's image name.
func TestContainerStatusImage(t *testing.T) {
	t.Parallel()
	old := &v1.Container{Name: "app", Image: "img:1"}
	pod := testPod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "img:2" })
	tests := []struct {
		name string
		anno string
		want string
	}{
		{name: "annotated", anno: "img:1", want: "img:1"},
		{name: "from the runtime", want: "img:1"},
	}
	for _, tc := range tests {
		c := ctr("c1", old, "s1", 0, 1, exited(0, 1, 2))
		if tc.anno != "" {
			c.Annotations[annoImage] = tc.anno
		}
		st := derivePodStatus(statusInput{pod: pod, status: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}, c), runtimeName: "containerd", now: t0.Add(time.Hour)})
		if got := st.ContainerStatuses[0].Image; got != tc.want {
			t.Errorf("%s: image %q, want %q", tc.name, got, tc.want)
		}
	}
	st := derivePodStatus(statusInput{pod: pod, status: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}), runtimeName: "containerd", now: t0.Add(time.Hour)})
	if got := st.ContainerStatuses[0].Image; got != "img:2" {
		t.Errorf("no container yet: image %q, want the spec's img:2", got)
	}
}
