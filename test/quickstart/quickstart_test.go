// Package quickstart runs examples/run.sh, the README's quick start, for
// real: as root, on a state directory, cgroup root, pod network and healthz
// port of its own (never /var/lib/nodekeeper, the bridge nk0 or the default
// ports). It checks that run shows the example pods Running, that stop
// removes them and a pod made with `nodekeeper apply`, that uninstall
// removes the bridge, the cgroups, the directory and the pods' iptables
// rules, that a taken port ends run at once, and the dpkg-lock wait.
package quickstart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"golang.org/x/sys/unix"

	"github.com/nodekeeper/nodekeeper/internal/daemon"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/syncbuf"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// repo is the repository's root; script is examples/run.sh in it.
var (
	repo, _ = filepath.Abs("../..")
	script  = filepath.Join(repo, "examples", "run.sh")
)

// examplePods are the static pods of examples/pods on the node "example".
var examplePods = []string{"besteffort-example", "burstable-example", "guaranteed-example", "init-example", "sidecar-example", "web-example"}

// available reports why run.sh cannot run here without installing
// anything, or "".
func available() string {
	if why := containerdtest.Available(); why != "" {
		return why
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			return "CNI plugins not found in /usr/lib/cni (Debian package containernetworking-plugins)"
		}
	}
	for _, c := range []string{"make", "iptables", "iptables-save", "ip", "flock"} {
		if _, err := exec.LookPath(c); err != nil {
			return c + " not found in PATH"
		}
	}
	return ""
}

// slow is integration.Slow: d scaled for the cgroup v2 lane's emulated VM.
func slow(t testing.TB, d time.Duration) time.Duration { return integration.Slow(t, d) }

// node is one run.sh setup of a test's own: the names test/e2e's harness
// uses (a short /tmp/nke- directory, cgroup root /nke-XXXXXXXX, a random
// 10.150-189.x.0/24 pod network).
type node struct {
	t                         testing.TB
	dir, root, conf, podsFile string
	cgroupRoot, podCIDR       string
	healthz                   int
}

