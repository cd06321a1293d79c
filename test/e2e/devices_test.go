package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

const fakeResource = "example.com/fake"

func deviceManifest(name string, count int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: %s
    args: ["sleep"]
    resources:
      limits:
        %s: "%d"
`, name, testbox, fakeResource, count)
}

// TestDevicePlugin: the in-repo test device plugin registers with the agent
// at <root>/device-plugins/kubelet.sock; a static pod asking for its resource
// starts with the plugin's environment variable, mount and device node
// visible inside its container (checked with exec through CRI), after the
// plugin's PreStartContainer; the pod-resources API lists the assignment and
// the allocatable devices; a pod asking for more devices than are free is
// rejected with UnexpectedAdmissionError; once the pod is gone its device is
// given to the next pod.
func TestDevicePlugin(t *testing.T) {
	a := StartAgent(t, Options{})
	ctx := t.Context()

	prestarts := make(chan []string, 16)
	startFakePlugin(t, a, prestarts)

	// The pod-resources API over its unix socket.
	sock := filepath.Join(a.Root, "pod-resources", "kubelet.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("pod-resources socket: %v, %v; want mode 0600", fi, err)
	}
	pr := podResources(t, a)
	a.Eventually("both devices allocatable in the pod-resources API", 30*time.Second, func() (bool, string) {
		r, err := pr.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
		if err != nil {
			return false, err.Error()
		}
		var ids []string
		for _, d := range r.GetDevices() {
			if d.ResourceName == fakeResource {
				ids = append(ids, d.DeviceIds...)
			}
		}
		slices.Sort(ids)
		return slices.Equal(ids, []string{"fake-0", "fake-1"}), fmt.Sprint(ids)
	})

	a.WriteManifest("gpu.yaml", deviceManifest("gpu", 1))
	pod := a.WaitPod("gpu-e2e", "running", running)
	select {
	case ids := <-prestarts:
		if len(ids) != 1 {
			t.Errorf("PreStartContainer devices %q, want one", ids)
		}
	default:
		t.Error("PreStartContainer was not called before the container started")
	}
	held := devicesOf(t, pr, "gpu-e2e")
	if len(held) != 1 {
		t.Fatalf("pod-resources List: gpu-e2e holds %q, want one device", held)
	}

	// Inside the container.
	rt := a.CRI()
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, _, err := rt.ExecSync(ctx, id, []string{"/testbox", "env"}, 10*time.Second)
	if err != nil {
		t.Fatalf("exec env: %v", err)
	}
	if !slices.Contains(strings.Split(string(out), "\n"), "FAKE_DEVICES="+held[0]) {
		t.Errorf("container env lacks FAKE_DEVICES=%s:\n%s", held[0], out)
	}
	for _, path := range []string{"/dev/fakedev", "/opt/fake/marker"} {
		// testbox check exits 1 when the path exists.
		_, _, err := rt.ExecSync(ctx, id, []string{"/testbox", "check", path}, 10*time.Second)
		var exit utilexec.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 1 {
			t.Errorf("%s in the container: check = %v, want it present (exit 1)", path, err)
		}
	}
	st, err := rt.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetAnnotations()["example.com/fake-devices"]; got != held[0] {
		t.Errorf("container annotation from the plugin = %q, want %q", got, held[0])
	}

	// Two more devices than are free: rejected at admission.
	a.WriteManifest("greedy.yaml", deviceManifest("greedy", 2))
	greedy := a.WaitPod("greedy-e2e", "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if greedy.Status.Reason != "UnexpectedAdmissionError" || !strings.HasPrefix(greedy.Status.Message, "Allocate failed due to requested number of devices unavailable for "+fakeResource) {
		t.Errorf("greedy pod status: %s: %s; want UnexpectedAdmissionError", greedy.Status.Reason, greedy.Status.Message)
	}
	a.RemoveManifest("greedy.yaml")

	// The pod goes: its device is freed for the next pod, and the API no
	// longer lists it.
	a.RemoveManifest("gpu.yaml")
	a.WaitGone("gpu-e2e")
	a.WaitGone("greedy-e2e")
	if got := devicesOf(t, pr, "gpu-e2e"); got != nil {
		t.Errorf("pod-resources List after the pod went: %q", got)
	}
	a.WriteManifest("pair.yaml", deviceManifest("pair", 2))
	a.WaitPod("pair-e2e", "running with both devices", running)
	if got := devicesOf(t, pr, "pair-e2e"); !slices.Equal(got, []string{"fake-0", "fake-1"}) {
		t.Errorf("pair-e2e holds %q, want both devices", got)
	}
	r, err := pr.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "pair-e2e", PodNamespace: "default"})
	if err != nil || len(r.GetPodResources().GetContainers()) != 1 || r.GetPodResources().GetContainers()[0].GetName() != "app" {
		t.Errorf("pod-resources Get(pair-e2e) = %v, %v", r, err)
	}
}

// startFakePlugin starts the in-repo test device plugin with two devices of
// fakeResource and registers it with the agent: Allocate maps /dev/null to
// /dev/fakedev and a directory with a marker file to /opt/fake, and names
// the devices in FAKE_DEVICES and an annotation; PreStartContainer is
// required and reports its devices on prestarts (when not full).
func startFakePlugin(t *testing.T, a *Agent, prestarts chan []string) *plugintest.Stub {
	t.Helper()
	driver := t.TempDir()
	if err := os.WriteFile(filepath.Join(driver, "marker"), []byte("fake driver\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pluginDir := filepath.Join(a.Root, "device-plugins")
	stub := plugintest.New(filepath.Join(pluginDir, "e2e-fake.sock"), []*pluginapi.Device{
		{ID: "fake-0", Health: pluginapi.Healthy}, {ID: "fake-1", Health: pluginapi.Healthy},
	}, &pluginapi.DevicePluginOptions{PreStartRequired: true}, plugintest.Funcs{
		Allocate: func(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			resp := &pluginapi.AllocateResponse{}
			for _, cr := range req.ContainerRequests {
				resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
					Envs:        map[string]string{"FAKE_DEVICES": strings.Join(cr.DevicesIds, ",")},
					Mounts:      []*pluginapi.Mount{{ContainerPath: "/opt/fake", HostPath: driver, ReadOnly: true}},
					Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/fakedev", HostPath: "/dev/null", Permissions: "rw"}},
					Annotations: map[string]string{"example.com/fake-devices": strings.Join(cr.DevicesIds, ",")},
				})
			}
			return resp, nil
		},
		PreStart: func(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
			select {
			case prestarts <- req.DevicesIds:
			default:
			}
			return &pluginapi.PreStartContainerResponse{}, nil
		},
	})
	if err := stub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Stop)
	if err := stub.Register(t.Context(), filepath.Join(pluginDir, "kubelet.sock"), fakeResource); err != nil {
		t.Fatalf("register with the agent: %v", err)
	}
	// The devices are known once the agent has read the plugin's first
	// ListAndWatch answer, some time after the registration: a pod admitted
	// before that is refused (as by the kubelet).
	a.Eventually(fakeResource+" on the node", 30*time.Second, func() (bool, string) {
		n, err := a.node()
		if err != nil {
			return false, err.Error()
		}
		c := n.Status.Capacity[fakeResource]
		return c.Value() == 2, "capacity " + c.String()
	})
	return stub
}

// podResources dials the agent's pod-resources socket.
func podResources(t *testing.T, a *Agent) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(a.Root, "pod-resources", "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// TestDeviceCheckpointCorrupt: the agent stops with a pod holding a device;
// its device checkpoint is corrupted. The restarted agent rebuilds the
// assignment from the running container (event, metric), the pod keeps
// running on its device, and the device is never given to another pod.
func TestDeviceCheckpointCorrupt(t *testing.T) {
	a := StartAgent(t, Options{})
	stub := startFakePlugin(t, a, make(chan []string, 16))
	pr := podResources(t, a)
	a.WriteManifest("gpu.yaml", deviceManifest("gpu", 1))
	before := a.WaitPod("gpu-e2e", "running", running)
	held := devicesOf(t, pr, "gpu-e2e")
	if len(held) != 1 {
		t.Fatalf("gpu-e2e holds %q, want one device", held)
	}

	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("agent exit code %d", code)
	}
	stub.Stop()
	if err := os.WriteFile(filepath.Join(a.Root, "device-plugins", "kubelet_internal_checkpoint"), []byte("{not a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Start()
	// A plugin registers again when the agent restarts (its socket was removed).
	startFakePlugin(t, a, make(chan []string, 16))
	pr = podResources(t, a)
	if !strings.Contains(a.Log(), "DeviceCheckpointRecovered") || !strings.Contains(a.Log(), "rebuilt 1 device assignments of 1 containers") {
		t.Errorf("no DeviceCheckpointRecovered event in the log:\n%s", tail(a.Log(), 30))
	}
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `nodekeeper_device_checkpoint_recoveries_total{result="rebuilt"} 1`) {
		t.Errorf("/metrics lacks the recovery:\n%s", grepLines(string(body), "device_checkpoint"))
	}

	after := a.WaitPod("gpu-e2e", "running", running)
	if after.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("the pod's container was replaced: %s, then %s", before.Status.ContainerStatuses[0].ContainerID, after.Status.ContainerStatuses[0].ContainerID)
	}
	if got := devicesOf(t, pr, "gpu-e2e"); !slices.Equal(got, held) {
		t.Errorf("after the restart gpu-e2e holds %q, want %q", got, held)
	}
	a.WriteManifest("greedy.yaml", deviceManifest("greedy", 2))
	a.WaitPod("greedy-e2e", "rejected", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError"
	})
	a.WriteManifest("one.yaml", deviceManifest("one", 1))
	a.WaitPod("one-e2e", "running", running)
	if got := devicesOf(t, pr, "one-e2e"); len(got) != 1 || got[0] == held[0] {
		t.Errorf("one-e2e holds %q; want the device gpu-e2e does not hold (%q)", got, held)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// devicesOf returns the fake devices List reports for the pod's containers,
// sorted; nil when List does not report the pod.
func devicesOf(t *testing.T, pr podresourcesapi.PodResourcesListerClient, pod string) []string {
	t.Helper()
	return resourceDevicesOf(t, pr, pod, fakeResource)
}

// resourceDevicesOf returns the devices of resource res List reports for the
// pod's containers, sorted; nil when List does not report the pod.
func resourceDevicesOf(t *testing.T, pr podresourcesapi.PodResourcesListerClient, pod, res string) []string {
	t.Helper()
	list, err := pr.List(t.Context(), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod-resources List: %v", err)
	}
	for _, p := range list.GetPodResources() {
		if p.Name != pod {
			continue
		}
		ids := []string{}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.ResourceName == res {
					ids = append(ids, d.DeviceIds...)
				}
			}
		}
		slices.Sort(ids)
		return ids
	}
	return nil
}
