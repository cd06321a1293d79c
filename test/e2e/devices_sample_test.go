package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/syncbuf"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// sampleTools is the kubelet's own sample device plugin, built from
// hack/tools as the device manager's integration tests build it (the same
// cache).
var sampleTools = toolbuild.Spec{
	Module:    "hack/tools",
	KeyFiles:  []string{"kubeletcheckpoint/main.go"},
	CacheName: "devicemanager-tools",
	Binaries: map[string]string{
		"sample-device-plugin": "k8s.io/kubernetes/test/images/sample-device-plugin",
		"gpu_plugin":           "github.com/intel/intel-device-plugins-for-kubernetes/cmd/gpu_plugin",
		"gpu_fakedev":          "github.com/intel/intel-device-plugins-for-kubernetes/cmd/gpu_fakedev",
		"kubeletcheckpoint":    "./kubeletcheckpoint",
	},
}

var buildSampleTools = sync.OnceValues(func() (string, error) { return toolbuild.Build(sampleTools) })

// TestSampleDevicePlugin: the kubelet's sample device plugin, which only
// knows /var/lib/kubelet/device-plugins, runs in a private mount namespace
// where that path is the agent's device-plugin directory; it registers, a
// pod asking for its resource runs with the plugin's mount, and the
// pod-resources API lists the device.
func TestSampleDevicePlugin(t *testing.T) {
	requireNamespaceTools(t)
	a := StartAgent(t, Options{})
	tools, err := buildSampleTools()
	if err != nil {
		t.Fatalf("build hack/tools: %v", err)
	}
	startPluginInNamespace(t, a, filepath.Join(tools, "sample-device-plugin"))

	const res = "example.com/resource"
	pr := podResources(t, a)
	a.Eventually("the sample plugin's devices in the pod-resources API", 60*time.Second, func() (bool, string) {
		r, err := pr.GetAllocatableResources(t.Context(), &podresourcesapi.AllocatableResourcesRequest{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, d := range r.GetDevices() {
			if d.ResourceName == res {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d devices", n)
	})
	a.WriteManifest("sample.yaml", strings.ReplaceAll(deviceManifest("sample", 1), fakeResource, res))
	pod := a.WaitPod("sample-e2e", "running", running)
	list, err := pr.List(t.Context(), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range list.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if p.Name == "sample-e2e" && d.ResourceName == res {
					ids = append(ids, d.DeviceIds...)
				}
			}
		}
	}
	if len(ids) != 1 {
		t.Fatalf("pod-resources List: sample-e2e holds %q of %s, want one device", ids, res)
	}
	// The plugin mounts a host directory named after the device; containerd
	// creates it on the host when missing, so remove it again if empty.
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	st, err := a.CRI().ContainerStatus(t.Context(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range st.GetStatus().GetMounts() {
		if strings.HasSuffix(m.HostPath, ids[0]) {
			found = true
			t.Cleanup(func() { _ = os.Remove(m.HostPath) })
		}
	}
	if !found {
		t.Errorf("the container has no mount for %s: %v", ids[0], st.GetStatus().GetMounts())
	}
}

// requireNamespaceTools skips (fails under CI) without the tools
// startPluginInNamespace runs.
func requireNamespaceTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"unshare", "mount", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			integration.Require(t, "needs "+tool)
		}
	}
}

// startPluginInNamespace starts a device plugin that only knows
// /var/lib/kubelet/device-plugins: bin runs with args in a private mount
// namespace where /var/lib is a tmpfs holding a copy of bin and that path is
// the agent's device-plugin directory. /var/run is a tmpfs there too, so that
// what a plugin writes into it (the Intel plugins write CDI specs to
// /var/run/cdi) stays in the namespace instead of on the host. Everything
// else, /tmp included, is the host's: a plugin may be pointed at a host path
// there. At cleanup the plugin is interrupted (killed after 5s); its output
// is logged when the test failed.
func startPluginInNamespace(t *testing.T, a *Agent, bin string, args ...string) {
	t.Helper()
	// The binary is opened before /var/lib is covered, then copied in.
	script := `set -e
exec 3<"$2"
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /var/run
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$1" /var/lib/kubelet/device-plugins
cat <&3 >/var/lib/plugin-bin
exec 3<&-
chmod 0755 /var/lib/plugin-bin
shift 2
exec /var/lib/plugin-bin "$@"`
	cmdArgs := append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh",
		filepath.Join(a.Root, "device-plugins"), bin}, args...)
	cmd := exec.Command("unshare", cmdArgs...)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), tail(out.String(), 60))
		}
	})
}
