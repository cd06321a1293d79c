package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

const testbox = "localhost/nodekeeper/testbox:1"

// running reports a pod Running with every container running and ready.
func running(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil || !c.Ready {
			return false
		}
	}
	return true
}

func webManifest(name, extraEnv string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: web
    image: %s
    args: ["serve", "--http", "8080"]
    env:
    - name: GREETING
      value: %q
`, name, testbox, extraEnv)
}

// TestStaticPodLifecycle: a static pod reaches Running with its own IP in the
// pod CIDR and serves on it; a changed manifest replaces it (new UID, new
// container); removing the manifest stops it and removes its containers and
// sandbox.
func TestStaticPodLifecycle(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("web.yaml", webManifest("web", "hello"))
	pod := a.WaitPod("web-e2e", "running", running)

	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !netip.MustParsePrefix(a.PodCIDR).Contains(ip) {
		t.Fatalf("pod IP %q is not in the pod CIDR %s", pod.Status.PodIP, a.PodCIDR)
	}
	if pod.Status.HostIP == "" || pod.Status.QOSClass != v1.PodQOSBestEffort || pod.Status.StartTime == nil {
		t.Errorf("status lacks hostIP/qosClass/startTime: %+v", pod.Status)
	}
	if pod.Annotations["kubernetes.io/config.source"] != "file" || pod.Annotations["kubernetes.io/config.hash"] != string(pod.UID) {
		t.Errorf("static pod annotations %v, UID %s", pod.Annotations, pod.UID)
	}
	a.Eventually("the pod answers on its own IP", 30*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + urlHost(pod.Status.PodIP) + ":8080/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	oldUID, oldCtr := pod.UID, pod.Status.ContainerStatuses[0].ContainerID
	a.WriteManifest("web.yaml", webManifest("web", "changed"))
	pod = a.WaitPod("web-e2e", "replaced by the new spec and running", func(p *v1.Pod) bool {
		return p.UID != oldUID && running(p)
	})
	if pod.Status.ContainerStatuses[0].ContainerID == oldCtr {
		t.Errorf("the changed manifest kept container %s", oldCtr)
	}
	rt := a.CRI()
	if st, err := rt.ContainerStatus(t.Context(), strings.TrimPrefix(oldCtr, "containerd://"), false); err == nil {
		t.Errorf("the old pod's container is still there: %v", st.GetStatus().GetState())
	}

	a.RemoveManifest("web.yaml")
	a.WaitGone("web-e2e")
	a.Eventually("no sandboxes left", 30*time.Second, func() (bool, string) {
		sbs, err := rt.ListPodSandbox(t.Context(), nil)
		return err == nil && len(sbs) == 0, fmt.Sprintf("%d sandboxes, err %v", len(sbs), err)
	})
}

// urlHost formats an IP for a URL host.
func urlHost(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}

// TestRestartPolicyAndInitContainers: init containers run in order before
// the container; a container that exits is restarted with the crash-loop
// back-off under restartPolicy Always; a failing container under Never leaves
// the pod Failed.
func TestRestartPolicyAndInitContainers(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("init.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: init
spec:
  initContainers:
  - {name: first, image: %[1]s, args: ["exit", "--after", "300ms", "0"]}
  - {name: second, image: %[1]s, args: ["exit", "0"]}
  containers:
  - {name: main, image: %[1]s, args: ["sleep"]}
`, testbox))
	a.WriteManifest("crash.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: crash
spec:
  containers:
  - {name: crash, image: %s, args: ["exit", "3"]}
`, testbox))
	a.WriteManifest("never.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: never
spec:
  restartPolicy: Never
  containers:
  - {name: fail, image: %s, args: ["exit", "4"]}
`, testbox))

	pod := a.WaitPod("init-e2e", "running", running)
	inits := pod.Status.InitContainerStatuses
	if len(inits) != 2 || inits[0].State.Terminated == nil || inits[1].State.Terminated == nil {
		t.Fatalf("init container statuses: %s", podSummary(pod))
	}
	if inits[1].State.Terminated.StartedAt.Before(&inits[0].State.Terminated.FinishedAt) {
		t.Errorf("init container second started at %v, before first finished at %v",
			inits[1].State.Terminated.StartedAt, inits[0].State.Terminated.FinishedAt)
	}
	if main := pod.Status.ContainerStatuses[0]; main.State.Running.StartedAt.Before(&inits[1].State.Terminated.FinishedAt) {
		t.Errorf("main started at %v before the last init container finished", main.State.Running.StartedAt)
	}

	crash := a.WaitPod("crash-e2e", "restarted twice, in back-off", func(p *v1.Pod) bool {
		c := p.Status.ContainerStatuses
		return len(c) == 1 && c[0].RestartCount >= 2 && c[0].State.Waiting != nil && c[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	if last := crash.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
		t.Errorf("last termination state %+v, want exit code 3", crash.Status.ContainerStatuses[0].LastTerminationState)
	}
	never := a.WaitPod("never-e2e", "failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if c := never.Status.ContainerStatuses; len(c) != 1 || c[0].RestartCount != 0 || c[0].State.Terminated == nil || c[0].State.Terminated.ExitCode != 4 {
		t.Errorf("never pod: %s", podSummary(never))
	}
}

// TestSidecarThenContainers: once a sidecar (a restartable init container)
// runs, the pod's next init container and then its regular container start
// at once, not at the next periodic sync: the periodic sync is set to 10
// minutes, beyond WaitPod's bound (issue 28 made one sync per start, and
// for a while the sidecar's start, being the sync's own, asked for none).
func TestSidecarThenContainers(t *testing.T) {
	a := StartAgent(t, Options{Config: "syncFrequency: 10m\n"})
	a.WriteManifest("sidecar.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: sidecar
spec:
  initContainers:
  - {name: helper, image: %[1]s, args: ["sleep"], restartPolicy: Always}
  - {name: after, image: %[1]s, args: ["exit", "0"]}
  - {name: helper2, image: %[1]s, args: ["sleep"], restartPolicy: Always}
  containers:
  - {name: main, image: %[1]s, args: ["sleep"]}
`, testbox))
	pod := a.WaitPod("sidecar-e2e", "running with both sidecars", func(p *v1.Pod) bool {
		return running(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	inits := pod.Status.InitContainerStatuses
	if len(inits) != 3 || inits[0].State.Running == nil || inits[1].State.Terminated == nil || inits[2].State.Running == nil {
		t.Fatalf("init container statuses: %s", podSummary(pod))
	}
}

// TestContainerConfig: env (values and the downward API), resources in the
// container's cgroup and oom_score_adj on the real process are what the spec
// and QoS ask for.
func TestContainerConfig(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("cfg.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: cfg
  labels: {app: cfg}
spec:
  containers:
  - name: env
    image: %[1]s
    args: ["serve", "--http", "8081"]
    env:
    - {name: PLAIN, value: "v1"}
    - {name: EXPANDED, value: "$(PLAIN)-x"}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: MEM_LIMIT
      valueFrom: {resourceFieldRef: {resource: limits.memory}}
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
  - name: log
    image: %[1]s
    args: ["env"]
    env:
    - {name: MARK, value: "from-the-spec"}
`, testbox))
	pod := a.WaitPod("cfg-e2e", "env container running", func(p *v1.Pod) bool {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == "env" && c.State.Running != nil {
				return true
			}
		}
		return false
	})
	if pod.Status.QOSClass != v1.PodQOSBurstable {
		t.Errorf("QoS class %s, want Burstable", pod.Status.QOSClass)
	}
	var envCtr string
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == "env" {
			envCtr = c.ContainerID
		}
	}
	pid := a.ContainerPID(envCtr)
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, want := range map[string]string{
		"PLAIN": "v1", "EXPANDED": "v1-x", "POD_NAME": "cfg-e2e", "POD_IP": pod.Status.PodIP, "MEM_LIMIT": strconv.Itoa(64 << 20),
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}

	// Resources: the container's memory cgroup has its limit, its cpu cgroup
	// the quota for 200m and shares for 100m; the pod's cgroup is under the
	// agent's cgroupRoot.
	cg := cgroupOf(t, pid, "memory")
	if !strings.HasPrefix(cg, a.CgroupRoot+"/kubepods/burstable/pod"+string(pod.UID)) {
		t.Errorf("container memory cgroup %s is not under %s/kubepods/burstable/pod%s", cg, a.CgroupRoot, pod.UID)
	}
	if integration.CgroupVersion() == 2 {
		// The same on v2 (runc's files), and memory.oom.group on (the
		// kubelet's default there: the container is OOM-killed as a whole);
		// the pod cgroup's cpu.weight is the agent's: the kubelet's
		// conversion since 1.35 of 102 shares.
		for file, want := range map[string]string{"memory.max": strconv.Itoa(64 << 20), "cpu.max": "20000 100000", "memory.oom.group": "1"} {
			if got := readString(t, cgroupFile(t, pid, "memory", file)); got != want {
				t.Errorf("%s %q, want %q", file, got, want)
			}
		}
		podCg := filepath.Join("/sys/fs/cgroup", a.CgroupRoot, "kubepods/burstable", "pod"+string(pod.UID))
		if got := readInt(t, filepath.Join(podCg, "cpu.weight")); got != 17 {
			t.Errorf("pod cpu.weight %d, want 17 (100m)", got)
		}
	} else {
		if got := readInt(t, cgroupFile(t, pid, "memory", "memory.limit_in_bytes")); got != 64<<20 {
			t.Errorf("memory.limit_in_bytes %d, want %d", got, 64<<20)
		}
		if got := readInt(t, cgroupFile(t, pid, "cpu", "cpu.cfs_quota_us")); got != 20000 {
			t.Errorf("cpu.cfs_quota_us %d, want 20000 (200m of a 100ms period)", got)
		}
		if got := readInt(t, cgroupFile(t, pid, "cpu", "cpu.shares")); got != 102 {
			t.Errorf("cpu.shares %d, want 102 (100m)", got)
		}
	}
	// Burstable with a 32Mi request: 1000 - 1000*request/capacity, at least 2
	// (bounds, not the figure: capacity is this machine's).
	if adj := readInt(t, fmt.Sprintf("/proc/%d/oom_score_adj", pid)); adj < 2 || adj > 999 {
		t.Errorf("Burstable container oom_score_adj %d, want within [2, 999]", adj)
	}

	// The log container printed its environment to its log file, in the
	// kubelet's layout.
	logFile := filepath.Join(a.Logs, fmt.Sprintf("default_cfg-e2e_%s", pod.UID), "log", "0.log")
	a.Eventually("the log container's output in "+logFile, 30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(logFile)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(b), "MARK=from-the-spec"), string(b)
	})

	// The resource metrics (what metrics-server reads) carry the running
	// container's working set, from its cgroup.
	sample := regexp.MustCompile(`(?m)^container_memory_working_set_bytes\{container="env",namespace="default",pod="cfg-e2e"\} ([0-9.e+]+) [0-9]+$`)
	a.Eventually("the env container's working set in /metrics/resource", 30*time.Second, func() (bool, string) {
		resp, err := http.Get(a.URL + "/metrics/resource")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := sample.FindSubmatch(b)
		if m == nil {
			return false, string(b)
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		return err == nil && v > 0 && v <= 64<<20, string(m[0])
	})

	// The cadvisor metrics carry the env container's working set and memory
	// limit, read from its own cgroup (the id label), and the pod sandbox's
	// ("POD") received bytes on its interface, from the pod's network
	// namespace.
	envLabels := fmt.Sprintf(`container="env",id="%s",image="%s",name="%s",namespace="default",pod="cfg-e2e"`,
		regexp.QuoteMeta(cg), regexp.QuoteMeta(testbox), regexp.QuoteMeta(envCtr[strings.Index(envCtr, "://")+3:]))
	workingSet := regexp.MustCompile(`(?m)^container_memory_working_set_bytes\{` + envLabels + `\} ([0-9.e+]+) [0-9]+$`)
	limit := regexp.MustCompile(`(?m)^container_spec_memory_limit_bytes\{` + envLabels + `\} ([0-9.e+]+)$`)
	received := regexp.MustCompile(`(?m)^container_network_receive_bytes_total\{container="POD",id="[^"]+",image="[^"]*",interface="[^"]+",name="[^"]+",namespace="default",pod="cfg-e2e"\} ([0-9.e+]+) [0-9]+$`)
	a.Eventually("the env container's series and its sandbox's network in /metrics/cadvisor", 30*time.Second, func() (bool, string) {
		resp, err := http.Get(a.URL + "/metrics/cadvisor")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ws, lim, rx := workingSet.FindSubmatch(b), limit.FindSubmatch(b), received.FindSubmatch(b)
		if ws == nil || lim == nil || rx == nil {
			return false, fmt.Sprintf("working set %q, limit %q, POD received %q in:\n%s", ws, lim, rx, b)
		}
		w, err1 := strconv.ParseFloat(string(ws[1]), 64)
		l, err2 := strconv.ParseFloat(string(lim[1]), 64)
		return err1 == nil && err2 == nil && w > 0 && l == 64<<20, fmt.Sprintf("%s%s%s", ws[0], lim[0], rx[0])
	})
}

