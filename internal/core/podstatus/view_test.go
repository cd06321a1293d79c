package podstatus

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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
		status    *Runtime
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
			in := Input{Pod: testPod(tc.mut...), Runtime: tc.status, Waiting: tc.waiting, Node: Node{RuntimeName: "containerd"}}
			if tc.notReady {
				in.Node.Probes = notReady{}
			}
			got := view(in, t0.Add(time.Hour))
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
	i1 := &v1.Container{Name: "i1", Image: "img:1"}
	app := &v1.Container{Name: "app", Image: "img:1"}
	sidecar := v1.ContainerRestartPolicyAlways
	pod := testPod(func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{*i1, {Name: "side", Image: "img:1", RestartPolicy: &sidecar}}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "job", Image: "img:2"})
	})
	last := ctr("c1", app, "s1", 0, 2, exited(2, 2, 3), func(c *runtimeapi.ContainerStatus) { c.Message = "bye" })
	st := status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)},
		ctr("i", i1, "s1", 0, 1, exited(0, 1, 1)),
		ctr("c2", app, "s1", 1, 4, running(5)),
		last,
	)
	in := Input{Pod: pod, Runtime: st, Node: Node{RuntimeName: "containerd", HostIP: "192.168.1.2"},
		Waiting: map[string]v1.ContainerStateWaiting{"job": {Reason: "ErrImagePull", Message: "no registry"}}}
	got := view(in, t0.Add(time.Hour))
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
			c.Annotations[AnnotationImage] = tc.anno
		}
		st := view(Input{Pod: pod, Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}, c), Node: Node{RuntimeName: "containerd"}}, t0.Add(time.Hour))
		if got := st.ContainerStatuses[0].Image; got != tc.want {
			t.Errorf("%s: image %q, want %q", tc.name, got, tc.want)
		}
	}
	st := view(Input{Pod: pod, Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}), Node: Node{RuntimeName: "containerd"}}, t0.Add(time.Hour))
	if got := st.ContainerStatuses[0].Image; got != "img:2" {
		t.Errorf("no container yet: image %q, want the spec's img:2", got)
	}
}

// The ephemeral statuses: the kubelet's default waiting reason (the pod has
// init containers here), never ready, no started field, and out of the
// phase and conditions.
func TestDerivePodStatusEphemeral(t *testing.T) {
	t.Parallel()
	app := &v1.Container{Name: "app", Image: "img:1"}
	i1 := &v1.Container{Name: "i1", Image: "img:1"}
	dbg := &v1.Container{Name: "dbg", Image: "img:2"}
	pod := testPod(func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{*i1} }, debugger("dbg", ""), debugger("later", ""))
	st := status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)},
		ctr("i", i1, "s1", 0, 1, exited(0, 1, 1)),
		ctr("c1", app, "s1", 0, 2, running(2)),
		ctr("e1", dbg, "s1", 0, 3, exited(1, 3, 4)),
	)
	got := view(Input{Pod: pod, Runtime: st, Node: Node{RuntimeName: "containerd"}}, t0.Add(time.Hour))
	want := []v1.ContainerStatus{
		{Name: "dbg", Image: "img:2", ImageID: "sha256:img:2", ContainerID: "containerd://e1",
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: mt(3), FinishedAt: mt(4), ContainerID: "containerd://e1"}}},
		{Name: "later", Image: "img:2", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}},
	}
	if diff := cmp.Diff(want, got.EphemeralContainerStatuses); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", got.Phase)
	}
	for _, c := range got.Conditions {
		if c.Status != v1.ConditionTrue {
			t.Errorf("condition %s %s: %s", c.Type, c.Status, c.Message)
		}
	}
}

func TestRecursiveReadOnly(t *testing.T) {
	t.Parallel()
	mode := func(m v1.RecursiveReadOnlyMode) *v1.RecursiveReadOnlyMode { return &m }
	bidi := v1.MountPropagationBidirectional
	none := v1.MountPropagationNone
	for _, tc := range []struct {
		name      string
		vm        v1.VolumeMount
		supported bool
		want      bool
		wantErr   string
	}{
		{"unset", v1.VolumeMount{Name: "v", ReadOnly: true}, true, false, ""},
		{"disabled", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyDisabled)}, true, false, ""},
		{"enabled, supported", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled), MountPropagation: &none}, true, true, ""},
		{"enabled, unsupported", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, false, false,
			`volume "v" requested recursive read-only mode, but it is not supported by the runtime`},
		{"if possible, supported", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, true, true, ""},
		{"if possible, unsupported", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, false, false, ""},
		{"not read-only", v1.VolumeMount{Name: "v", RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, true, false,
			`volume "v" requested recursive read-only mode, but it is not read-only`},
		{"propagation", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible), MountPropagation: &bidi}, true, false,
			`volume "v" requested recursive read-only mode, but it is not compatible with propagation "Bidirectional"`},
		{"unknown mode", v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode("Sometimes")}, true, false,
			`unknown recursive read-only mode "Sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := RecursiveReadOnly(tc.vm, tc.supported)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("recursiveReadOnly = %v, %q; want %v, %q", got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

func TestVolumeMountStatuses(t *testing.T) {
	t.Parallel()
	mode := func(m v1.RecursiveReadOnlyMode) *v1.RecursiveReadOnlyMode { return &m }
	c := &v1.Container{Name: "test", VolumeMounts: []v1.VolumeMount{
		{Name: "mnt", MountPath: "/mnt-rro", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)},
		{Name: "mnt", MountPath: "/mnt-rro-if-possible", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)},
		{Name: "mnt", MountPath: "/mnt-ro", ReadOnly: true},
		{Name: "mnt", MountPath: "/mnt-rw"},
	}}
	st := func(path string, ro bool, m *v1.RecursiveReadOnlyMode) v1.VolumeMountStatus {
		return v1.VolumeMountStatus{Name: "mnt", MountPath: path, ReadOnly: ro, RecursiveReadOnly: m}
	}
	enabled, disabled := mode(v1.RecursiveReadOnlyEnabled), mode(v1.RecursiveReadOnlyDisabled)
	want := []v1.VolumeMountStatus{st("/mnt-rro", true, enabled), st("/mnt-rro-if-possible", true, enabled), st("/mnt-ro", true, disabled), st("/mnt-rw", false, nil)}
	if diff := cmp.Diff(want, volumeMountStatuses(c, true)); diff != "" {
		t.Errorf("supported (-want +got):\n%s", diff)
	}
	want = []v1.VolumeMountStatus{st("/mnt-rro", true, disabled), st("/mnt-rro-if-possible", true, disabled), st("/mnt-ro", true, disabled), st("/mnt-rw", false, nil)}
	if diff := cmp.Diff(want, volumeMountStatuses(c, false)); diff != "" {
		t.Errorf("unsupported (-want +got):\n%s", diff)
	}
	if got := volumeMountStatuses(&v1.Container{Name: "none"}, true); got != nil {
		t.Errorf("no mounts: %v", got)
	}
}
