// Command killtest kills `nodekeeper run` with SIGKILL at random points while
// static pods are created and deleted, restarts it each time, and then checks
// that nothing was lost or leaked: every pod whose manifest is there runs
// exactly once, the pods that ran from the start were never restarted, no
// containerd shim, task directory or process of a deleted pod is left, and the
// agent's state files parse. `make killtest` runs it (it needs root,
// containerd, runc and the CNI plugins, and takes minutes); its output ends
// with the numbers, and it exits 1 when one of them is not 0.
//
//	go run ./test/killtest -bin bin/nodekeeper -images bin/images -n 50
//
// Everything it makes (a directory under /tmp, a cgroup root, a CNI bridge)
// is removed at the end; the agent's containerd and shims it stops through the
// agent, and kills only processes serving its own containerd socket.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/daemon"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
)

// stablePods run from the start to the end: their containers must never
// restart.
const stablePods = 3

// nodeName is the agent's --hostname-override; static pod names end in it.
const nodeName = "kt"

func main() {
	bin := flag.String("bin", "bin/nodekeeper", "the nodekeeper binary")
	images := flag.String("images", "bin/images", "the image directory (make images)")
	n := flag.Int("n", 50, "how many times the agent is killed")
	maxUp := flag.Duration("max-up", 8*time.Second, "the longest the agent runs before it is killed")
	seed := flag.Uint64("seed", 0, "random seed (0: from the clock)")
	settle := flag.Duration("settle", time.Minute, "how long the last agent may take to clean up before what is left counts as leaked")
	keep := flag.Bool("keep", false, "keep the directory (and leave the agent's last run) for inspection")
	flag.Parse()
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ok, err := run(*bin, *images, *n, *maxUp, *settle, *seed, *keep)
	if err != nil {
		fmt.Fprintf(os.Stderr, "killtest: %v\n", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// env is one run's directories and settings.
type env struct {
	bin, dir, root, manifests, config, log string
	cgroupRoot, healthz                    string
	podCIDR                                string // the agent's, so its CNI rules are told from others'
	rnd                                    *rand.Rand
	args                                   []string
}

func (e *env) socket() string { return filepath.Join(e.root, "containerd", "containerd.sock") }

func run(bin, images string, n int, maxUp, settle time.Duration, seed uint64, keep bool) (bool, error) {
	if os.Geteuid() != 0 {
		return false, errors.New("needs root (it runs containers and manages cgroups)")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return false, err
	}
	dir, err := os.MkdirTemp("/tmp", "nkk-")
	if err != nil {
		return false, err
	}
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	e := &env{
		bin: bin, dir: dir, root: filepath.Join(dir, "root"), manifests: filepath.Join(dir, "manifests"),
		config: filepath.Join(dir, "config.yaml"), log: filepath.Join(dir, "agent.log"),
		cgroupRoot: "/" + filepath.Base(dir), rnd: rnd, // unique as the directory
	}
	fmt.Printf("killtest: seed %d, %d kills, dir %s\n", seed, n, dir)
	if !keep {
		defer e.teardown()
	}
	port, err := freePort()
	if err != nil {
		return false, err
	}
	e.healthz = fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	e.podCIDR = fmt.Sprintf("10.%d.%d.0/24", 150+rand.IntN(40), rand.IntN(256))
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
staticPodPath: %s
podLogsDir: %s
cgroupRoot: %s
podCIDR: %s
readOnlyPort: 0
healthzPort: %d
fileCheckFrequency: 1s
`, e.manifests, filepath.Join(dir, "logs"), e.cgroupRoot, e.podCIDR, port)
	if err := os.MkdirAll(e.manifests, 0o755); err != nil {
		return false, err
	}
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		return false, err
	}
	e.args = []string{"run", "--config", e.config, "--root-dir", e.root, "--image-dir", images,
		"--hostname-override", nodeName, "--status-interval", "0"}

	// The stable pods run before the first kill.
	for i := range stablePods {
		if err := e.writeManifest(fmt.Sprintf("stable-%d", i)); err != nil {
			return false, err
		}
	}
	a, err := e.start()
	if err != nil {
		return false, err
	}
	if err := e.waitHealthy(a, 120*time.Second); err != nil {
		a.kill()
		return false, err
	}
	c, err := cri.New("unix://"+e.socket(), cri.Options{Timeout: 30 * time.Second})
	if err != nil {
		a.kill()
		return false, err
	}
	defer c.Close()
	first, err := e.converge(c, 180*time.Second)
	if err != nil {
		a.kill()
		return false, fmt.Errorf("before the first kill: %w", err)
	}
	stable := map[string]string{} // pod name -> its container's ID
	for name, ids := range first.running {
		if strings.HasPrefix(name, "stable-") {
			stable[name] = ids[0]
		}
	}

	var created, deleted, early int
	next := 0 // the next churn pod's number
	for i := range n {
		if i > 0 {
			if a, err = e.start(); err != nil {
				return false, err
			}
		}
		// Kill at a random point of its life: during start-up, adoption,
		// pod creation or deletion.
		up := time.Duration(e.rnd.Int64N(int64(maxUp)))
		deadline := time.Now().Add(up)
		for time.Now().Before(deadline) {
			step := min(time.Duration(e.rnd.Int64N(int64(1500*time.Millisecond))), time.Until(deadline))
			time.Sleep(step)
			c, d, err := e.churn(&next)
			if err != nil {
				a.kill()
				return false, err
			}
			created, deleted = created+c, deleted+d
		}
		if !healthy(e.healthz) {
			early++
		}
		a.kill()
		fmt.Printf("killtest: kill %d/%d after %s\n", i+1, n, up.Round(time.Millisecond))
	}

	// The last agent: it must reach exactly the pods the manifests say.
	if a, err = e.start(); err != nil {
		return false, err
	}
	if err := e.waitHealthy(a, 120*time.Second); err != nil {
		a.kill()
		return false, err
	}
	final, cerr := e.converge(c, 180*time.Second)
	if cerr != nil {
		fmt.Printf("killtest: %v\n", cerr)
	}
	restarts := 0
	for name, id := range stable {
		if ids := final.running[name]; len(ids) != 1 || ids[0] != id || final.attempts[id] != 0 {
			fmt.Printf("killtest: stable pod %s: containers %v, want %s (attempt 0)\n", name, ids, id)
			restarts++
		}
	}
	// What is left after the agent had settle to clean up is leaked: the
	// agent reaps a `runc init` that an interrupted start left at its first
	// pass after it started (containerd's reapInterval, 20 s), not at once.
	var leaks leakCounts
	for deadline := time.Now().Add(settle); ; {
		last := !time.Now().Before(deadline)
		if leaks, err = e.leaks(final, last); err != nil {
			a.kill()
			return false, err
		}
		if leaks.total() == 0 || last {
			break
		}
		time.Sleep(2 * time.Second)
		if s, err := e.converge(c, 30*time.Second); err == nil {
			final = s
		}
	}
	corrupt := e.corruptState()

	// The end: every pod removed through the agent, then the agent stopped
	// gracefully (which stops its containerd).
	if !keep {
		e.removeAll(c, a)
	}
	fmt.Printf("killtest: %d kills (%d before the agent answered /healthz), %d pods created and %d deleted during the kills\n",
		n, early, created, deleted)
	fmt.Printf("killtest: leaked shims %d, leaked processes %d, stale task dirs %d, leaked CNI rules %d, lost pods %d, duplicated pods %d, restarts of adopted containers %d, corrupt state files %d\n",
		leaks.shims, leaks.procs, leaks.taskDirs, leaks.rules, final.lost, final.duplicated, restarts, corrupt)
	return cerr == nil && leaks.total()+final.lost+final.duplicated+restarts+corrupt == 0, nil
}

// agent is a running `nodekeeper run`.
type agent struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (e *env) start() (*agent, error) {
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- killtest: start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(e.bin, e.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &agent{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(a.exited) }()
	return a, nil
}

// kill SIGKILLs the agent (only its own process) and waits for its exit.
func (a *agent) kill() {
	_ = a.cmd.Process.Kill()
	<-a.exited
}

// stop SIGTERMs the agent and waits for its exit (SIGKILL after 90s).
func (a *agent) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(90 * time.Second):
		a.kill()
	}
}

func healthy(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (e *env) waitHealthy(a *agent, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !healthy(e.healthz) {
		select {
		case <-a.exited:
			return fmt.Errorf("the agent exited at start; see %s", e.log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent did not answer /healthz within %s; see %s", timeout, e.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeManifest writes the static pod name's manifest (atomically: the
// agent never reads half of it).
func (e *env) writeManifest(name string) error {
	body := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    args: ["serve", "--http", "8080"]
`, name, ocibuild.TestboxRef)
	tmp := filepath.Join(e.dir, name+".yaml.tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(e.manifests, name+".yaml"))
}

// churn adds a churn pod, removes one, or both, at random; it returns how
// many it created and deleted.
func (e *env) churn(next *int) (created, deleted int, err error) {
	churned, err := e.desired()
	if err != nil {
		return 0, 0, err
	}
	churned = slices.DeleteFunc(churned, func(n string) bool { return strings.HasPrefix(n, "stable-") })
	switch r := e.rnd.IntN(3); {
	case r == 0 || len(churned) < 2:
		*next++
		return 1, 0, e.writeManifest(fmt.Sprintf("churn-%d", *next))
	case r == 1 || len(churned) > 6:
		victim := churned[e.rnd.IntN(len(churned))]
		return 0, 1, os.Remove(filepath.Join(e.manifests, victim+".yaml"))
	default:
		*next++
		if err := e.writeManifest(fmt.Sprintf("churn-%d", *next)); err != nil {
			return 0, 0, err
		}
		victim := churned[e.rnd.IntN(len(churned))]
		return 1, 1, os.Remove(filepath.Join(e.manifests, victim+".yaml"))
	}
}

// desired lists the pods whose manifests are there, by manifest name.
func (e *env) desired() ([]string, error) {
	es, err := os.ReadDir(e.manifests)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range es {
		if n, ok := strings.CutSuffix(de.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	return names, nil
}

// state is what the runtime runs, by manifest name.
type state struct {
	running    map[string][]string // RUNNING container IDs per pod
	ready      map[string][]string // READY sandbox IDs per pod
	attempts   map[string]uint32   // attempt per container ID
	sandboxes  map[string]bool     // every sandbox ID, READY or not
	containers map[string]bool     // every container ID
	podUIDs    map[string]bool     // UIDs of READY sandboxes
	lost       int                 // desired pods not running
	duplicated int                 // desired pods running more than once
	extra      int                 // pods running without a manifest
}

// observe reads the runtime's sandboxes and containers.
func (e *env) observe(c *cri.Client) (state, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := state{running: map[string][]string{}, ready: map[string][]string{}, attempts: map[string]uint32{},
		sandboxes: map[string]bool{}, containers: map[string]bool{}, podUIDs: map[string]bool{}}
	sbs, err := c.ListPodSandbox(ctx, nil)
	if err != nil {
		return s, err
	}
	names := map[string]string{} // sandbox ID -> manifest name
	for _, sb := range sbs {
		s.sandboxes[sb.Id] = true
		name := strings.TrimSuffix(sb.GetMetadata().GetName(), "-"+nodeName)
		names[sb.Id] = name
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			s.ready[name] = append(s.ready[name], sb.Id)
			s.podUIDs[sb.GetMetadata().GetUid()] = true
		}
	}
	ctrs, err := c.ListContainers(ctx, nil)
	if err != nil {
		return s, err
	}
	for _, ct := range ctrs {
		s.containers[ct.Id] = true
		s.attempts[ct.Id] = ct.GetMetadata().GetAttempt()
		if ct.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			name := names[ct.PodSandboxId]
			s.running[name] = append(s.running[name], ct.Id)
		}
	}
	return s, nil
}

// converge waits until every desired pod runs exactly once and no other pod
// runs, and returns the last state with its counts (an error when the
// timeout passed first).
func (e *env) converge(c *cri.Client, timeout time.Duration) (state, error) {
	deadline := time.Now().Add(timeout)
	for {
		want, err := e.desired()
		if err != nil {
			return state{}, err
		}
		s, err := e.observe(c)
		if err == nil {
			s.lost, s.duplicated, s.extra = 0, 0, 0
			for _, n := range want {
				switch r, sb := len(s.running[n]), len(s.ready[n]); {
				case r == 0 || sb == 0:
					s.lost++
				case r > 1 || sb > 1:
					s.duplicated++
				}
			}
			for n, ids := range s.running {
				if !slices.Contains(want, n) && len(ids) > 0 {
					s.extra++
				}
			}
			for n, ids := range s.ready {
				if !slices.Contains(want, n) && len(ids) > 0 && len(s.running[n]) == 0 {
					s.extra++
				}
			}
			if s.lost+s.duplicated+s.extra == 0 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("not converged after %s: %d lost, %d duplicated, %d running without a manifest (err %v)",
				timeout, s.lost, s.duplicated, s.extra, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// leakCounts are the leftovers found.
type leakCounts struct{ shims, procs, taskDirs, rules int }

func (l leakCounts) total() int { return l.shims + l.procs + l.taskDirs + l.rules }

// leaks counts the shims of our containerd serving no READY sandbox, the
// processes in our pod cgroups of pods that do not run (and every `runc
// init` there), and the task directories of no sandbox or container.
func (e *env) leaks(s state, report bool) (leakCounts, error) {
	var l leakCounts
	readyIDs := map[string]bool{}
	for _, ids := range s.ready {
		for _, id := range ids {
			readyIDs[id] = true
		}
	}
	for _, sh := range shims(e.socket()) {
		if !readyIDs[sh.id] {
			if report {
				fmt.Printf("killtest: leaked shim pid %d, id %s\n", sh.pid, sh.id)
			}
			l.shims++
		}
	}
	for _, id := range e.cniRules() {
		if !readyIDs[id] {
			if report {
				fmt.Printf("killtest: leaked CNI rule of sandbox %s\n", id)
			}
			l.rules++
		}
	}
	taskDir := filepath.Join(e.root, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io")
	es, err := os.ReadDir(taskDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l, err
	}
	for _, de := range es {
		if !s.sandboxes[de.Name()] && !s.containers[de.Name()] {
			if report {
				fmt.Printf("killtest: stale task dir %s\n", filepath.Join(taskDir, de.Name()))
			}
			l.taskDirs++
		}
	}
	// Pod cgroups in the pids hierarchy (v1) or the unified tree (v2).
	top := filepath.Join("/sys/fs/cgroup/pids", e.cgroupRoot, "kubepods")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		top = filepath.Join("/sys/fs/cgroup", e.cgroupRoot, "kubepods")
	}
	_ = filepath.WalkDir(top, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return nil
		}
		uid, inPod := podUID(strings.TrimPrefix(p, top))
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			args, _ := cmdline(pid)
			if (inPod && !s.podUIDs[uid]) || (len(args) > 1 && filepath.Base(args[0]) == "runc" && args[1] == "init") {
				if report {
					fmt.Printf("killtest: leaked process %d %q in %s\n", pid, args, p)
				}
				l.procs++
			}
		}
		return nil
	})
	return l, nil
}

// cniRules returns the sandbox IDs of the bridge plugin's NAT rules for
// addresses of our podCIDR; none when iptables is not installed.
func (e *env) cniRules() []string {
	_, cidr, err := net.ParseCIDR(e.podCIDR)
	if err != nil {
		return nil
	}
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", "POSTROUTING").Output()
	if err != nil {
		return nil
	}
	return cniRuleIDs(string(out), cidr)
}

// cniRuleIDs returns the sandbox IDs of the rules in iptables -S output
// whose source address is in cidr: the bridge plugin adds one POSTROUTING
// rule per sandbox, commented `name: "NETWORK" id: "SANDBOX-ID"`.
func cniRuleIDs(rules string, cidr *net.IPNet) []string {
	const idKey = `id: \"`
	var ids []string
	for _, line := range strings.Split(rules, "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "-s")
		j := strings.Index(line, idKey)
		if i < 0 || i+1 >= len(f) || j < 0 {
			continue
		}
		ip, _, _ := strings.Cut(f[i+1], "/")
		if a := net.ParseIP(ip); a == nil || !cidr.Contains(a) {
			continue
		}
		id, _, _ := strings.Cut(line[j+len(idKey):], `\"`)
		ids = append(ids, id)
	}
	return ids
}

// podUID returns the UID of the pod cgroup that path (below kubepods) is in.
func podUID(path string) (string, bool) {
	for _, el := range strings.Split(path, "/") {
		if uid, ok := strings.CutPrefix(el, "pod"); ok && uid != "" {
			return uid, true
		}
	}
	return "", false
}

type shim struct {
	pid int
	id  string
}

// shims lists the containerd shims started with -address socket.
func shims(socket string) []shim {
	es, _ := os.ReadDir("/proc")
	var out []shim
	for _, de := range es {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		args, err := cmdline(pid)
		if err != nil || len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		if flagValue(args, "-address") == socket {
			out = append(out, shim{pid: pid, id: flagValue(args, "-id")})
		}
	}
	return out
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}

// corruptState counts the agent's state files (the JSON files in its root
// directory and the containerd pid file) that do not parse, and the log
// lines saying the agent found one corrupt.
func (e *env) corruptState() int {
	bad := 0
	files, _ := filepath.Glob(filepath.Join(e.root, "*.json"))
	files = append(files, filepath.Join(e.root, "kubelet_internal_checkpoint"), filepath.Join(e.root, "containerd", "containerd.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var v any
		if err != nil || json.Unmarshal(b, &v) != nil {
			fmt.Printf("killtest: corrupt state file %s: %v\n", f, err)
			bad++
		}
	}
	log, _ := os.ReadFile(e.log)
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(strings.ToLower(l), "corrupt") {
			fmt.Printf("killtest: agent log: %s\n", l)
			bad++
		}
	}
	return bad
}

// removeAll removes every manifest, waits until the agent has removed the
// pods, and stops the agent (and with it its containerd).
func (e *env) removeAll(c *cri.Client, a *agent) {
	es, _ := os.ReadDir(e.manifests)
	for _, de := range es {
		_ = os.Remove(filepath.Join(e.manifests, de.Name()))
	}
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		s, err := e.observe(c)
		if err == nil && len(s.containers) == 0 && len(s.sandboxes) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	a.stop()
}

// teardown removes what the run made: a containerd left running (through
// stop-runtime), the shims of our socket, mounts, the directory, the bridge
// and the cgroups.
func (e *env) teardown() {
	if out, err := exec.Command(e.bin, "stop-runtime", "--root-dir", e.root).CombinedOutput(); err != nil {
		fmt.Printf("killtest: teardown: stop-runtime: %v: %s", err, out)
	}
	for _, sh := range shims(e.socket()) {
		_ = syscall.Kill(sh.pid, syscall.SIGKILL)
	}
	// What is left in our cgroup root (a stuck runc init, say) is ours.
	hs, _ := filepath.Glob("/sys/fs/cgroup/*")
	hs = append(hs, "/sys/fs/cgroup")
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, e.cgroupRoot), func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var ms []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], e.dir+"/") {
				ms = append(ms, f[4])
			}
		}
		for i := len(ms) - 1; i >= 0; i-- {
			_ = syscall.Unmount(ms[i], syscall.MNT_DETACH)
		}
	}
	_ = os.RemoveAll(e.dir)
	bridge := daemon.BridgeName(e.root)
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err == nil {
		_ = exec.Command("ip", "link", "delete", bridge).Run()
	}
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, e.cgroupRoot), func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for try := 0; syscall.Rmdir(dirs[i]) == syscall.EBUSY && try < 50; try++ {
				time.Sleep(100 * time.Millisecond) // a killed process leaving it
			}
		}
	}
}
