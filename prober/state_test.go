package prober

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

const (
	S = Success
	F = Failure
)

// runSequence feeds results to observe and returns what gets reported at
// each step ("-" for nothing) and whether the probe is on hold at the end.
func runSequence(pt ProbeType, th thresholds, in []Result) ([]string, bool) {
	var st state
	out := make([]string, len(in))
	for i, r := range in {
		if st.OnHold {
			out[i] = "hold"
			continue
		}
		var rep Result
		var ok bool
		st, rep, ok = observe(pt, th, st, r)
		out[i] = "-"
		if ok {
			out[i] = rep.String()
		}
	}
	return out, st.OnHold
}

func TestObserve(t *testing.T) {
	t.Parallel()
	def := thresholds{Success: 1, Failure: 3}
	tests := []struct {
		name     string
		pt       ProbeType
		th       thresholds
		in       []Result
		want     []string
		wantHold bool
	}{
		{"readiness success reported at once", Readiness, def, []Result{S, S}, []string{"Success", "Success"}, false},
		{"readiness failures below threshold not reported", Readiness, def, []Result{F, F, S}, []string{"-", "-", "Success"}, false},
		{"readiness third failure reported, keeps probing", Readiness, def, []Result{F, F, F, F, S}, []string{"-", "-", "Failure", "Failure", "Success"}, false},
		{"readiness success threshold 3", Readiness, thresholds{3, 3}, []Result{S, S, F, S, S, S}, []string{"-", "-", "-", "-", "-", "Success"}, false},
		{"interleaved failures reset the run", Liveness, def, []Result{F, F, S, F, F, S}, []string{"-", "-", "Success", "-", "-", "Success"}, false},
		{"liveness failure threshold then on hold", Liveness, def, []Result{F, F, F, S, F}, []string{"-", "-", "Failure", "hold", "hold"}, true},
		{"liveness failure threshold 1", Liveness, thresholds{1, 1}, []Result{S, F, S}, []string{"Success", "Failure", "hold"}, true},
		{"startup success then on hold", Startup, def, []Result{F, S, F}, []string{"-", "Success", "hold"}, true},
		{"startup failure then on hold", Startup, def, []Result{F, F, F, S}, []string{"-", "-", "Failure", "hold"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, hold := runSequence(tc.pt, tc.th, tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
			if hold != tc.wantHold {
				t.Errorf("on hold = %v, want %v", hold, tc.wantHold)
			}
		})
	}
}

func TestDecideTick(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	agentStart := now.Add(-time.Minute)
	running := func(id string, since time.Duration, started, ready bool) *v1.ContainerStatus {
		return &v1.ContainerStatus{
			Name: "app", ContainerID: id, Ready: ready, Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-since))}},
		}
	}
	exited := func(id string, code int32) *v1.ContainerStatus {
		return &v1.ContainerStatus{Name: "app", ContainerID: id,
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	in := func(c *v1.ContainerStatus, mod ...func(*tickInput)) tickInput {
		ti := tickInput{Now: now, AgentStart: agentStart, KeepStatusOnRestart: true, HaveStatus: true,
			Phase: v1.PodRunning, Container: c, RestartPolicy: v1.RestartPolicyAlways}
		for _, f := range mod {
			f(&ti)
		}
		return ti
	}
	tests := []struct {
		name      string
		pt        ProbeType
		delay     int32
		st        state
		in        tickInput
		wantState state
		want      tick
	}{
		{name: "no status yet", pt: Liveness, in: tickInput{Now: now}, want: tick{}},
		{name: "pod succeeded stops", pt: Readiness, in: in(nil, func(ti *tickInput) { ti.Phase = v1.PodSucceeded }), want: tick{Stop: true}},
		{name: "no container ID waits", pt: Readiness, in: in(running("", 0, true, false)), want: tick{}},
		{name: "new container: readiness starts failed", pt: Readiness, in: in(running("c1", 0, true, false)),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}, Probe: true}},
		{name: "new container: liveness starts successful", pt: Liveness, in: in(running("c1", 0, true, false)),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Success}, Probe: true}},
		{name: "created, not started: liveness keeps its initial success", pt: Liveness,
			in:        in(&v1.ContainerStatus{Name: "app", ContainerID: "c1", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Success}}},
		{name: "created, not started: readiness fails", pt: Readiness,
			in:        in(&v1.ContainerStatus{Name: "app", ContainerID: "c1", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure, Failure}}},
		{name: "new container: startup starts unknown", pt: Startup, in: in(running("c1", 0, false, false)),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Unknown}, Probe: true}},
		{name: "restarted container: old result dropped, hold lifted", pt: Liveness,
			st: state{ContainerID: "c1", OnHold: true, LastResult: Failure}, in: in(running("c2", 0, true, false)),
			wantState: state{ContainerID: "c2"}, want: tick{Remove: "c1", Set: []Result{Success}, Probe: true}},
		{name: "on hold: no probe", pt: Liveness, st: state{ContainerID: "c1", OnHold: true},
			in: in(running("c1", time.Minute, true, true)), wantState: state{ContainerID: "c1", OnHold: true}, want: tick{}},
		{name: "container exited, will restart", pt: Readiness, st: state{ContainerID: "c1"}, in: in(exited("c1", 1)),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}}},
		{name: "container exited, restartPolicy Never: stop", pt: Readiness, st: state{ContainerID: "c1"},
			in:        in(exited("c1", 1), func(ti *tickInput) { ti.RestartPolicy = v1.RestartPolicyNever }),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}, Stop: true}},
		{name: "sidecar exited under a Never pod: restarts, keeps probing", pt: Readiness, st: state{ContainerID: "c1"},
			in: in(exited("c1", 1), func(ti *tickInput) {
				ti.RestartPolicy, ti.Role = v1.RestartPolicyNever, nodeapi.InitContainer
				ti.Spec = &v1.Container{Name: "app", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}
			}),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}}},
		{name: "own restartPolicy Never under an Always pod: stop", pt: Readiness, st: state{ContainerID: "c1"},
			in: in(exited("c1", 1), func(ti *tickInput) {
				ti.Spec = &v1.Container{Name: "app", RestartPolicy: ptr.To(v1.ContainerRestartPolicyNever)}
			}),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}, Stop: true}},
		{name: "container exited 0, OnFailure: stop", pt: Liveness, st: state{ContainerID: "c1"},
			in:        in(exited("c1", 0), func(ti *tickInput) { ti.RestartPolicy = v1.RestartPolicyOnFailure }),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}, Stop: true}},
		{name: "deleting: liveness reports success and stops", pt: Liveness, st: state{ContainerID: "c1"},
			in:        in(running("c1", time.Minute, true, true), func(ti *tickInput) { ti.Deleting = true }),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Success}, Stop: true}},
		{name: "deleting: readiness keeps probing", pt: Readiness, st: state{ContainerID: "c1"},
			in:        in(running("c1", time.Minute, true, true), func(ti *tickInput) { ti.Deleting = true }),
			wantState: state{ContainerID: "c1"}, want: tick{Probe: true}},
		{name: "inside initial delay", pt: Liveness, delay: 30, st: state{ContainerID: "c1"},
			in: in(running("c1", 29900*time.Millisecond, true, true)), wantState: state{ContainerID: "c1"}, want: tick{}},
		{name: "initial delay over", pt: Liveness, delay: 30, st: state{ContainerID: "c1"},
			in: in(running("c1", 30*time.Second, true, true)), wantState: state{ContainerID: "c1"}, want: tick{Probe: true}},
		{name: "not started: liveness waits for startup", pt: Liveness, st: state{ContainerID: "c1"},
			in: in(running("c1", time.Minute, false, false)), wantState: state{ContainerID: "c1"}, want: tick{}},
		{name: "startup cache success opens the gate", pt: Readiness, st: state{ContainerID: "c1"},
			in:        in(running("c1", time.Minute, false, false), func(ti *tickInput) { ti.StartupSucceeded = true }),
			wantState: state{ContainerID: "c1"}, want: tick{Probe: true}},
		{name: "started: startup idles", pt: Startup, st: state{ContainerID: "c1"},
			in: in(running("c1", time.Minute, true, false)), wantState: state{ContainerID: "c1"}, want: tick{}},
		{name: "pre-existing container: readiness publishes nothing before its first result", pt: Readiness,
			in: in(running("c1", 2*time.Minute, true, true)), wantState: state{ContainerID: "c1"}, want: tick{Probe: true}},
		{name: "pre-existing started container: startup publishes nothing and idles", pt: Startup,
			in: in(running("c1", 2*time.Minute, true, true)), wantState: state{ContainerID: "c1"}, want: tick{}},
		{name: "pre-existing container not started: startup probes without an initial value", pt: Startup,
			in: in(running("c1", 2*time.Minute, false, false)), wantState: state{ContainerID: "c1"}, want: tick{Probe: true}},
		{name: "pre-existing container: liveness starts successful", pt: Liveness,
			in: in(running("c1", 2*time.Minute, true, true)), wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Success}, Probe: true}},
		{name: "pre-existing ready container reset when configured", pt: Readiness,
			in:        in(running("c1", 2*time.Minute, true, true), func(ti *tickInput) { ti.KeepStatusOnRestart = false }),
			wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}, Probe: true}},
		{name: "container started after agent start is new", pt: Readiness,
			in: in(running("c1", 65*time.Second, true, true)), wantState: state{ContainerID: "c1"}, want: tick{Set: []Result{Failure}, Probe: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gotState, got := decideTick(tc.pt, tc.delay, tc.st, tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tick (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantState, gotState); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}
