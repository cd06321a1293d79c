package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestDeriveHoldsAStopWhileSyncing: while a sync is in flight (or not yet
// listed after), a container Previous shows running that has stopped since
// shows as Previous has it, so a sync that restarts it never shows it
// terminated; once the sync is listed the stop shows. A container Previous
// does not show running, or shows under another ID, is not held.
func TestDeriveHoldsAStopWhileSyncing(t *testing.T) {
	t.Parallel()
	s := time.Second
	pod := testPod(func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever })
	app := &pod.Spec.Containers[0]
	node := Node{RuntimeName: "containerd"}
	before := status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}, ctr("c1", app, "s1", 0, s, running(s)))
	prev, _ := Derive(Input{Pod: pod, Runtime: before, Node: node}, t0.Add(10*s))
	stopped := status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}, ctr("c1", app, "s1", 0, s, exited(0, s, 20*s)))
	for _, tc := range []struct {
		name    string
		syncing bool
		prev    *v1.PodStatus
		want    string // the container's state
		phase   v1.PodPhase
	}{
		{"syncing: held running", true, &prev, "running", v1.PodRunning},
		{"listed after the sync: terminated", false, &prev, "terminated", v1.PodSucceeded},
		{"syncing, nothing shown: terminated", true, nil, "terminated", v1.PodSucceeded},
		{"syncing, another container shown: terminated", true, withContainerID(prev, "containerd://c0"), "terminated", v1.PodSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := view(Input{Pod: pod, Runtime: stopped, Node: node, Previous: tc.prev, Syncing: tc.syncing}, t0.Add(30*s))
			cs := st.ContainerStatuses[0]
			got := "waiting"
			switch {
			case cs.State.Running != nil:
				got = "running"
			case cs.State.Terminated != nil:
				got = "terminated"
			}
			if got != tc.want || st.Phase != tc.phase {
				t.Errorf("container %s, phase %s; want %s, %s", got, st.Phase, tc.want, tc.phase)
			}
		})
	}
}

func withContainerID(st v1.PodStatus, id string) *v1.PodStatus {
	c := *st.DeepCopy()
	c.ContainerStatuses[0].ContainerID = id
	return &c
}

// TestDeriveInitContainerRemovedAfterInit: an init container gone from the
// runtime after a regular container was created reads exited 0 with the
// kubelet's message, and the pod stays initialized; before any regular
// container exists it waits, as one yet to run.
func TestDeriveInitContainerRemovedAfterInit(t *testing.T) {
	t.Parallel()
	s := time.Second
	pod := testPod(func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "img:1"}} })
	app := &pod.Spec.Containers[0]
	node := Node{RuntimeName: "containerd"}
	st := view(Input{Pod: pod, Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}, ctr("c1", app, "s1", 0, s, running(s))), Node: node}, t0.Add(10*s))
	init := st.InitContainerStatuses[0]
	if term := init.State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" || term.Message != messageInitStatusLost || !init.Ready {
		t.Errorf("removed init container: %+v, want exited 0 Completed with the kubelet's message, ready", init)
	}
	if c := condStatus(st, v1.PodInitialized); c != v1.ConditionTrue || st.Phase != v1.PodRunning {
		t.Errorf("Initialized %s, phase %s; want True, Running", c, st.Phase)
	}
	st = view(Input{Pod: pod, Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}), Node: node}, t0.Add(10*s))
	if w := st.InitContainerStatuses[0].State.Waiting; w == nil || condStatus(st, v1.PodInitialized) != v1.ConditionFalse {
		t.Errorf("before it ran: %+v, want waiting and not initialized", st.InitContainerStatuses[0].State)
	}
}

func condStatus(st v1.PodStatus, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
