package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestDeviceHealthInPodStatus is the two upstream ResourceHealthStatus specs
// (KEP-4680, "Device Plugin Failures Pod Status") on the real agent: a device
// plugin registered over the agent's kubelet.sock gives two devices, a
// running pod and a pod whose image cannot be pulled (it never starts) hold
// one each, and each pod's container status shows its device Healthy in
// allocatedResourcesStatus; once the plugin's ListAndWatch says both are
// unhealthy, both pods show Unhealthy. syncFrequency is an hour: only the
// device manager's health change can have the statuses derived again.
func TestDeviceHealthInPodStatus(t *testing.T) {
	a := StartAgent(t, Options{Config: "syncFrequency: 1h\n"})
	stub := startFakePlugin(t, a, make(chan []string, 16))

	a.WriteManifest("gpu.yaml", deviceManifest("gpu", 1))
	a.WaitPod("gpu-e2e", "running", running)
	// Nothing listens on port 1 of the loopback: the pull fails at once.
	a.WriteManifest("nopull.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: nopull
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: 127.0.0.1:1/none/nothing:v1
    imagePullPolicy: Always
    resources:
      limits:
        %s: "1"
`, fakeResource))
	a.WaitPod("nopull-e2e", "waiting on its image", func(p *v1.Pod) bool {
		if len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return p.Status.Phase == v1.PodPending && w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff")
	})

	held := map[string]string{} // pod → its device
	shows := func(name string, h v1.ResourceHealthStatus) func(*v1.Pod) bool {
		return func(p *v1.Pod) bool {
			if len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			got := p.Status.ContainerStatuses[0].AllocatedResourcesStatus
			if len(got) != 1 || len(got[0].Resources) != 1 {
				return false
			}
			held[name] = string(got[0].Resources[0].ResourceID)
			want := []v1.ResourceStatus{{Name: fakeResource, Resources: []v1.ResourceHealth{{ResourceID: v1.ResourceID(held[name]), Health: h}}}}
			return cmp.Equal(want, got)
		}
	}
	for _, name := range []string{"gpu-e2e", "nopull-e2e"} {
		a.WaitPod(name, "shows its device Healthy", shows(name, v1.ResourceHealthStatusHealthy))
	}
	if held["gpu-e2e"] == held["nopull-e2e"] {
		t.Fatalf("both pods hold %s", held["gpu-e2e"])
	}

	start := time.Now()
	stub.SetDevices([]*pluginapi.Device{{ID: "fake-0", Health: pluginapi.Unhealthy}, {ID: "fake-1", Health: pluginapi.Unhealthy}})
	for _, name := range []string{"gpu-e2e", "nopull-e2e"} {
		a.WaitPod(name, "shows its device Unhealthy", shows(name, v1.ResourceHealthStatusUnhealthy))
	}
	t.Logf("both pods showed their device Unhealthy %v after the plugin's update", time.Since(start).Round(time.Millisecond))

	a.RemoveManifest("gpu.yaml")
	a.RemoveManifest("nopull.yaml")
	a.WaitGone("gpu-e2e")
	a.WaitGone("nopull-e2e")
}
