package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	utilexec "k8s.io/utils/exec"
)

// intelGPUs is gpu_fakedev's configuration for two fake i915 GPUs (as the
// device manager's integration test has it).
const intelGPUs = `{"Info": "2x fake DG1", "DevCount": 2, "DevMemSize": 4294967296, "Capabilities": {"platform": "fake_DG1"}}`

// TestIntelGPUPlugin: Intel's GPU device plugin, on a fake device tree
// gpu_fakedev makes in a host directory (char devices 1:3 for
// dev/dri/card0..1 and renderD128..129, and the sysfs the plugin scans),
// registers with the agent from a private mount namespace; its two
// gpu.intel.com/i915 devices are on the node and in the pod-resources API. A
// static pod asking for one runs with that GPU's device nodes created in its
// container (and not the other GPU's) and the plugin's by-path mount; List
// shows the pod holding the GPU; once the pod is gone both GPUs are free for
// a pod asking for two.
//
// The plugin reports each node with HostPath and ContainerPath both
// <prefix>/dev/dri/<node> (its -prefix is prepended to /dev and /sys), so
// the container sees the nodes under the fake tree's path, not /dev/dri.
// It also names the GPU as a CDI device, whose spec it writes to
// /var/run/cdi, in the namespace: the managed containerd (1.6, or 1.7
// without enable_cdi) ignores CDI names and creates the DeviceSpecs' nodes.
func TestIntelGPUPlugin(t *testing.T) {
	requireNamespaceTools(t)
	tools, err := buildSampleTools()
	if err != nil {
		t.Fatalf("build hack/tools: %v", err)
	}
	// The fake tree, in a directory host and namespace both see (not under
	// /var/lib or /var/run, which the namespace covers).
	fake, err := os.MkdirTemp("/tmp", "nke-gpu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(fake) })
	if err := os.WriteFile(filepath.Join(fake, "fake.json"), []byte(intelGPUs), 0o600); err != nil {
		t.Fatal(err)
	}
	gen := exec.Command(filepath.Join(tools, "gpu_fakedev"), "-json", "fake.json")
	gen.Dir = fake
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gpu_fakedev: %v\n%s", err, out)
	}
	// A by-path directory as udev makes it: with -bypath all the plugin
	// mounts it into the GPU's containers.
	bypath := filepath.Join(fake, "dev", "dri", "by-path")
	if err := os.MkdirAll(bypath, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../card0", filepath.Join(bypath, "pci-0000:03:00.0-card")); err != nil {
		t.Fatal(err)
	}

	a := StartAgent(t, Options{})
	startPluginInNamespace(t, a, filepath.Join(tools, "gpu_plugin"), "-prefix", fake, "-bypath", "all", "-v", "4")

	const res = "gpu.intel.com/i915"
	a.Eventually(res+" on the node", 60*time.Second, func() (bool, string) {
		n, err := a.node()
		if err != nil {
			return false, err.Error()
		}
		c, al := n.Status.Capacity[res], n.Status.Allocatable[res]
		return c.Value() == 2 && al.Value() == 2, fmt.Sprintf("capacity %s, allocatable %s", c.String(), al.String())
	})
	pr := podResources(t, a)
	r, err := pr.GetAllocatableResources(t.Context(), &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var allocatable []string
	for _, d := range r.GetDevices() {
		if d.ResourceName == res {
			allocatable = append(allocatable, d.DeviceIds...)
		}
	}
	slices.Sort(allocatable)
	if !slices.Equal(allocatable, []string{"card0-0", "card1-0"}) {
		t.Fatalf("pod-resources allocatable %s: %q, want card0-0 and card1-0", res, allocatable)
	}

	manifest := func(name string, n int) string {
		return strings.ReplaceAll(deviceManifest(name, n), fakeResource, res)
	}
	a.WriteManifest("gpu.yaml", manifest("gpu", 1))
	pod := a.WaitPod("gpu-e2e", "running", running)
	held := resourceDevicesOf(t, pr, "gpu-e2e", res)
	if len(held) != 1 {
		t.Fatalf("pod-resources List: gpu-e2e holds %q of %s, want one GPU", held, res)
	}
	card, _, _ := strings.Cut(held[0], "-") // card0-0 is card0's first share
	nodes := map[string][]string{"card0": {"card0", "renderD128"}, "card1": {"card1", "renderD129"}}
	other := "card1"
	if card == "card1" {
		other = "card0"
	}

	// Inside the container: exec sees the held GPU's nodes and the by-path
	// mount, not the other GPU's nodes; through /proc/PID/root the nodes are
	// char devices 1:3, as on the host.
	rt := a.CRI()
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	present := func(path string) bool {
		t.Helper()
		// testbox check exits 1 when the path exists, 0 when it does not.
		_, _, err := rt.ExecSync(t.Context(), id, []string{"/testbox", "check", path}, 10*time.Second)
		var exit utilexec.ExitError
		switch {
		case err == nil:
			return false
		case errors.As(err, &exit) && exit.ExitStatus() == 1:
			return true
		}
		t.Fatalf("exec check %s: %v", path, err)
		return false
	}
	root := fmt.Sprintf("/proc/%d/root", a.ContainerPID(pod.Status.ContainerStatuses[0].ContainerID))
	for _, node := range nodes[card] {
		path := filepath.Join(fake, "dev", "dri", node)
		if !present(path) {
			t.Errorf("%s (%s's) is not in the container", path, card)
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(root+path, &st); err != nil {
			t.Errorf("stat %s in the container: %v", path, err)
			continue
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
			t.Errorf("%s in the container: mode %o, device %d:%d; want the char device 1:3", path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	for _, node := range nodes[other] {
		if path := filepath.Join(fake, "dev", "dri", node); present(path) {
			t.Errorf("%s (%s's, not held) is in the container", path, other)
		}
	}
	// The by-path link resolves to card0's node, which the container has
	// only when it holds card0.
	link := filepath.Join(bypath, "pci-0000:03:00.0-card")
	if !present(bypath) {
		t.Errorf("the plugin's by-path mount: %s is not in the container", bypath)
	} else if got := present(link); got != (card == "card0") {
		t.Errorf("in the container %s (a link to ../card0) resolves: %v; the pod holds %s", link, got, card)
	}

	// The pod goes: List no longer shows it, and both GPUs are free for a
	// pod asking for two.
	a.RemoveManifest("gpu.yaml")
	a.WaitGone("gpu-e2e")
	if got := resourceDevicesOf(t, pr, "gpu-e2e", res); got != nil {
		t.Errorf("pod-resources List after the pod went: gpu-e2e holds %q", got)
	}
	a.WriteManifest("pair.yaml", manifest("pair", 2))
	pair := a.WaitPod("pair-e2e", "running or rejected", func(p *v1.Pod) bool { return running(p) || p.Status.Phase == v1.PodFailed })
	if pair.Status.Phase == v1.PodFailed {
		t.Fatalf("pair-e2e, asking for both GPUs after gpu-e2e went, was rejected: %s: %s", pair.Status.Reason, pair.Status.Message)
	}
	if got := resourceDevicesOf(t, pr, "pair-e2e", res); !slices.Equal(got, []string{"card0-0", "card1-0"}) {
		t.Errorf("pair-e2e holds %q, want both GPUs", got)
	}
	if n, err := a.node(); err != nil {
		t.Error(err)
	} else if q := n.Status.Allocatable[v1.ResourceName(res)]; q.Value() != 2 {
		t.Errorf("node allocatable %s = %s with both GPUs in use, want 2 (allocatable counts healthy devices)", res, q.String())
	}
}
