package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Container states for the cases below.
func waiting(reason string) v1.ContainerState {
	return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}
}

func terminated(reason string, code, signal int32) v1.ContainerState {
	return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: reason, ExitCode: code, Signal: signal}}
}

var running = v1.ContainerState{Running: &v1.ContainerStateRunning{}}

func cs(name string, st v1.ContainerState, ready bool) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: st, Ready: ready}
}

func conds(types ...v1.PodConditionType) []v1.PodCondition {
	var out []v1.PodCondition
	for _, t := range types {
		out = append(out, v1.PodCondition{Type: t, Status: v1.ConditionTrue})
	}
	return out
}

// TestSummarizePod pins STATUS, READY and RESTARTS to kubectl's rules for
// every reason a kubectl user meets.
func TestSummarizePod(t *testing.T) {
	t.Parallel()
	always := v1.ContainerRestartPolicyAlways
	started, notStarted := true, false
	one := v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}
	two := v1.PodSpec{Containers: []v1.Container{{Name: "app"}, {Name: "side"}}}
	withInit := v1.PodSpec{InitContainers: []v1.Container{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Containers: []v1.Container{{Name: "app"}}}
	withSidecar := v1.PodSpec{InitContainers: []v1.Container{{Name: "init"}, {Name: "proxy", RestartPolicy: &always}}, Containers: []v1.Container{{Name: "app"}}}
	finished := metav1.NewTime(time.Date(2026, 11, 24, 11, 0, 0, 0, time.UTC))
	later := metav1.NewTime(finished.Add(time.Minute))
	deleted := metav1.NewTime(later.Add(time.Minute))
	restarted := func(st v1.ContainerStatus, n int32, at metav1.Time) v1.ContainerStatus {
		st.RestartCount = n
		st.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, FinishedAt: at}}
		return st
	}
	for _, tc := range []struct {
		name string
		pod  v1.Pod
		want podSummary
	}{
		{"running", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{cs("app", running, true)}}},
			podSummary{Ready: 1, Total: 1, Status: "Running"}},
		{"running, not ready", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{cs("app", running, false)}}},
			podSummary{Ready: 0, Total: 1, Status: "Running"}},
		{"pending, no status yet", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodPending}},
			podSummary{Total: 1, Status: "Pending"}},
		{"no phase", v1.Pod{Spec: one}, podSummary{Total: 1, Status: "Unknown"}},
		{"ContainerCreating", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{cs("app", waiting("ContainerCreating"), false)}}},
			podSummary{Total: 1, Status: "ContainerCreating"}},
		{"ErrImagePull", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{cs("app", waiting("ErrImagePull"), false)}}},
			podSummary{Total: 1, Status: "ErrImagePull"}},
		{"ImagePullBackOff", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{cs("app", waiting("ImagePullBackOff"), false)}}},
			podSummary{Total: 1, Status: "ImagePullBackOff"}},
		{"CrashLoopBackOff with restarts", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodRunning,
			ContainerStatuses: []v1.ContainerStatus{restarted(cs("app", waiting("CrashLoopBackOff"), false), 5, finished)}}},
			podSummary{Total: 1, Status: "CrashLoopBackOff", Restarts: 5, LastRestart: finished.Time}},
		{"the first container's reason wins", v1.Pod{Spec: two, Status: v1.PodStatus{Phase: v1.PodPending,
			ContainerStatuses: []v1.ContainerStatus{cs("app", waiting("ImagePullBackOff"), false), cs("side", waiting("ContainerCreating"), false)}}},
			podSummary{Total: 2, Status: "ImagePullBackOff"}},
		{"Completed", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Completed", 0, 0), false)}}},
			podSummary{Total: 1, Status: "Completed"}},
		{"Error", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Error", 1, 0), false)}}},
			podSummary{Total: 1, Status: "Error"}},
		{"OOMKilled", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("OOMKilled", 137, 0), false)}}},
			podSummary{Total: 1, Status: "OOMKilled"}},
		{"exit code without reason", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("", 3, 0), false)}}},
			podSummary{Total: 1, Status: "ExitCode:3"}},
		{"signal without reason", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("", 0, 9), false)}}},
			podSummary{Total: 1, Status: "Signal:9"}},
		{"Completed while another runs, ready pod", v1.Pod{Spec: two, Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: conds(v1.PodReady),
			ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Completed", 0, 0), false), cs("side", running, true)}}},
			podSummary{Ready: 1, Total: 2, Status: "Running"}},
		{"Completed while another runs, pod not ready", v1.Pod{Spec: two, Status: v1.PodStatus{Phase: v1.PodRunning,
			ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Completed", 0, 0), false), cs("side", running, true)}}},
			podSummary{Ready: 1, Total: 2, Status: "NotReady"}},
		{"Completed but another failed", v1.Pod{Spec: two, Status: v1.PodStatus{Phase: v1.PodFailed,
			ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Completed", 0, 0), false), cs("side", terminated("Error", 2, 0), false)}}},
			podSummary{Total: 2, Status: "Error"}},
		{"Evicted", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted"}},
			podSummary{Total: 1, Status: "Evicted"}},
		{"Evicted, its container's termination shown", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted",
			ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Error", 137, 0), false)}}},
			podSummary{Total: 1, Status: "Error"}},
		{"SchedulingGated", v1.Pod{Spec: one, Status: v1.PodStatus{Phase: v1.PodPending,
			Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonSchedulingGated}}}},
			podSummary{Total: 1, Status: "SchedulingGated"}},
		{"Init:0/3", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{cs("a", running, false), cs("b", waiting("PodInitializing"), false), cs("c", waiting("PodInitializing"), false)},
			ContainerStatuses:     []v1.ContainerStatus{cs("app", waiting("PodInitializing"), false)}}},
			podSummary{Total: 1, Status: "Init:0/3"}},
		{"Init:1/3", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{cs("a", terminated("Completed", 0, 0), false), cs("b", running, false), cs("c", waiting("PodInitializing"), false)}}},
			podSummary{Total: 1, Status: "Init:1/3"}},
		{"Init:ErrImagePull", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{cs("a", waiting("ErrImagePull"), false)}}},
			podSummary{Total: 1, Status: "Init:ErrImagePull"}},
		{"Init:CrashLoopBackOff counts the init restarts alone", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{restarted(cs("a", waiting("CrashLoopBackOff"), false), 3, finished)},
			ContainerStatuses:     []v1.ContainerStatus{restarted(cs("app", waiting("PodInitializing"), false), 7, later)}}},
			podSummary{Total: 1, Status: "Init:CrashLoopBackOff", Restarts: 3, LastRestart: finished.Time}},
		{"Init:Error", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodFailed,
			InitContainerStatuses: []v1.ContainerStatus{cs("a", terminated("Error", 1, 0), false)}}},
			podSummary{Total: 1, Status: "Init:Error"}},
		{"Init:ExitCode", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodFailed,
			InitContainerStatuses: []v1.ContainerStatus{cs("a", terminated("", 4, 0), false)}}},
			podSummary{Total: 1, Status: "Init:ExitCode:4"}},
		{"Init:Signal", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodFailed,
			InitContainerStatuses: []v1.ContainerStatus{cs("a", terminated("", 143, 15), false)}}},
			podSummary{Total: 1, Status: "Init:Signal:15"}},
		{"PodInitializing", v1.Pod{Spec: withInit, Status: v1.PodStatus{Phase: v1.PodPending, Conditions: conds(v1.PodInitialized),
			InitContainerStatuses: []v1.ContainerStatus{cs("a", terminated("Completed", 0, 0), false), cs("b", terminated("Completed", 0, 0), false), cs("c", terminated("Completed", 0, 0), false)},
			ContainerStatuses:     []v1.ContainerStatus{cs("app", waiting("PodInitializing"), false)}}},
			podSummary{Total: 1, Status: "PodInitializing"}},
		{"sidecar started and ready: counted, the pod runs", v1.Pod{Spec: withSidecar, Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: conds(v1.PodInitialized, v1.PodReady),
			InitContainerStatuses: []v1.ContainerStatus{restarted(cs("init", terminated("Completed", 0, 0), false), 2, later),
				func() v1.ContainerStatus {
					st := restarted(cs("proxy", running, true), 1, finished)
					st.Started = &started
					return st
				}()},
			ContainerStatuses: []v1.ContainerStatus{cs("app", running, true)}}},
			podSummary{Ready: 2, Total: 2, Status: "Running", Restarts: 1, LastRestart: finished.Time}},
		{"sidecar not started yet holds initialization", v1.Pod{Spec: withSidecar, Status: v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{cs("init", terminated("Completed", 0, 0), false),
				func() v1.ContainerStatus {
					st := cs("proxy", running, false)
					st.Started = &notStarted
					return st
				}()},
			ContainerStatuses: []v1.ContainerStatus{cs("app", waiting("PodInitializing"), false)}}},
			podSummary{Total: 2, Status: "Init:1/2"}},
		{"sidecar crashing", v1.Pod{Spec: withSidecar, Status: v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{cs("init", terminated("Completed", 0, 0), false), restarted(cs("proxy", waiting("CrashLoopBackOff"), false), 4, later)}}},
			podSummary{Total: 2, Status: "Init:CrashLoopBackOff", Restarts: 4, LastRestart: later.Time}},
		{"Terminating", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted}, Spec: one,
			Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{cs("app", running, true)}}},
			podSummary{Ready: 1, Total: 1, Status: "Terminating"}},
		{"Terminating while pulling", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted}, Spec: one,
			Status: v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{cs("app", waiting("ImagePullBackOff"), false)}}},
			podSummary{Total: 1, Status: "Terminating"}},
		{"deleted after it finished: not Terminating", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted}, Spec: one,
			Status: v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{cs("app", terminated("Completed", 0, 0), false)}}},
			podSummary{Total: 1, Status: "Completed"}},
		{"deleted on a lost node", v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted}, Spec: one,
			Status: v1.PodStatus{Phase: v1.PodRunning, Reason: "NodeLost"}},
			podSummary{Total: 1, Status: "Unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, summarizePod(&tc.pod)); diff != "" {
				t.Errorf("summarizePod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestartsText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    podSummary
		want string
	}{
		{"none", podSummary{}, "0"},
		{"with time", podSummary{Restarts: 3, LastRestart: getNow.Add(-95 * time.Second)}, "3 (95s ago)"},
		{"no time known", podSummary{Restarts: 2}, "2"},
		{"no restart, a time", podSummary{LastRestart: getNow.Add(-time.Hour)}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.s.restartsText(getNow); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
