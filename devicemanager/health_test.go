package devicemanager

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

func TestResourceStateHealth(t *testing.T) {
	t.Parallel()
	rs := newResourceState()
	rs.healthy = sets.New("h")
	rs.unhealthy = sets.New("u")
	for _, tc := range []struct {
		name string
		rs   *resourceState
		id   string
		want v1.ResourceHealthStatus
	}{
		{"healthy", rs, "h", v1.ResourceHealthStatusHealthy},
		{"unhealthy", rs, "u", v1.ResourceHealthStatusUnhealthy},
		{"no longer listed", rs, "gone", v1.ResourceHealthStatusUnknown},
		{"resource unknown", nil, "h", v1.ResourceHealthStatusUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.rs.health(tc.id); got != tc.want {
				t.Errorf("health(%q) = %q, want %q", tc.id, got, tc.want)
			}
		})
	}
}

// nextHealthChange waits for the next value of HealthChanges.
func (e *testEnv) nextHealthChange() []string {
	e.t.Helper()
	select {
	case pods := <-e.m.HealthChanges():
		return pods
	case <-time.After(waitLimit):
		e.t.Fatal("no health change delivered")
		return nil
	}
}

func rstatus(res string, idHealth ...string) v1.ResourceStatus {
	st := v1.ResourceStatus{Name: v1.ResourceName(res), Resources: []v1.ResourceHealth{}}
	for i := 0; i < len(idHealth); i += 2 {
		st.Resources = append(st.Resources, v1.ResourceHealth{ResourceID: v1.ResourceID(idHealth[i]), Health: v1.ResourceHealthStatus(idHealth[i+1])})
	}
	return st
}

// TestAllocatedResourcesStatusFollowsHealth runs real plugins over the
// registration socket: the health of the devices assigned to a pod's
// containers follows the plugins' ListAndWatch messages, the end of a
// plugin's stream and the removal of its resource, and HealthChanges names
// exactly the pods holding a device whose health changed.
func TestAllocatedResourcesStatusFollowsHealth(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clk := newTimerClock()
	env := startManagerOn(t, "", Config{StopGracePeriod: grace}, clk)
	const other = "example.com/aaa" // sorts before gpu
	gpus := env.plugin("gpu.sock", gpu, devices(pluginapi.Healthy, "a", "b", "c"), nil, plugintest.Funcs{})
	env.plugin("other.sock", other, devices(pluginapi.Healthy, "x"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{3, 3})
	env.waitCounts(other, counts{1, 1})

	p1 := pod("p1", nil, ctr("app", map[string]int64{gpu: 1, other: 1}), ctr("plain", nil))
	p2 := pod("p2", nil, ctr("app", map[string]int64{gpu: 1}))
	*env.active = []*v1.Pod{p1, p2}
	ctx := testCtx(t)
	for _, p := range []*v1.Pod{p1, p2} {
		if err := env.m.AllocatePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	check := func(uid string, want map[string][]v1.ResourceStatus) {
		t.Helper()
		if diff := cmp.Diff(want, env.m.AllocatedResourcesStatus(uid)); diff != "" {
			t.Errorf("AllocatedResourcesStatus(%s) (-want +got):\n%s", uid, diff)
		}
	}
	check("p1", map[string][]v1.ResourceStatus{"app": {rstatus(other, "x", "Healthy"), rstatus(gpu, "a", "Healthy")}})
	check("p2", map[string][]v1.ResourceStatus{"app": {rstatus(gpu, "b", "Healthy")}})
	check("nobody", nil)

	// c is nobody's: its change names no pod, so the next value is the
	// change of a alone.
	gpus.SetDevices(append(devices(pluginapi.Healthy, "a", "b"), devices(pluginapi.Unhealthy, "c")...))
	gpus.SetDevices(append(devices(pluginapi.Healthy, "b"), devices(pluginapi.Unhealthy, "a", "c")...))
	if diff := cmp.Diff([]string{"p1"}, env.nextHealthChange()); diff != "" {
		t.Errorf("pods after a turned unhealthy (-want +got):\n%s", diff)
	}
	check("p1", map[string][]v1.ResourceStatus{"app": {rstatus(other, "x", "Healthy"), rstatus(gpu, "a", "Unhealthy")}})
	check("p2", map[string][]v1.ResourceStatus{"app": {rstatus(gpu, "b", "Healthy")}})

	// b leaves the plugin's list: Unknown.
	gpus.SetDevices(devices(pluginapi.Unhealthy, "a", "c"))
	if diff := cmp.Diff([]string{"p2"}, env.nextHealthChange()); diff != "" {
		t.Errorf("pods after b left the list (-want +got):\n%s", diff)
	}
	check("p2", map[string][]v1.ResourceStatus{"app": {rstatus(gpu, "b", "Unknown")}})

	// The plugin comes back healthy, then its stream ends: every device of
	// the resource is unhealthy.
	gpus.SetDevices(devices(pluginapi.Healthy, "a", "b", "c"))
	if diff := cmp.Diff([]string{"p1", "p2"}, env.nextHealthChange()); diff != "" {
		t.Errorf("pods after a and b turned healthy (-want +got):\n%s", diff)
	}
	gpus.DropStreams()
	if diff := cmp.Diff([]string{"p1", "p2"}, env.nextHealthChange()); diff != "" {
		t.Errorf("pods after the stream ended (-want +got):\n%s", diff)
	}
	check("p1", map[string][]v1.ResourceStatus{"app": {rstatus(other, "x", "Healthy"), rstatus(gpu, "a", "Unhealthy")}})

	// Past the grace period the resource is removed: Unknown.
	clk.Step(grace + time.Nanosecond)
	if _, _, removed := env.m.Capacity(); !cmp.Equal(removed, []string{gpu}) {
		t.Fatalf("removed %v, want [%s]", removed, gpu)
	}
	if diff := cmp.Diff([]string{"p1", "p2"}, env.nextHealthChange()); diff != "" {
		t.Errorf("pods after the resource was removed (-want +got):\n%s", diff)
	}
	check("p1", map[string][]v1.ResourceStatus{"app": {rstatus(other, "x", "Healthy"), rstatus(gpu, "a", "Unknown")}})
	check("p2", map[string][]v1.ResourceStatus{"app": {rstatus(gpu, "b", "Unknown")}})
}