// cgroupOf returns pid's cgroup path in the v1 hierarchy holding controller,
// or on cgroup v2 its one unified path (the "0::" line).
func cgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	v2 := integration.CgroupVersion() == 2
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return parts[2]
			}
		}
	}
	t.Fatalf("pid %d has no %s cgroup:\n%s", pid, controller, b)
	return ""
}

// cgroupFile returns the path of file in pid's cgroup of the v1 hierarchy
// holding controller, whether it is mounted alone (cpu) or co-mounted
// (cpu,cpuacct), or on cgroup v2 in its unified cgroup.
func cgroupFile(t *testing.T, pid int, controller, file string) string {
	t.Helper()
	cg := cgroupOf(t, pid, controller)
	if integration.CgroupVersion() == 2 {
		return filepath.Join("/sys/fs/cgroup", cg, file)
	}
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, m := range mounts {
		for _, c := range strings.Split(filepath.Base(m), ",") {
			if c == controller {
				return filepath.Join(m, cg, file)
			}
		}
	}
	t.Fatalf("no cgroup v1 hierarchy for %s under /sys/fs/cgroup", controller)
	return ""
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestAdoptAfterKill: an agent stopped with SIGTERM exits 0 and leaves its
// pods running; one killed with SIGKILL leaves its containerd running too,
// and the next agent adopts that containerd; each time the next agent adopts
// the pods without a restart. Then the managed containerd, killed under a
// running agent, is restarted and the pods are still there.
func TestAdoptAfterKill(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("web.yaml", webManifest("web", "adopt"))
	before := a.WaitPod("web-e2e", "running", running)
	ctr := before.Status.ContainerStatuses[0].ContainerID
	pid := a.ContainerPID(ctr)

	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Errorf("nodekeeper exited %d after SIGTERM, want 0", code)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the container process %d died with the agent's graceful stop: %v", pid, err)
	}
	a.Start()
	if c := a.WaitPod("web-e2e", "running after a graceful restart", running).Status.ContainerStatuses[0]; c.ContainerID != ctr || c.RestartCount != 0 {
		t.Errorf("after a graceful restart: container %s restarts %d; want %s and 0", c.ContainerID, c.RestartCount, ctr)
	}

	cpid := containerdPID(t, a)
	a.Stop(syscall.SIGKILL)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the container process %d died with the agent: %v", pid, err)
	}
	if p := containerdPIDOrZero(a); p != cpid {
		t.Fatalf("containerd pid %d after the agent's SIGKILL, want %d still running", p, cpid)
	}
	a.Start()
	if p := containerdPIDOrZero(a); p != cpid {
		t.Errorf("containerd pid %d after the agent's restart, want the adopted %d", p, cpid)
	}
	after := a.WaitPod("web-e2e", "running after the restart", running)
	if c := after.Status.ContainerStatuses[0]; c.ContainerID != ctr || c.RestartCount != 0 || after.UID != before.UID {
		t.Errorf("after the agent's restart: uid %s container %s restarts %d; want uid %s container %s restarts 0",
			after.UID, c.ContainerID, c.RestartCount, before.UID, ctr)
	}

	// containerd dies under the agent: it is restarted, the pod stays.
	if err := syscall.Kill(cpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.Eventually("a new containerd", 60*time.Second, func() (bool, string) {
		p := containerdPIDOrZero(a)
		return p != 0 && p != cpid, fmt.Sprintf("pid %d", p)
	})
	again := a.WaitPod("web-e2e", "running after containerd's restart", running)
	if c := again.Status.ContainerStatuses[0]; c.ContainerID != ctr || c.RestartCount != 0 {
		t.Errorf("after containerd's restart: container %s restarts %d; want %s and 0", c.ContainerID, c.RestartCount, ctr)
	}
}

