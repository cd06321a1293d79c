package podstatus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestDeriveAllocatedResourcesStatus: every container status shows the
// health of its container's devices (KEP-4680), whatever the container's
// state (running, waiting on an image pull that never succeeds, as the
// upstream "failed pod" spec has it, terminated), init containers
// included, sorted by resource name then device ID; a container without
// devices shows none, and the input is left as it was.
func TestDeriveAllocatedResourcesStatus(t *testing.T) {
	t.Parallel()
	app := &v1.Container{Name: "app", Image: "img:1"}
	init := &v1.Container{Name: "init", Image: "img:1"}
	withInitAndPlain := func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{*init}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "plain", Image: "img:1"})
	}
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	initDone := ctr("i1", init, "s1", 0, 1, exited(0, 1, 2))
	devices := func() map[string][]v1.ResourceStatus {
		return map[string][]v1.ResourceStatus{
			"app": {
				{Name: "example.com/gpu", Resources: []v1.ResourceHealth{
					{ResourceID: "gpu-b", Health: v1.ResourceHealthStatusUnhealthy},
					{ResourceID: "gpu-a", Health: v1.ResourceHealthStatusHealthy},
				}},
				{Name: "example.com/aaa", Resources: []v1.ResourceHealth{{ResourceID: "x", Health: v1.ResourceHealthStatusUnknown}}},
			},
			"init": {{Name: "example.com/gpu", Resources: []v1.ResourceHealth{{ResourceID: "gpu-a", Health: v1.ResourceHealthStatusHealthy}}}},
		}
	}
	wantApp := []v1.ResourceStatus{
		{Name: "example.com/aaa", Resources: []v1.ResourceHealth{{ResourceID: "x", Health: v1.ResourceHealthStatusUnknown}}},
		{Name: "example.com/gpu", Resources: []v1.ResourceHealth{
			{ResourceID: "gpu-a", Health: v1.ResourceHealthStatusHealthy},
			{ResourceID: "gpu-b", Health: v1.ResourceHealthStatusUnhealthy},
		}},
	}
	wantInit := []v1.ResourceStatus{{Name: "example.com/gpu", Resources: []v1.ResourceHealth{{ResourceID: "gpu-a", Health: v1.ResourceHealthStatusHealthy}}}}
	for _, tc := range []struct {
		name     string
		in       Input
		appState string
	}{
		{name: "running", appState: "running",
			in: Input{Runtime: status(ready, initDone, ctr("c1", app, "s1", 0, 3, running(3)))}},
		{name: "waiting: image pull back-off", appState: "waiting:ImagePullBackOff",
			in: Input{Runtime: status(ready, initDone), Waiting: map[string]v1.ContainerStateWaiting{"app": {Reason: "ImagePullBackOff"}}}},
		{name: "terminated", appState: "terminated:1",
			in: Input{Runtime: status(ready, initDone, ctr("c1", app, "s1", 0, 3, exited(1, 3, 4)))}},
		{name: "killed and stopped: Final's phase", appState: "terminated:137",
			in: Input{Runtime: status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0, func(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })},
				initDone, ctr("c1", app, "s1", 0, 3, exited(137, 3, 4))),
				Final: &v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted"}, Killed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := tc.in
			in.Pod = testPod(withInitAndPlain)
			in.Devices = devices()
			st, _ := Derive(in, t0.Add(10e9))
			got := map[string][]v1.ResourceStatus{}
			states := map[string]string{}
			for _, cs := range append(append([]v1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...) {
				got[cs.Name] = cs.AllocatedResourcesStatus
				states[cs.Name] = stateOf(cs.State)
			}
			if states["app"] != tc.appState {
				t.Fatalf("app state %q, want %q (statuses %v)", states["app"], tc.appState, states)
			}
			want := map[string][]v1.ResourceStatus{"init": wantInit, "app": wantApp, "plain": nil}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("allocatedResourcesStatus by container (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(devices(), in.Devices); diff != "" {
				t.Errorf("Derive changed Input.Devices (-before +after):\n%s", diff)
			}
		})
	}
}
