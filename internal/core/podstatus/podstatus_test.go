package podstatus

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// TestDerive: the rules over the runtime's view, alone and together: a
// kill's final status, a rejection, a deletion, the phase held while the
// pod runs, the IPs kept, the conditions' transition times.
func TestDerive(t *testing.T) {
	t.Parallel()
	app := &v1.Container{Name: "app", Image: "img:1"}
	never := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever }
	stopped := func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY }
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	gone := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0, stopped)}
	runningApp := status(ready, ctr("c1", app, "s1", 0, 1, running(1)))
	exited0 := status(ready, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2)))
	exited0Stopped := status(gone, ctr("c1", app, "s1", 0, 1, exited(0, 1, 2)))
	exited137Stopped := status(gone, ctr("c1", app, "s1", 0, 1, exited(137, 1, 2)))
	prevRunning := &v1.PodStatus{Phase: v1.PodRunning, Reason: "R", Message: "m", PodIP: "10.1.0.9", PodIPs: []v1.PodIP{{IP: "10.1.0.9"}}}
	evicted := &v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "low on memory",
		Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"}}}
	rejected := &v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu", Message: "no cpu"}
	preempted := &v1.PodStatus{Phase: v1.PodFailed, Reason: "Preempting", Message: "Preempted in order to admit critical pod",
		Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"}}}
	deadline := &v1.PodStatus{Phase: v1.PodFailed, Reason: "DeadlineExceeded", Message: "past its deadline"}
	static := func(p *v1.Pod) { p.Annotations = map[string]string{qos.ConfigSourceAnnotation: "file"} }
	neverStarted := status(gone)
	imagePull := map[string]v1.ContainerStateWaiting{"app": {Reason: "ErrImagePull"}}
	type want struct {
		phase           v1.PodPhase
		reason, message string
		done            bool
		podIP           string
		app             string // the app container's state
		conds           int    // number of conditions
	}
	for _, tc := range []struct {
		name string
		mut  []func(*v1.Pod)
		in   Input
		want want
	}{
		{name: "running", in: Input{Runtime: runningApp},
			want: want{phase: v1.PodRunning, podIP: "10.1.0.5", app: "running", conds: 5}},
		{name: "finished, sandbox still ready: phase held from the previous", mut: []func(*v1.Pod){never}, in: Input{Runtime: exited0, Previous: prevRunning},
			want: want{phase: v1.PodRunning, reason: "R", message: "m", done: true, podIP: "10.1.0.5", app: "terminated:0", conds: 5}},
		{name: "finished, sandbox still ready, nothing shown before: Pending", mut: []func(*v1.Pod){never}, in: Input{Runtime: exited0},
			want: want{phase: v1.PodPending, done: true, podIP: "10.1.0.5", app: "terminated:0", conds: 5}},
		{name: "finished, previous terminal: Pending while it runs", mut: []func(*v1.Pod){never}, in: Input{Runtime: exited0, Previous: &v1.PodStatus{Phase: v1.PodSucceeded}},
			want: want{phase: v1.PodPending, done: true, podIP: "10.1.0.5", app: "terminated:0", conds: 5}},
		{name: "finished and stopped: terminal, IPs kept", mut: []func(*v1.Pod){never}, in: Input{Runtime: exited0Stopped, Previous: prevRunning},
			want: want{phase: v1.PodSucceeded, done: true, podIP: "10.1.0.9", app: "terminated:0", conds: 5}},
		{name: "no IPs before: none kept", mut: []func(*v1.Pod){never}, in: Input{Runtime: exited0Stopped},
			want: want{phase: v1.PodSucceeded, done: true, app: "terminated:0", conds: 5}},
		{name: "final while running: held", in: Input{Runtime: runningApp, Final: evicted, Previous: prevRunning},
			want: want{phase: v1.PodRunning, reason: "R", message: "m", done: true, podIP: "10.1.0.5", app: "running", conds: 6}},
		{name: "final once stopped: its phase, reason, message and condition", in: Input{Runtime: exited137Stopped, Final: evicted, Previous: prevRunning},
			want: want{phase: v1.PodFailed, reason: "Evicted", message: "low on memory", done: true, podIP: "10.1.0.9", app: "terminated:137", conds: 6}},
		// The kubelet derives a killed pod's terminal phase from its
		// containers (generateAPIPodStatus, getPhase with podIsTerminal):
		// upstream's CriticalPod specs expect a preempted pod whose
		// containers exited 0 to end Succeeded, DisruptionTarget kept.
		{name: "preempted, all exited 0: Succeeded, the kill's reason gone, its condition kept", in: Input{Runtime: exited0Stopped, Final: preempted, Killed: true, Previous: prevRunning},
			want: want{phase: v1.PodSucceeded, done: true, podIP: "10.1.0.9", app: "terminated:0", conds: 6}},
		{name: "preempted, one exited 137: Failed with the kill's reason", in: Input{Runtime: exited137Stopped, Final: preempted, Killed: true},
			want: want{phase: v1.PodFailed, reason: "Preempting", message: "Preempted in order to admit critical pod", done: true, app: "terminated:137", conds: 6}},
		{name: "evicted, all exited 0: Succeeded too", in: Input{Runtime: exited0Stopped, Final: evicted, Killed: true},
			want: want{phase: v1.PodSucceeded, done: true, app: "terminated:0", conds: 6}},
		{name: "preempted, exited 0 but still running: held", in: Input{Runtime: exited0, Final: preempted, Killed: true, Previous: prevRunning},
			want: want{phase: v1.PodRunning, reason: "R", message: "m", done: true, podIP: "10.1.0.5", app: "terminated:0", conds: 6}},
		{name: "preempted static pod, all exited 0: stays Failed (the kubelet gives static pods no terminal phase of their own)", mut: []func(*v1.Pod){static}, in: Input{Runtime: exited0Stopped, Final: preempted, Killed: true},
			want: want{phase: v1.PodFailed, reason: "Preempting", message: "Preempted in order to admit critical pod", done: true, app: "terminated:0", conds: 6}},
		{name: "preempted before its container started: Failed", in: Input{Runtime: neverStarted, Waiting: imagePull, Final: preempted, Killed: true},
			want: want{phase: v1.PodFailed, reason: "Preempting", message: "Preempted in order to admit critical pod", done: true, app: "waiting:ErrImagePull", conds: 6}},
		{name: "past its deadline, all exited 0: Failed (not a kill)", in: Input{Runtime: exited0Stopped, Final: deadline},
			want: want{phase: v1.PodFailed, reason: "DeadlineExceeded", message: "past its deadline", done: true, app: "terminated:0", conds: 5}},
		{name: "final wins over a deletion", in: Input{Runtime: exited137Stopped, Final: &v1.PodStatus{Phase: v1.PodSucceeded}, Deleted: true, Settled: true},
			want: want{phase: v1.PodSucceeded, done: true, app: "terminated:137", conds: 5}},
		{name: "rejected: the rejection alone", in: Input{Final: rejected, Rejected: true, Waiting: imagePull},
			want: want{phase: v1.PodFailed, reason: "OutOfcpu", message: "no cpu", done: true, app: "none"}},
		{name: "rejected but adopted running: held Pending", in: Input{Runtime: runningApp, Final: rejected, Rejected: true},
			want: want{phase: v1.PodPending, done: true, app: "none"}},
		{name: "deleted, not listed since the kill: phase from finished containers only", in: Input{Runtime: status(gone), Waiting: imagePull, Deleted: true},
			want: want{phase: v1.PodPending, app: "waiting:ErrImagePull", conds: 5}},
		{name: "deleted and listed since: what never started failed", in: Input{Runtime: status(gone), Waiting: imagePull, Deleted: true, Settled: true},
			want: want{phase: v1.PodFailed, done: true, app: "terminated:137", conds: 5}},
		{name: "deleted, all exited 0, not listed since: Succeeded", in: Input{Runtime: exited0Stopped, Deleted: true},
			want: want{phase: v1.PodSucceeded, done: true, app: "terminated:0", conds: 5}},
		{name: "deleted but still running: held", mut: []func(*v1.Pod){never}, in: Input{Runtime: exited0, Deleted: true, Settled: true, Previous: prevRunning},
			want: want{phase: v1.PodRunning, reason: "R", message: "m", done: true, podIP: "10.1.0.5", app: "terminated:0", conds: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := tc.in
			in.Pod = testPod(tc.mut...)
			in.Node = Node{RuntimeName: "containerd"}
			st, done := Derive(in, t0.Add(time.Hour))
			got := want{phase: st.Phase, reason: st.Reason, message: st.Message, done: done, podIP: st.PodIP, app: "none", conds: len(st.Conditions)}
			if len(st.ContainerStatuses) > 0 {
				got.app = stateOf(st.ContainerStatuses[0].State)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func stateOf(s v1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return "terminated:" + strconv.Itoa(int(s.Terminated.ExitCode))
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	}
	return ""
}

// TestDeriveTransitionTimes: a condition keeps the transition time of the
// previous status while its status stays; the first status goes on from the
// conditions the pod came with (the scheduler's, an earlier run's); a
// rejection's conditions are its own.
func TestDeriveTransitionTimes(t *testing.T) {
	t.Parallel()
	app := &v1.Container{Name: "app", Image: "img:1"}
	t1, t2, t3 := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	came := metav1.NewTime(t0)
	pod := testPod(func(p *v1.Pod) {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: came}}
	})
	node := Node{RuntimeName: "containerd"}
	times := func(st v1.PodStatus) map[v1.PodConditionType]time.Time {
		out := map[v1.PodConditionType]time.Time{}
		for _, c := range st.Conditions {
			out[c.Type] = c.LastTransitionTime.Time
		}
		return out
	}
	first, _ := Derive(Input{Pod: pod, Node: node}, t1)
	second, _ := Derive(Input{Pod: pod, Node: node, Previous: &first, Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)},
		ctr("c1", app, "s1", 0, 1, running(1)))}, t2)
	third, _ := Derive(Input{Pod: pod, Node: node, Previous: &second, Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)},
		ctr("c1", app, "s1", 0, 1, running(1)))}, t3)
	want := map[v1.PodConditionType]time.Time{
		v1.PodScheduled: t0, v1.PodInitialized: t1, // unchanged since the pod came, since the first status
		v1.PodReadyToStartContainers: t2, v1.ContainersReady: t2, v1.PodReady: t2, // became true at t2
	}
	if diff := cmp.Diff(want, times(third)); diff != "" {
		t.Errorf("transition times (-want +got):\n%s", diff)
	}
	rej, _ := Derive(Input{Pod: pod, Node: node, Previous: &third, Rejected: true, Final: &v1.PodStatus{Phase: v1.PodFailed}}, t3)
	if rej.Conditions != nil {
		t.Errorf("rejected pod's conditions %v, want the rejection's (none)", rej.Conditions)
	}
}
