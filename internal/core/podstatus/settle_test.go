package podstatus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

func TestDeletedPhase(t *testing.T) {
	t.Parallel()
	term := func(code int32) v1.ContainerStatus {
		return v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	waiting := v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}
	for _, tc := range []struct {
		name string
		ctrs []v1.ContainerStatus
		want v1.PodPhase
	}{
		{"no containers", nil, v1.PodRunning},
		{"all exited 0", []v1.ContainerStatus{term(0), term(0)}, v1.PodSucceeded},
		{"one exited 137", []v1.ContainerStatus{term(0), term(137)}, v1.PodFailed},
		{"one never started", []v1.ContainerStatus{term(0), waiting}, v1.PodRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := deletedPhase(v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: tc.ctrs}); got != tc.want {
				t.Errorf("deletedPhase = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDeletedStatus(t *testing.T) {
	t.Parallel()
	unknown := &v1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown",
		Message: "The container could not be located when the pod was terminated"}
	waiting := func(name string) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	}
	exited := func(name string, code int32) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	lost := func(name string) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, State: v1.ContainerState{Terminated: unknown}}
	}
	pod := func(inits ...string) *v1.Pod {
		p := testPod()
		for _, n := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n})
		}
		return p
	}
	static := pod()
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		in, want v1.PodStatus
	}{
		{"succeeded stays", pod(),
			v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}},
			v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}}},
		{"killed fails", pod(),
			v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{exited("c", 137)}},
			v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{exited("c", 137)}}},
		{"never started", pod(),
			v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{waiting("c")}},
			v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{lost("c")}}},
		{"no status at all", pod(),
			v1.PodStatus{Phase: v1.PodPending},
			v1.PodStatus{Phase: v1.PodFailed}},
		{"init containers not done: containers stay waiting, the first init one fails", pod("i1", "i2"),
			v1.PodStatus{Phase: v1.PodPending, InitContainerStatuses: []v1.ContainerStatus{waiting("i1"), waiting("i2")},
				ContainerStatuses: []v1.ContainerStatus{waiting("c")}},
			v1.PodStatus{Phase: v1.PodFailed, InitContainerStatuses: []v1.ContainerStatus{lost("i1"), waiting("i2")},
				ContainerStatuses: []v1.ContainerStatus{waiting("c")}}},
		{"init containers done", pod("i1", "i2"),
			v1.PodStatus{Phase: v1.PodPending, InitContainerStatuses: []v1.ContainerStatus{exited("i1", 0), exited("i2", 0)},
				ContainerStatuses: []v1.ContainerStatus{waiting("c")}},
			v1.PodStatus{Phase: v1.PodFailed, InitContainerStatuses: []v1.ContainerStatus{exited("i1", 0), exited("i2", 0)},
				ContainerStatuses: []v1.ContainerStatus{lost("c")}}},
		{"static pod keeps its phase", static,
			v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{waiting("c")}},
			v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{lost("c")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := *tc.in.DeepCopy()
			if diff := cmp.Diff(tc.want, deleted(tc.pod, in)); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.in, in); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestWithFinal(t *testing.T) {
	t.Parallel()
	ready := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse}
	oldTarget := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionFalse}
	ctrs := []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137}}}}
	target := nodeapi.DisruptionTarget("evicted")
	for _, tc := range []struct {
		name        string
		st, final   v1.PodStatus
		want        v1.PodStatus
		sharedConds bool
	}{
		{"phase, reason, message and a new condition over the runtime's",
			v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{ready}, ContainerStatuses: ctrs},
			v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "low on memory", Conditions: []v1.PodCondition{target}},
			v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "low on memory", Conditions: []v1.PodCondition{ready, target}, ContainerStatuses: ctrs}, false},
		{"a condition of the same type replaced",
			v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{oldTarget, ready}},
			v1.PodStatus{Conditions: []v1.PodCondition{target}},
			v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{target, ready}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := append([]v1.PodCondition(nil), tc.st.Conditions...)
			if diff := cmp.Diff(tc.want, withFinal(tc.st, tc.final)); diff != "" {
				t.Errorf("withFinal (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.st.Conditions); diff != "" {
				t.Errorf("input conditions modified (-want +got):\n%s", diff)
			}
		})
	}
}
