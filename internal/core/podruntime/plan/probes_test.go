package plan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

// TestComputeProbeRestarts: a running container of the current sandbox
// whose liveness or startup probe failed is killed with the probe's grace
// period (the deletion's wins) and started again by the restart rule after
// its crash-loop back-off; a sidecar starts before the containers.
func TestComputeProbeRestarts(t *testing.T) {
	t.Parallel()
	always := v1.ContainerRestartPolicyAlways
	app := &v1.Container{Name: "app", Image: "img:1"}
	side := &v1.Container{Name: "side", Image: "img:1", RestartPolicy: &always}
	withSidecar := func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{*side} }
	never := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever }
	deleting := func(p *v1.Pod) { g := int64(5); p.DeletionGracePeriodSeconds = &g }
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	grace := int64(3)
	liveness := map[string]ProbeFailure{"c1": {Probe: "Liveness", Grace: &grace}}
	type kill struct {
		ID, Reason, Message string
		Grace               *int64
	}
	tests := []struct {
		name      string
		mut       []func(*v1.Pod)
		status    []*runtimeapi.ContainerStatus
		unhealthy map[string]ProbeFailure
		crash     map[string]Backoff
		now       time.Duration
		wantKill  []kill
		wantStart []string
		waiting   string
	}{
		{name: "liveness failed: killed with its grace period, restarted at once",
			status: []*runtimeapi.ContainerStatus{ctr("c1", app, "s1", 0, 1, running(1))}, unhealthy: liveness,
			wantKill:  []kill{{"c1", "Liveness probe failed", "Container app failed liveness probe, will be restarted", &grace}},
			wantStart: []string{"app/1"}},
		{name: "Never: killed, not restarted", mut: []func(*v1.Pod){never},
			status: []*runtimeapi.ContainerStatus{ctr("c1", app, "s1", 0, 1, running(1))}, unhealthy: liveness,
			wantKill: []kill{{"c1", "Liveness probe failed", "Container app failed liveness probe", &grace}}},
		{name: "being deleted: the deletion's grace period", mut: []func(*v1.Pod){deleting},
			status: []*runtimeapi.ContainerStatus{ctr("c1", app, "s1", 0, 1, running(1))}, unhealthy: liveness,
			wantKill:  []kill{{"c1", "Liveness probe failed", "Container app failed liveness probe, will be restarted", nil}},
			wantStart: []string{"app/1"}},
		{name: "an earlier exit in back-off: killed, waits",
			status:    []*runtimeapi.ContainerStatus{ctr("c1", app, "s1", 1, 10*time.Second, running(10*time.Second)), ctr("c0", app, "s1", 0, 1, exited(137, 1, 5*time.Second))},
			unhealthy: liveness, crash: map[string]Backoff{"app": {Delay: 20 * time.Second, Last: t0.Add(5 * time.Second)}}, now: 12 * time.Second,
			wantKill: []kill{{"c1", "Liveness probe failed", "Container app failed liveness probe, will be restarted", &grace}},
			waiting:  "app"},
		{name: "a failed sidecar starts first", mut: []func(*v1.Pod){withSidecar},
			status:    []*runtimeapi.ContainerStatus{ctr("c2", side, "s1", 0, 1, running(1)), ctr("c1", app, "s1", 0, 2, running(2))},
			unhealthy: map[string]ProbeFailure{"c1": {Probe: "Liveness"}, "c2": {Probe: "Startup"}},
			wantKill: []kill{
				{"c2", "Startup probe failed", "Container side failed startup probe, will be restarted", nil},
				{"c1", "Liveness probe failed", "Container app failed liveness probe, will be restarted", nil},
			},
			wantStart: []string{"side/1", "app/1"}},
		{name: "a container of an old sandbox: left alone",
			status: []*runtimeapi.ContainerStatus{ctr("c1", app, "old", 0, 1, running(1))}, unhealthy: liveness,
			wantStart: []string{"app/1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod(tc.mut...)
			hashes := criconfig.Hashes(pod)
			crash := map[string]Backoff{}
			for n, e := range tc.crash {
				e.Spec = hashes[n]
				crash[n] = e
			}
			got := Compute(Input{Pod: pod, Status: status(ready, tc.status...), Hashes: hashes, Crash: crash, Unhealthy: tc.unhealthy}, t0.Add(tc.now))
			var kills []kill
			for _, k := range got.Kill {
				kills = append(kills, kill{k.ID, k.Reason, k.Message, k.Grace})
			}
			if diff := cmp.Diff(tc.wantKill, kills); diff != "" {
				t.Errorf("kills (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStart, summarize(got).Start); diff != "" {
				t.Errorf("starts (-want +got):\n%s", diff)
			}
			if w, ok := got.Waiting[tc.waiting]; tc.waiting != "" && (!ok || w.Reason != ReasonCrashLoopBackOff) {
				t.Errorf("waiting %v, want %s in CrashLoopBackOff", got.Waiting, tc.waiting)
			}
		})
	}
}