// containerdPIDOrZero finds the agent's containerd by its config path.
func containerdPIDOrZero(a *Agent) int {
	cfg := filepath.Join(a.Root, "containerd", "config.toml")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == "containerd" && strings.Contains(string(b), cfg) {
			return pid
		}
	}
	return 0
}

func containerdPID(t *testing.T, a *Agent) int {
	t.Helper()
	if p := containerdPIDOrZero(a); p != 0 {
		return p
	}
	t.Fatal("the agent's containerd is not running")
	return 0
}

// TestInvalidManifests: manifests with an unknown field, a bad quantity, a
// name that is not a DNS name and a duplicate name are reported (file and
// field) and skipped; the valid pod runs.
func TestInvalidManifests(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("good.yaml", webManifest("good", "x"))
	a.WriteManifest("unknown.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: u}\nspec:\n  containers:\n  - {name: c, image: x, colour: blue}\n")
	a.WriteManifest("quantity.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: q}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources: {limits: {memory: 12ZZ}}\n")
	a.WriteManifest("name.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: Not_A_Name}\nspec:\n  containers:\n  - {name: c, image: x}\n")
	a.WriteManifest("zdup.yaml", webManifest("good", "duplicate"))
	// No registry is reachable: an image that is not on the node fails to
	// pull, and the kubelet's waiting reasons show it.
	a.WriteManifest("pull.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: pull}\nspec:\n  containers:\n  - {name: c, image: localhost:1/nope:1}\n")
	a.WaitPod("good-e2e", "running", running)
	a.WaitPod("pull-e2e", "waiting in ErrImagePull or ImagePullBackOff", func(p *v1.Pod) bool {
		c := p.Status.ContainerStatuses
		return len(c) == 1 && c[0].State.Waiting != nil &&
			(c[0].State.Waiting.Reason == "ErrImagePull" || c[0].State.Waiting.Reason == "ImagePullBackOff")
	})
	a.Eventually("every bad manifest reported", 30*time.Second, func() (bool, string) {
		log := a.Log()
		for _, want := range []string{"unknown.yaml", "colour", "quantity.yaml", "12ZZ", "name.yaml", "Not_A_Name", "zdup.yaml"} {
			if !strings.Contains(log, want) {
				return false, "log does not mention " + want
			}
		}
		return true, ""
	})
	pods, err := a.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 {
		t.Errorf("%d pods, want good-e2e and pull-e2e", len(pods))
	}
}