// newNode writes the configuration: examples/nodekeeper.yaml's with the
// test's cgroup root, pod network, pod log directory and healthz port, and
// image GC and disk eviction thresholds the machine's disk does not reach
// (integration.HostDiskNeutral: CI failed with the example pods in
// ImagePullBackOff when another run took this disk past 85 % used).
func newNode(t testing.TB, healthz int) *node {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "nke-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{
		t: t, dir: dir, root: filepath.Join(dir, "root"), conf: filepath.Join(dir, "nodekeeper.yaml"),
		cgroupRoot: fmt.Sprintf("/nke-%08x", rand.Uint32()),
		podCIDR:    fmt.Sprintf("10.%d.%d.0/24", 150+rand.IntN(40), rand.IntN(256)),
		healthz:    healthz,
	}
	example, err := os.ReadFile(filepath.Join(repo, "examples", "nodekeeper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("%scgroupRoot: %s\npodCIDR: %s\npodLogsDir: %s\nhealthzPort: %d\n%s",
		example, n.cgroupRoot, n.podCIDR, filepath.Join(dir, "logs"), healthz, integration.HostDiskNeutral(string(example)))
	if err := os.WriteFile(n.conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// command is run.sh ARGS on n's root directory and configuration, in a
// process group of its own (Ctrl-C's reach: the script and the agent).
func (n *node) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, script, append([]string{"--config", n.conf}, args...)...)
	cmd.Env = append(os.Environ(), "NODEKEEPER_EXAMPLE_ROOT="+n.root,
		"PATH="+filepath.Dir(toolbuild.GoTool())+":"+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// script runs run.sh ARGS to its end within timeout and returns its exit
// code and what it wrote.
func (n *node) script(ctx context.Context, timeout time.Duration, args ...string) (int, string, string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := n.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		n.t.Fatalf("run.sh %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		n.t.Fatalf("run.sh %s did not end within %v; stderr:\n%s", strings.Join(args, " "), timeout, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// bridge is the CNI bridge nodekeeper names after the root directory.
func (n *node) bridge() string { return daemon.BridgeName(n.root) }

// processesOf lists the processes whose command line names the root
// directory (the agent, its containerd, the shims).
func (n *node) processesOf() []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(n.root+"/")) {
			out = append(out, filepath.Base(filepath.Dir(p))+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// cgroupDirs lists the directories of the test's cgroup root, in every
// hierarchy.
func (n *node) cgroupDirs() []string {
	var out []string
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range append(hierarchies, "/sys/fs/cgroup") {
		_ = filepath.WalkDir(filepath.Join(h, n.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// cleanup removes whatever a failed test left: through run.sh uninstall,
// then as test/e2e's harness does.
func (n *node) cleanup() {
	t := n.t
	if b, err := os.ReadFile(filepath.Join(n.root, "nodekeeper.log")); err == nil && t.Failed() {
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("the agent's log (tail):\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
	}
	if _, err := os.Stat(n.root); err == nil {
		// t.Context() has ended: cleanups run after it.
		code, _, stderr := n.script(context.Background(), slow(t, 5*time.Minute), "uninstall")
		if code != 0 {
			t.Logf("cleanup: run.sh uninstall exit %d:\n%s", code, stderr)
		}
	}
	if _, err := os.Stat(n.root); err == nil {
		if pid, _, err := daemon.StopRuntime(n.root, 10*time.Second); err != nil || pid != 0 {
			t.Logf("cleanup: stopped the containerd left, pid %d: %v", pid, err)
		}
	}
	containerdtest.RemoveState(t, n.dir, filepath.Join(n.root, "containerd", "containerd.sock"), n.bridge())
	dirs := n.cgroupDirs()
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil {
			t.Logf("cleanup: remove cgroup %s: %v", dirs[i], err)
		}
	}
	_ = os.RemoveAll(n.dir)
}

// lastTable parses the last pods' table in out: STATUS and READY by NAME.
func lastTable(out string) map[string][2]string {
	i := strings.LastIndex(out, "NAMESPACE ")
	if i < 0 {
		return nil
	}
	rows := map[string][2]string{}
	for line := range strings.Lines(out[i:]) {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] != "NAMESPACE" {
			rows[f[1]] = [2]string{f[3], f[2]}
		}
	}
	return rows
}

// allRunning reports whether every pod of names is Running with all its
// containers ready in table, and which is not.
func allRunning(table map[string][2]string, names ...string) (bool, string) {
	for _, name := range names {
		r, ok := table[name]
		ready := strings.Split(r[1], "/")
		if !ok || r[0] != "Running" || len(ready) != 2 || ready[0] != ready[1] {
			return false, fmt.Sprintf("%s: %v (table %v)", name, r, table)
		}
	}
	return true, ""
}

// eventually polls check every 200 ms until it is true, failing after
// timeout with its last note. It polls outside processes' state.
func eventually(t testing.TB, what string, timeout time.Duration, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, note := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, note)
		}
		time.Sleep(200 * time.Millisecond) // an outside process's state, not a goroutine of ours
	}
}

// TestQuickStart: an agent that fails leaves its log's last lines on the
// screen; run.sh run shows the six example pods Running; a pod
// made with `nodekeeper apply` runs beside them; Ctrl-C stops the agent
// (exit 0); run.sh stop removes every pod, the applied one included
// (before, stop failed after 2 min with the IDs glued together, the agent
// re-creating the applied pod), and leaves no process, container or pod
// cgroup; run.sh uninstall removes the bridge, the cgroups, the root
// directory and every iptables rule of the pods.
func TestQuickStart(t *testing.T) {
	integration.Require(t, available())
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := newNode(t, port)
	t.Cleanup(n.cleanup)

	// An agent that fails (here on a bad field, with its usage exit 2):
	// run.sh exits with its status, printing the log's last lines and the
	// log's path; -v also shows the log as it is written. This run builds.
	good, err := os.ReadFile(n.conf)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(n.dir, "bad.yaml")
	if err := os.WriteFile(bad, append(good, "maxPods: -3\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(n.root, "nodekeeper.log")
	for _, verbose := range []bool{false, true} {
		args := []string{"--config", bad} // the last --config counts
		if verbose {
			args = append(args, "-v")
		}
		code, _, serr := n.script(t.Context(), slow(t, 12*time.Minute), append(args, "run")...)
		tailAt := strings.Index(serr, "run.sh: nodekeeper exited with status 2; the last lines of its log, "+log+":\n")
		if code != 2 || tailAt < 0 || !strings.Contains(serr[tailAt:], "maxPods") {
			t.Fatalf("run.sh -v=%t with maxPods -3: exit %d, want 2 with the log's last lines naming maxPods; stderr:\n%s", verbose, code, serr)
		}
		if shown := strings.Contains(serr[:tailAt], "maxPods"); shown != verbose {
			t.Errorf("run.sh -v=%t: the agent's log on the screen before the tail: %t, want %t; stderr:\n%s", verbose, shown, verbose, serr)
		}
	}

	cmd := n.command(t.Context())
	stdout, stderr := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	running := func(names ...string) func() (bool, string) {
		return func() (bool, string) {
			select {
			case <-exited:
				t.Fatalf("run.sh exited (%v) before the pods ran; stderr:\n%s\nstdout:\n%s", cmd.ProcessState, stderr.String(), stdout.String())
			default:
			}
			return allRunning(lastTable(stdout.String()), names...)
		}
	}
	// The checks and build (done above), then the pods' start.
	begin := time.Now()
	eventually(t, "run.sh to build and start nodekeeper", slow(t, 12*time.Minute), func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("run.sh exited (%v) before it started nodekeeper; stderr:\n%s", cmd.ProcessState, stderr.String())
		default:
		}
		return strings.Contains(stderr.String(), "run.sh: starting nodekeeper"), stderr.String()
	})
	built := time.Now()
	eventually(t, "the six example pods Running in run.sh's table", slow(t, 3*time.Minute), running(examplePods...))
	t.Logf("run.sh: checks and build %v, then the six pods Running %v later", built.Sub(begin).Round(time.Second), time.Since(built).Round(time.Second))
	for _, w := range []string{"run.sh: building nodekeeper", "run.sh: starting nodekeeper; its log: " + filepath.Join(n.root, "nodekeeper.log")} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("run.sh's progress does not say %q:\n%s", w, stderr.String())
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), "level=INFO") {
		t.Errorf("the agent's log reached the screen without -v:\n%s", stderr.String())
	}

	nk := filepath.Join(repo, "bin", "nodekeeper")
	podFile := filepath.Join(n.dir, "applied.yaml")
	if err := os.WriteFile(podFile, []byte(`apiVersion: v1
kind: Pod
metadata: {name: applied}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: localhost/nodekeeper/testbox:1
    args: ["sleep"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(nk, "apply", "-f", podFile, "--root-dir", n.root).CombinedOutput(); err != nil {
		t.Fatalf("nodekeeper apply: %v\n%s", err, out)
	}
	eventually(t, "the applied pod Running in the table", slow(t, 2*time.Minute), running("applied"))

	// Each pod's address, and the rule the bridge plugin's ipMasq wrote
	// for it: uninstall must leave none.
	out, err := exec.Command(nk, "get", "pods", "-o", "json", "--root-dir", n.root).Output()
	if err != nil {
		t.Fatalf("nodekeeper get pods -o json: %v", err)
	}
	var list v1.PodList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("get pods -o json: %v", err)
	}
	var ips []string
	for _, p := range list.Items {
		if p.Status.PodIP != "" && !p.Spec.HostNetwork {
			ips = append(ips, p.Status.PodIP)
		}
	}
	if len(ips) != 7 {
		t.Fatalf("%d pod IPs, want 7 (six example pods and the applied one): %v", len(ips), ips)
	}
	rules := func() string {
		out, err := exec.Command("iptables-save").Output()
		if err != nil {
			t.Fatalf("iptables-save: %v", err)
		}
		var b strings.Builder
		for line := range strings.Lines(string(out)) {
			for _, ip := range ips {
				if strings.Contains(line, " "+ip+"/32 ") || strings.Contains(line, " "+ip+" ") {
					b.WriteString(line)
				}
			}
		}
		return b.String()
	}
	if r := rules(); !strings.Contains(r, ips[0]+"/32") {
		t.Fatalf("iptables-save names no rule of the pod %s (the check of uninstall would prove nothing):\n%s", ips[0], r)
	}

	// stop while the agent runs: refused, naming it; nothing removed.
	code, _, serr := n.script(t.Context(), slow(t, time.Minute), "stop")
	if code != 1 || !strings.Contains(serr, "run.sh: nodekeeper is running on "+n.root+" (pid ") {
		t.Fatalf("run.sh stop beside a running agent: exit %d, want 1 saying nodekeeper is running; stderr:\n%s", code, serr)
	}
	if ok, why := running(examplePods...)(); !ok {
		t.Fatalf("the refused stop touched the pods: %s", why)
	}

	// Ctrl-C: the agent stops, the pods keep running.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(slow(t, 2*time.Minute)):
		t.Fatalf("run.sh did not end within 2 min of Ctrl-C; stderr:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(stderr.String(), "run.sh: nodekeeper stopped; the pods keep running") {
		t.Fatalf("after Ctrl-C: exit %d, want 0 (the agent's, shut down cleanly) with the line saying the pods keep running; stderr:\n%s", code, stderr.String())
	}

	begin = time.Now()
	code, _, serr = n.script(t.Context(), slow(t, 5*time.Minute), "stop")
	t.Logf("run.sh stop took %v:\n%s", time.Since(begin).Round(time.Second), serr)
	// Seven pods, or more where a sandbox was made again meanwhile.
	if code != 0 || !regexp.MustCompile(`run\.sh: stopped: removed ([7-9]|\d\d+) pods \(1 of them made by nodekeeper apply\)`).MatchString(serr) {
		t.Fatalf("run.sh stop: exit %d, want 0 with the summary line; stderr:\n%s", code, serr)
	}
	if ps := n.processesOf(); len(ps) > 0 {
		t.Errorf("after stop, processes of the root directory are left:\n%s", strings.Join(ps, "\n"))
	}
	for _, d := range []string{"containerd/runc/k8s.io", "containerd/state/io.containerd.runtime.v2.task/k8s.io"} {
		if entries, _ := os.ReadDir(filepath.Join(n.root, d)); len(entries) > 0 {
			t.Errorf("after stop, %s holds %d containers (sandboxes or shims)", d, len(entries))
		}
	}
	for _, d := range n.cgroupDirs() {
		if strings.HasPrefix(filepath.Base(d), "pod") {
			t.Errorf("after stop, a pod cgroup is left: %s", d)
		}
	}
	if b, err := os.ReadFile(filepath.Join(n.root, "local-pods.json")); err == nil && bytes.Contains(b, []byte(`"applied"`)) {
		t.Errorf("after stop, the applied pod is still in local-pods.json: the next run would re-create it")
	}

	begin = time.Now()
	// The CNI plugins removed each pod's rules when stop removed the pods.
	if r := rules(); r != "" {
		t.Errorf("after stop, iptables rules of the pods are left:\n%s", r)
	}
	// A pod whose network was never torn down (its address still
	// allocated in host-local's directory, its rules there): the test makes
	// one, in its own pod network, as the bridge plugin's ipMasq would.
	leftover := n.leftoverPodRules()
	ips = append(ips, leftover.ip)
	if r := rules(); !strings.Contains(r, leftover.chain) {
		t.Fatalf("the test's leftover rules are not in iptables-save:\n%s", r)
	}

	begin = time.Now()
	code, _, serr = n.script(t.Context(), slow(t, 5*time.Minute), "uninstall")
	t.Logf("run.sh uninstall took %v:\n%s", time.Since(begin).Round(time.Second), serr)
	if code != 0 {
		t.Fatalf("run.sh uninstall: exit %d; stderr:\n%s", code, serr)
	}
	for _, w := range []string{"removed 2 iptables rules of pods whose network was not torn down", "removed the bridge " + n.bridge(), "removed the cgroups", "removed " + n.root, "the apt packages stay"} {
		if !strings.Contains(serr, w) {
			t.Errorf("run.sh uninstall does not say %q:\n%s", w, serr)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + n.bridge()); err == nil {
		t.Errorf("after uninstall, the bridge %s is left", n.bridge())
	}
	if dirs := n.cgroupDirs(); len(dirs) > 0 {
		t.Errorf("after uninstall, cgroups are left:\n%s", strings.Join(dirs, "\n"))
	}
	if _, err := os.Stat(n.root); !os.IsNotExist(err) {
		t.Errorf("after uninstall, the root directory is left (%v)", err)
	}
	if r := rules(); r != "" || leftover.exists() {
		t.Errorf("after uninstall, iptables rules of the pods are left (chain %s there: %t):\n%s", leftover.chain, leftover.exists(), r)
	}
}

// podRules are iptables rules of a pod of the test's own.
type podRules struct {
	t         testing.TB
	ip, chain string
}

// leftoverPodRules makes what a pod whose CNI DEL never ran leaves: its
// address allocated in host-local's directory under the root, a nat chain
// CNI-... with the bridge plugin's comment naming the sandbox, and the
// POSTROUTING rule that jumps to it. A cleanup removes the rules.
func (n *node) leftoverPodRules() podRules {
	t := n.t
	t.Helper()
	id := fmt.Sprintf("%016x%016x%016x%016x", rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64())
	p := podRules{t: t, ip: strings.TrimSuffix(n.podCIDR, "0/24") + "250", chain: "CNI-" + id[:20]}
	comment := fmt.Sprintf(`name: "nodekeeper" id: "%s"`, id)
	t.Cleanup(func() {
		_ = exec.Command("iptables", "-t", "nat", "-D", "POSTROUTING", "-s", p.ip+"/32", "-m", "comment", "--comment", comment, "-j", p.chain).Run()
		_ = exec.Command("iptables", "-t", "nat", "-F", p.chain).Run()
		_ = exec.Command("iptables", "-t", "nat", "-X", p.chain).Run()
	})
	for _, args := range [][]string{
		{"-N", p.chain},
		{"-A", p.chain, "-d", n.podCIDR, "-m", "comment", "--comment", comment, "-j", "ACCEPT"},
		{"-A", "POSTROUTING", "-s", p.ip + "/32", "-m", "comment", "--comment", comment, "-j", p.chain},
	} {
		if out, err := exec.Command("iptables", append([]string{"-t", "nat"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v\n%s", args, err, out)
		}
	}
	dir := filepath.Join(n.root, "containerd", "cni", "networks", "nodekeeper")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, p.ip), []byte(id+"\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// exists reports whether the chain is still in the nat table.
func (p podRules) exists() bool {
	return exec.Command("iptables", "-t", "nat", "-n", "-L", p.chain).Run() == nil
}

// TestQuickStartPortTaken: a process listening on the configured healthz
// port ends run.sh within seconds, exit 1, naming the port, healthzPort and
// the --config way out, before it builds or starts anything (the agent
// itself would only log it: its healthz listener retries, as the
// kubelet's).
func TestQuickStartPortTaken(t *testing.T) {
	integration.Require(t, available())
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	n := newNode(t, port)
	t.Cleanup(func() { _ = os.RemoveAll(n.dir) })
	start := time.Now()
	code, stdout, stderr := n.script(t.Context(), slow(t, time.Minute), "run")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{fmt.Sprintf("port %d (healthzPort", port), "set healthzPort in a copy of examples/nodekeeper.yaml and pass --config FILE"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "building") || stdout != "" {
		t.Errorf("run.sh went on past the port check; stdout %q, stderr:\n%s", stdout, stderr)
	}
	if _, err := os.Stat(n.root); !os.IsNotExist(err) {
		t.Errorf("the root directory was made (%v): something started", err)
	}
	t.Logf("run.sh refused the taken port in %v", time.Since(start).Round(time.Millisecond))
}

// TestWaitForLocks: run.sh's wait for dpkg's lock, on a lock file of the
// test's own that it holds as dpkg does (fcntl): a message naming the file
// and the holder every period, then exit 1 after the timeout; and exit 0 as
// soon as the lock is released.
func TestWaitForLocks(t *testing.T) {
	t.Parallel()
	lock := func(t *testing.T) (string, func()) {
		path := filepath.Join(t.TempDir(), "lock-frontend")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
			t.Fatal(err)
		}
		return path, func() {
			if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_UNLCK}); err != nil {
				t.Error(err)
			}
		}
	}
	wait := func(ctx context.Context, timeout int, files ...string) *exec.Cmd {
		args := append([]string{"-c", `source "$1" && shift && wait_for_locks "$@"`, "bash", script, strconv.Itoa(timeout), "1", "/nonexistent/lock"}, files...)
		return exec.CommandContext(ctx, "bash", args...)
	}
	held := fmt.Sprintf("is held by pid %d (", os.Getpid())

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		path, _ := lock(t)
		var stderr bytes.Buffer
		cmd := wait(t.Context(), 2, path)
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("wait_for_locks: %v, want exit 1; stderr:\n%s", err, stderr.String())
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("gave up after %v, before its 2 s", d)
		}
		msg := stderr.String()
		if got := strings.Count(msg, "run.sh: waiting for the dpkg lock: "+path+" "+held); got < 2 {
			t.Errorf("%d messages naming the file and the holder, want one a second:\n%s", got, msg)
		}
		if !strings.Contains(msg, "run.sh: "+path+" is still locked by pid "+strconv.Itoa(os.Getpid())) {
			t.Errorf("no last line saying it is still locked:\n%s", msg)
		}
	})

	t.Run("released", func(t *testing.T) {
		t.Parallel()
		path, unlock := lock(t)
		cmd := wait(t.Context(), 300, path)
		r, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(r)
		if !sc.Scan() || !strings.Contains(sc.Text(), held) {
			t.Fatalf("first line %q (%v), want the wait's message naming pid %d", sc.Text(), sc.Err(), os.Getpid())
		}
		unlock()
		done := make(chan error, 1)
		go func() {
			_, _ = io.Copy(io.Discard, r)
			done <- cmd.Wait()
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("wait_for_locks after the release: %v, want exit 0", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("wait_for_locks still waits 30 s after the lock was released")
		}
	})
}

// TestRunShUsage: bad arguments and a user other than root: exit 2 with a
// one-line reason, before anything is installed or started.
func TestRunShUsage(t *testing.T) {
	t.Parallel()
	// A copy nobody may run: the checkout may be in a directory only root
	// can enter.
	dir, err := os.MkdirTemp("/tmp", "nke-usage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "k.yaml")
	if err := os.WriteFile(conf, []byte("kind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		notRoot bool
		want    string
	}{
		{name: "unknown argument", args: []string{"clean-all"}, want: "run.sh: unknown argument clean-all"},
		{name: "two modes", args: []string{"run", "stop"}, want: "run.sh: one of run, stop or uninstall, not run and stop"},
		{name: "missing config", args: []string{"--config", "/nonexistent/k.yaml"}, want: "run.sh: --config /nonexistent/k.yaml: no such readable file"},
		{name: "not root", args: []string{"--config", conf}, notRoot: true, want: "run.sh: nodekeeper runs containers and manages cgroups: run this as root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), copied, tc.args...)
			if tc.notRoot && os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("%v, want exit 2; stderr:\n%s", err, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.HasPrefix(first, tc.want) {
				t.Errorf("first line %q, want %q", first, tc.want)
			}
		})
	}
}
