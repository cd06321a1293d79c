package plan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
)

// inRun puts a container in the pod's run after trigger's RestartAllContainers.
func inRun(trigger string) ctrOpt {
	return func(c *runtimeapi.ContainerStatus) { c.Annotations[criconfig.AnnotationRun] = trigger }
}

// TestComputeActionsRestartAll walks a RestartAllContainers action (KEP-5532)
// through the syncs that carry it out, each planned from the runtime alone
// (what an agent restarted in the middle sees): the cleanup kills what runs,
// with no grace period; once nothing runs the pod starts again from its
// first init container, each container's restart count going on from its
// instance of the run before, and the containers of the new run carry the
// trigger's ID; containers of the run before count for nothing else.
func TestComputeActionsRestartAll(t *testing.T) {
	t.Parallel()
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyNever
	rules := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	i1 := v1.Container{Name: "i1", Image: "img:1"}
	side := v1.Container{Name: "side", Image: "img:1", RestartPolicy: &always}
	app := v1.Container{Name: "app", Image: "img:1", RestartPolicy: &never, RestartPolicyRules: rules}
	other := v1.Container{Name: "other", Image: "img:1"}
	withPod := func(p *v1.Pod) {
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.InitContainers = []v1.Container{i1, side}
		p.Spec.Containers = []v1.Container{app, other}
	}
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	s := time.Second
	// The first run: i1 done, the sidecar and other running, app exited 42
	// at 10 s.
	firstRun := []*runtimeapi.ContainerStatus{
		ctr("c1", &i1, "s1", 0, 1*s, exited(0, 1*s, 2*s)),
		ctr("c2", &side, "s1", 0, 3*s, running(3*s)),
		ctr("c3", &app, "s1", 0, 4*s, exited(42, 4*s, 10*s)),
		ctr("c4", &other, "s1", 0, 5*s, running(5*s)),
	}
	// After the cleanup: the sidecar and other killed at 11 s.
	cleaned := []*runtimeapi.ContainerStatus{
		firstRun[0],
		ctr("c2", &side, "s1", 0, 3*s, exited(137, 3*s, 11*s)),
		firstRun[2],
		ctr("c4", &other, "s1", 0, 5*s, exited(137, 5*s, 11*s)),
	}
	with := func(base []*runtimeapi.ContainerStatus, more ...*runtimeapi.ContainerStatus) *podstatus.Runtime {
		return status(ready, append(append([]*runtimeapi.ContainerStatus{}, base...), more...)...)
	}
	newI1 := ctr("c5", &i1, "s1", 1, 12*s, exited(0, 12*s, 13*s), inRun("c3"))
	newSide := ctr("c6", &side, "s1", 1, 14*s, running(14*s), inRun("c3"))
	tests := []struct {
		name     string
		status   *podstatus.Runtime
		want     actSummary
		wantRun  string
		wantKill []string // the kills' grace periods, "" for the pod's
	}{
		{name: "a regular container exits with the rule's code: the cleanup kills what runs, starts nothing",
			status:   with(firstRun),
			want:     actSummary{SandboxID: "s1", Kill: []string{"c4", "c2"}},
			wantKill: []string{"0", "0"}},
		{name: "nothing runs: the pod starts again from its first init container",
			status:  with(cleaned),
			want:    actSummary{SandboxID: "s1", InitPhase: true, Start: []string{"i1/1+backoff"}},
			wantRun: "c3"},
		{name: "new run: after the init container, the sidecar; the old init container stays",
			status: with(cleaned, newI1),
			// The old init container stays: its exit is the new one's last
			// termination.
			want:    actSummary{SandboxID: "s1", InitPhase: true, Start: []string{"side/1+backoff"}},
			wantRun: "c3"},
		{name: "new run initialized: the regular containers start, app too though its policy is Never",
			status:  with(cleaned, newI1, newSide),
			want:    actSummary{SandboxID: "s1", Start: []string{"app/1+backoff", "other/1+backoff"}},
			wantRun: "c3"},
		{name: "new run running: nothing to do, the trigger kept",
			status: with(cleaned, newI1, newSide,
				ctr("c7", &app, "s1", 1, 15*s, running(15*s), inRun("c3")),
				ctr("c8", &other, "s1", 1, 16*s, running(16*s), inRun("c3"))),
			want: actSummary{SandboxID: "s1"}},
		{name: "app exits 42 again in the new run: another restart of all",
			status: with(cleaned, newI1, newSide,
				ctr("c7", &app, "s1", 1, 15*s, exited(42, 15*s, 20*s), inRun("c3")),
				ctr("c8", &other, "s1", 1, 16*s, running(16*s), inRun("c3"))),
			// The trigger before goes: the new one marks the run to come.
			want:     actSummary{SandboxID: "s1", Kill: []string{"c8", "c6"}, Remove: []string{"c3", "c1"}},
			wantKill: []string{"0", "0"}},
		{name: "a trigger in a sandbox made before the newest one counts for nothing",
			status: status([]*runtimeapi.PodSandboxStatus{sb("s2", 1, time.Minute), sb("s1", 0, 0, func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })},
				append(cleaned, ctr("c9", &i1, "s2", 1, 61*s, running(61*s)))...),
			want: actSummary{SandboxID: "s2", Attempt: 1, InitPhase: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod(withPod)
			got := Compute(Input{Pod: pod, Status: tc.status, Hashes: criconfig.Hashes(pod), Crash: map[string]Backoff{}}, t0.Add(time.Minute))
			if diff := cmp.Diff(tc.want, summarize(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for _, a := range got.Start {
				if a.Run != tc.wantRun {
					t.Errorf("start of %s: run %q, want %q", a.Container.Name, a.Run, tc.wantRun)
				}
			}
			var graces []string
			for _, k := range got.Kill {
				g := ""
				if k.Grace != nil {
					g = "0"
					if *k.Grace != 0 {
						g = "not 0"
					}
				}
				graces = append(graces, g)
			}
			if diff := cmp.Diff(tc.wantKill, graces); diff != "" {
				t.Errorf("kill grace periods (-want +got):\n%s", diff)
			}
		})
	}
}
