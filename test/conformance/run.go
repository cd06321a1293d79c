package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/testenv/e2eimages"
	"github.com/nodekeeper/nodekeeper/internal/testenv/kubebuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// podCIDR is the pod network of the containerd both agents use: the one the
// suite's default kubelet configuration names.
const podCIDR = "10.100.0.0/24"

// agents are the programs the suite can run as its kubelet.
var agents = []string{"kubelet", "nodekeeper"}

type runOptions struct {
	agents  []string
	focus   []string
	skip    []string
	procs   int
	work    string
	results string
	labels  string
	timeout time.Duration
	flakes  int
	// criProxy runs the suite with its CRI proxy between the agent and
	// containerd (--cri-proxy-enabled), for its [Feature:CriProxy] specs.
	criProxy bool
	// disk are the DiskPressure units, each run on a filesystem of its own
	// after focus's specs (diskfs.go).
	disk []diskUnit
	// flagged are the units run with kubelet flags of their own, after
	// focus's specs (flagged.go).
	flagged []flaggedUnit
	// runtime are the units run on containerd 1.7, after focus's and the
	// flagged specs, before the disk units (runtime17.go).
	runtime []runtimeUnit
	// kubeletFlags are added to the suite's --kubelet-flags.
	kubeletFlags []string
	// mirrors are the run's containerds' RegistryMirrors: every registry
	// the stand-ins name, to the run's loopback registry (registry.go).
	mirrors map[string]string
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o runOptions
	agentList := fs.String("agents", strings.Join(agents, ","), "the agents to run the suite against, in order")
	fs.Func("focus", "a regular expression of specs to run (repeatable; default: the core subset)", func(s string) error {
		o.focus = append(o.focus, s)
		return nil
	})
	fs.Func("skip", "a regular expression of specs to skip, besides the machine's skips (repeatable)", func(s string) error {
		o.skip = append(o.skip, s)
		return nil
	})
	fs.IntVar(&o.procs, "procs", 4, "ginkgo processes running specs in parallel")
	fs.StringVar(&o.work, "work", "/tmp/nkconf", "work directory (containerd state, logs; short: it holds unix sockets)")
	fs.StringVar(&o.results, "results", "test/conformance/results", "directory of the per-agent results the report reads")
	fs.DurationVar(&o.timeout, "timeout", 90*time.Minute, "the suite's time limit, per agent")
	fs.StringVar(&o.labels, "labels", "NodeConformance", "ginkgo label filter (e.g. 'Feature:Eviction' with a matching -focus)")
	fs.IntVar(&o.flakes, "flake-attempts", 1, "attempts per spec")
	rerun := fs.Bool("rerun-failed", false, "run the specs whose latest result (of the first agent) is not passed, instead of -focus")
	chunk := fs.String("chunk", "", "K/N: run the K-th of N chunks of every spec the -labels filter selects (the full set in N runs), instead of -focus")
	set := fs.String("set", "", "subsystems: the specs beyond [NodeConformance] of nodekeeper's subsystems (specs.go), chunked by expected duration with -chunk; default: the [NodeConformance] specs")
	notRun := fs.Bool("not-run", false, "run the specs the -labels filter selects that have no result yet for the first agent (with -chunk, a chunk of those), instead of -focus")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	for a := range strings.SplitSeq(*agentList, ",") {
		if !slices.Contains(agents, a) {
			return usageError{fmt.Errorf("-agents: unknown agent %q: want kubelet or nodekeeper", a)}
		}
		o.agents = append(o.agents, a)
	}
	if *rerun && (*notRun || *chunk != "") {
		return usageError{errors.New("-rerun-failed: not with -not-run or -chunk")}
	}
	k, n := 1, 1
	if *chunk != "" {
		var err error
		if k, n, err = parseChunk(*chunk); err != nil {
			return usageError{err}
		}
	}
	switch *set {
	case "":
	case "subsystems":
		return runSet(ctx, o, *rerun, *notRun, *chunk != "", k, n)
	default:
		return usageError{fmt.Errorf("-set %q: want subsystems (or no -set)", *set)}
	}
	if *rerun || *notRun || *chunk != "" {
		names, ordered, err := listSpecInfo(o.labels)
		if err != nil {
			return err
		}
		var prev results
		if *rerun || *notRun {
			if prev, err = previousResults(o); err != nil {
				return err
			}
		}
		switch {
		case *rerun:
			if o.focus = failedFocus(prev, ordered); len(o.focus) == 0 {
				return usageError{fmt.Errorf("-rerun-failed: no spec of %s failed", o.agents[0])}
			}
		case *notRun:
			if names = withoutResult(names, prev); len(names) == 0 {
				return usageError{fmt.Errorf("-not-run: every spec has a result for %s", o.agents[0])}
			}
			fallthrough
		default:
			o.focus = chunkFocus(names, ordered, k, n)
		}
	}
	if len(o.focus) == 0 {
		o.focus = coreFocus
		o.skip = append(o.skip, coreSkip...)
	}
	if o.procs < 1 {
		return usageError{fmt.Errorf("-procs %d: want at least 1", o.procs)}
	}
	return run(ctx, o)
}

// runSet runs the subsystems set (specs.go): its specs less its skips, a
// chunk by expected duration with -chunk, those without a result or not
// passed with -not-run or -rerun-failed; -focus narrows it further.
func runSet(ctx context.Context, o runOptions, rerun, notRun, chunked bool, k, n int) error {
	o.labels = subsystemsLabels
	o.criProxy = true
	all, ordered, err := listSpecInfo(o.labels)
	if err != nil {
		return err
	}
	var names []string
	for _, name := range all {
		if _, _, in := subsystemPart(name); !in || machineSkipped(name) {
			continue
		}
		if _, skip := subsystemSkipped(name); !skip {
			names = append(names, name)
		}
	}
	if rerun || notRun {
		prev, err := previousResults(o)
		if err != nil {
			return err
		}
		var keep []string
		for _, name := range names {
			r, ok := prev.Specs[name]
			if notRun && !ok || rerun && ok && r.State != "passed" && r.State != "skipped" {
				keep = append(keep, name)
			}
		}
		if names = keep; len(names) == 0 {
			return usageError{fmt.Errorf("-set subsystems: no spec left to run for %s", o.agents[0])}
		}
	}
	if len(o.focus) > 0 {
		// -focus narrows the set: the suite ANDs nothing, so filter here.
		var keep []string
		for _, name := range names {
			for _, f := range o.focus {
				if re, err := regexp.Compile(f); err != nil {
					return usageError{fmt.Errorf("-focus %q: %w", f, err)}
				} else if re.MatchString(name) {
					keep = append(keep, name)
					break
				}
			}
		}
		if names = keep; len(names) == 0 {
			return usageError{fmt.Errorf("-focus %q: no spec of the subsystems set matches", o.focus)}
		}
	}
	expected := func(name string) time.Duration { _, d, _ := subsystemPart(name); return d }
	if !chunked {
		k, n = 1, 1
	}
	focus, took := durationChunk(names, ordered, expected, k, n)
	if o.focus, o.disk, err = splitDiskUnits(focus, names); err != nil {
		return err
	}
	if o.focus, o.flagged, err = splitFlagged(o.focus, names); err != nil {
		return err
	}
	if o.focus, o.runtime, err = splitRuntimeUnits(o.focus, names); err != nil {
		return err
	}
	for _, s := range subsystemSkips {
		o.skip = append(o.skip, s.re)
	}
	// Per agent: the set's chunk, the suite's start and the restarts.
	o.timeout = max(o.timeout, took*3/2+15*time.Minute)
	slog.New(slog.NewTextHandler(os.Stderr, nil)).Info("the subsystems set", "specs", len(names), "chunk", fmt.Sprintf("%d/%d", k, n), "units", len(focus), "diskUnits", len(o.disk), "flaggedUnits", len(o.flagged), "containerd17Units", len(o.runtime), "expectedPerAgent", took)
	return run(ctx, o)
}

// previousResults loads the stored results of the first agent.
func previousResults(o runOptions) (results, error) {
	dir := o.results
	if !filepath.IsAbs(dir) {
		root, err := toolbuild.ModuleDir(".")
		if err != nil {
			return results{}, err
		}
		dir = filepath.Join(root, dir)
	}
	return loadResults(filepath.Join(dir, o.agents[0]+".json"))
}

func run(ctx context.Context, o runOptions) (err error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if os.Geteuid() != 0 {
		return fmt.Errorf("the node e2e suite runs pods and cgroups as root: run as root")
	}
	root, err := toolbuild.ModuleDir(".")
	if err != nil {
		return err
	}
	if !filepath.IsAbs(o.results) {
		o.results = filepath.Join(root, o.results)
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return err
	}
	bins, err := buildAll(ctx, log, root, o.work)
	if err != nil {
		return err
	}
	if err := writeStandIns(filepath.Join(o.results, "images.json"), bins.standIns); err != nil {
		return err
	}
	if len(o.runtime) > 0 {
		if bins.containerd17, err = buildContainerd17(log); err != nil {
			return err
		}
	}
	guard, err := snapshotCgroups()
	if err != nil {
		return err
	}
	hostState := realHost("/proc/sys")
	// The suite's kubelet is this program's supervisor (unit.go), run from a
	// copy of it.
	bins.harness = filepath.Join(o.work, "bin", "nkharness")
	if err := copyExecutable(bins.harness); err != nil {
		return err
	}

	// What the run makes on the host and removes at its end, interrupted
	// or not: pod cgroups and the bridge, unless they were there before it
	// (someone else's: left alone).
	final := runEnd{cgroupFS: "/sys/fs/cgroup", cgroup: runCgroup, bridge: runBridge}
	if cgroupExists(final.cgroupFS, final.cgroup) {
		log.Warn("the pods' cgroup exists before the run: its processes and cgroups are left alone at the end", "cgroup", final.cgroup)
		final.cgroup = ""
	}
	if linkExists(final.bridge) {
		log.Warn("the bridge exists before the run: it is left alone at the end", "bridge", final.bridge)
		final.bridge = ""
	}
	defer func() {
		done, eerr := final.end(context.WithoutCancel(ctx))
		done.log(log, "the run's cgroups and bridge")
		err = errors.Join(err, eerr)
	}()
	// Removed after every containerd of the run has stopped its pods.
	made := absentFiles(suiteHostFiles)
	defer func() { err = errors.Join(err, removeMade(log, made)) }()

	// The stand-ins' registry, which every containerd of the run mirrors
	// its images' registries to; it stops after the last containerd.
	mirrors, stopRegistry, err := startRegistry(ctx, log, bins.standIns)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopRegistry()) }()
	o.mirrors = mirrors

	// One containerd for both agents, as on a node where the kubelet is
	// replaced by nodekeeper; each disk unit (diskfs.go) and containerd 1.7
	// unit (runtime17.go) has its own. It
	// outlives an interrupt until the suite has cleaned up its pods, and its
	// pods are stopped through CRI before it stops.
	m, stopContainerd, err := startContainerd(ctx, log, containerd.Config{StateDir: filepath.Join(o.work, "containerd"), RegistryMirrors: o.mirrors}, bins.images)
	if err != nil {
		return err
	}
	defer func() {
		done, eerr := runEnd{endpoint: m.Endpoint(), stopRuntime: stopContainerd}.end(context.WithoutCancel(ctx))
		done.log(log, "the run's containerd")
		err = errors.Join(err, eerr)
	}()

	for _, agent := range o.agents {
		if len(o.focus) > 0 {
			// The DiskPressure specs never run on the host's filesystem,
			// nor those of runtimeSpecs on containerd 1.6.
			host := o
			host.skip = append(slices.Clone(o.skip), diskSpecRegexp, flaggedSkip(), runtimeSkip())
			if err := cleanKubeletRoot(kubeletRoot); err != nil {
				return fmt.Errorf("before the %s run: %w", agent, err)
			}
			if err := runAgent(ctx, log, host, bins, agent, m, guard, hostState); err != nil {
				return err
			}
		}
		for _, u := range o.flagged {
			unit := o
			unit.focus, unit.kubeletFlags = []string{u.focus}, u.spec.flags
			if err := cleanKubeletRoot(kubeletRoot); err != nil {
				return fmt.Errorf("before the %s run: %w", agent, err)
			}
			made := absentFiles(u.spec.files)
			log.Info("a spec with kubelet flags of its own", "agent", agent, "focus", u.focus, "flags", strings.Join(u.spec.flags, " "))
			err := runAgent(ctx, log, unit, bins, agent, m, guard, hostState)
			if err := errors.Join(err, removeMade(log, made)); err != nil {
				return err
			}
		}
		if len(o.disk)+len(o.runtime) > 0 {
			// No pod of the shared containerd runs beside a unit's own
			// containerd's: what is left in the run's cgroups after a
			// unit is the unit's.
			if _, err := clearPods(ctx, m.Endpoint()); err != nil {
				return fmt.Errorf("before the %s units with a containerd of their own: %w", agent, err)
			}
		}
		for _, u := range o.runtime {
			if err := runRuntimeUnit(ctx, log, o, bins, agent, u, final, guard, hostState); err != nil {
				return err
			}
		}
		for _, u := range o.disk {
			if err := runDiskUnit(ctx, log, o, bins, agent, u, final, guard, hostState); err != nil {
				return err
			}
		}
	}
	_, err = clearPods(ctx, m.Endpoint())
	return err
}

// runBridge is the CNI bridge of the run's containerds.
const runBridge = "nkconf0"

// startContainerd runs a containerd of cfg (its StateDir, and Binary,
// CDISpecDirs and RegistryMirrors when set) with the run's sandbox image (the
// stand-in of upstream's registry.k8s.io/pause, which the registry serves: an
// agent's image GC may remove it, as the kubelet's does where the runtime does
// not pin it, containerd 1.6's, and containerd pulls it back for the next
// sandbox, as on an upstream node), pod network and pid file, until stop is called (an interrupt of ctx does not
// stop it), and imports images into it: every image is there before the
// suite starts, and the stand-in named by a digest
// (e2eimages.BusyboxDigestRef) can only be imported.
func startContainerd(ctx context.Context, log *slog.Logger, cfg containerd.Config, images []string) (*containerd.Managed, func(), error) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stateDir := cfg.StateDir
	cfg.SandboxImage, cfg.PodCIDR, cfg.CNIBridge = e2eimages.PauseRef, podCIDR, runBridge
	cfg.Logger, cfg.DieWithParent = log.With("subsystem", "containerd"), true
	cfg.Place = func(pid int) error { _, err := recordRuntime(runtimePidFile(stateDir), pid); return err }
	m, err := containerd.New(cfg)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	cdone := make(chan error, 1)
	go func() { cdone <- m.Run(cctx) }()
	stop := func() { cancel(); <-cdone }
	select {
	case <-m.Ready():
	case err := <-cdone:
		cancel()
		return nil, nil, fmt.Errorf("containerd: %v (log: %s)", err, m.LogPath())
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
	imported, err := m.ImportFiles(ctx, images...)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("import the e2e images: %w", err)
	}
	log.Info("images imported", "count", len(imported), "stateDir", stateDir)
	return m, stop, nil
}

// runAgent runs the suite's o.focus with agent on the containerd at
// endpoint, without pods, the host recorded before and restored after, the
// results merged into the agent's. The caller has made kubeletRoot clean.
func runAgent(ctx context.Context, log *slog.Logger, o runOptions, bins binaries, agent string, m *containerd.Managed, guard cgroupGuard, host hostAccess) error {
	endpoint := m.Endpoint()
	if _, err := clearPods(ctx, endpoint); err != nil {
		return fmt.Errorf("before the %s run: %w", agent, err)
	}
	before, err := host.snapshot(ctx)
	if err != nil {
		return fmt.Errorf("before the %s run: %w", agent, err)
	}
	res, err := runSuite(ctx, log, o, bins, agent, endpoint, runtimePidFile(m.Config().StateDir))
	// Restored whatever happened, an interrupt included (ctx is done
	// then: the restore runs on its own).
	changed, herr := host.restore(context.WithoutCancel(ctx), before)
	res.Host, res.HostRun = changed, time.Now().UTC().Format(time.RFC3339)
	if len(changed) == 0 && herr == nil {
		log.Info("the host is as before the run", "agent", agent)
	}
	for _, c := range changed {
		log.Info("restored the host", "agent", agent, "change", c)
	}
	if herr != nil {
		return fmt.Errorf("after the %s run: %w", agent, herr)
	}
	if len(res.Specs) > 0 {
		if err := mergeResults(filepath.Join(o.results, agent+".json"), res); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", agent, err)
	}
	if err := guard.check(); err != nil {
		return fmt.Errorf("after the %s run: %w", agent, err)
	}
	log.Info("suite done", "agent", agent, "passed", res.count("passed"), "failed", res.count("failed"),
		"skipped", res.count("skipped"), "took", res.Took.Round(time.Second))
	return nil
}

// runDiskUnit runs the disk unit u with agent on a filesystem made for it
// (diskfs.go): mounted in the work directory, its kubelet directory bound
// on kubeletRoot and a containerd of the unit's on it, the stand-in images
// imported into it. Afterwards, interrupted or not, it stops the unit's
// pods and containerd, unmounts kubeletRoot's bind and the filesystem,
// detaches its loop device and deletes its file.
//
// cg names the run's cgroups (cgroup "" when they are not the run's): what
// is left in them when the unit's containerd has stopped is the unit's (the
// shared containerd's pods were stopped before it), and is killed so that
// nothing holds the filesystem.
func runDiskUnit(ctx context.Context, log *slog.Logger, o runOptions, bins binaries, agent string, u diskUnit, cg runEnd, guard cgroupGuard, host hostAccess) (err error) {
	if err := cleanKubeletRoot(kubeletRoot); err != nil {
		return fmt.Errorf("before the %s disk unit: %w", agent, err)
	}
	d, unmount, err := mountDiskUnit(ctx, filepath.Join(o.work, "diskfs"), kubeletRoot, u.plan)
	if err != nil {
		return err
	}
	defer func() {
		rerr := unmount()
		if rerr == nil {
			log.Info("removed the disk unit's filesystem", "file", d.file, "loop", d.loop)
		}
		err = errors.Join(err, rerr)
	}()
	dir := d.dir
	m, stop, err := startContainerd(ctx, log, containerd.Config{StateDir: filepath.Join(dir, "containerd"), RegistryMirrors: o.mirrors}, bins.images)
	if err != nil {
		return err
	}
	defer func() {
		done, eerr := runEnd{endpoint: m.Endpoint(), stopRuntime: stop, cgroupFS: cg.cgroupFS, cgroup: cg.cgroup}.end(context.WithoutCancel(ctx))
		done.log(log, "the disk unit's containerd")
		err = errors.Join(err, eerr)
	}()
	log.Info("a DiskPressure unit on a filesystem of its own", append([]any{"agent", agent, "focus", u.focus,
		"holds", kubeletRoot + " (bound from its kubelet directory), containerd's root, state and the imported images",
		"why", u.plan.why, "planBytes", u.plan.size, "planInodes", u.plan.inodes}, d.describe()...)...)
	unit := o
	unit.focus = []string{u.focus}
	return runAgent(ctx, log, unit, bins, agent, m, guard, host)
}

// binaries are what a run needs built.
type binaries struct {
	kubelet, e2eNode, ginkgo, nodekeeper string
	harness                              string   // a copy of this program: supervise, systemctl
	containerd17                         string   // containerd 1.7's binaries, when a unit needs them
	images                               []string // OCI image tarballs to import
	standIns                             []e2eimages.Image
}

// buildAll builds (or finds cached) the kubelet, e2e_node.test, ginkgo,
// agnhost, sampledeviceplugin and nodekeeper, and writes the image tarballs
// under work.
func buildAll(ctx context.Context, log *slog.Logger, root, work string) (binaries, error) {
	var b binaries
	node, err := kubebuild.Node()
	if err != nil {
		return b, err
	}
	agn, err := kubebuild.Agnhost()
	if err != nil {
		return b, err
	}
	sdp, err := kubebuild.SampleDevicePlugin()
	if err != nil {
		return b, err
	}
	var agnhost string
	for _, s := range []toolbuild.Spec{node, agn, sdp} {
		began := time.Now()
		log.Info("building from hack/kube (cached after the first time; 5-15 min cold)", "cache", s.CacheName)
		dir, err := toolbuild.Build(s)
		if err != nil {
			return b, err
		}
		log.Info("built", "cache", s.CacheName, "dir", dir, "took", time.Since(began).Round(time.Second))
		switch s.CacheName {
		case node.CacheName:
			b.kubelet, b.e2eNode, b.ginkgo = filepath.Join(dir, "kubelet"), filepath.Join(dir, "e2e_node.test"), filepath.Join(dir, "ginkgo")
		case agn.CacheName:
			agnhost = filepath.Join(dir, "agnhost")
		case sdp.CacheName: // after agnhost
			paths, imgs, err := buildImages(ctx, root, filepath.Join(work, "images"), agnhost, filepath.Join(dir, "sample-device-plugin"))
			if err != nil {
				return b, err
			}
			b.images, b.standIns = paths, imgs
		}
	}
	b.nodekeeper = filepath.Join(work, "bin", "nodekeeper")
	cmd := exec.CommandContext(ctx, toolbuild.GoTool(), "build", "-o", b.nodekeeper, "./cmd/nodekeeper")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("go build ./cmd/nodekeeper: %w\n%s", err, out)
	}
	return b, nil
}

// runSuite runs the suite with agent as its kubelet and returns its results.
func runSuite(ctx context.Context, log *slog.Logger, o runOptions, b binaries, agent, endpoint, runtimePid string) (results, error) {
	dir := filepath.Join(o.work, agent)
	if err := unmountAll(dir); err != nil { // a killed run's harness leaves its binds
		return results{}, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return results{}, err
	}
	binDir, runDir, out := filepath.Join(dir, "bin"), filepath.Join(dir, "run"), filepath.Join(dir, "out")
	for _, d := range []string{binDir, runDir, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return results{}, err
		}
	}
	sock := filepath.Join(dir, "unit.sock")
	// ginkgo runs a compiled suite in the suite's directory, and the suite
	// writes its kubeconfig and kubelet config into its working directory.
	suite := filepath.Join(runDir, "e2e_node.test")
	if err := os.Symlink(b.e2eNode, suite); err != nil {
		return results{}, err
	}
	base := filepath.Join(runDir, "base-kubelet-config.yaml")
	if err := os.WriteFile(base, []byte(baseKubeletConfig), 0o644); err != nil {
		return results{}, err
	}
	path, err := pathWithout(filepath.Join(dir, "path"), "systemd-run", "systemctl", "sudo")
	if err != nil {
		return results{}, err
	}
	// The suite starts <k8s-bin-dir>/kubelet itself (no systemd-run on its
	// PATH): for both agents that is the harness's supervisor.
	agentArgv := []string{b.kubelet}
	if agent == "nodekeeper" {
		agentArgv = []string{b.nodekeeper, "run"}
	}
	if err := writeUnitScripts(binDir, path, b.harness, sock, agentArgv); err != nil {
		return results{}, err
	}
	report := filepath.Join(out, "report.json")
	args := []string{
		"--procs", fmt.Sprint(o.procs), "--no-color", "--timeout", o.timeout.String(),
		"--label-filter", o.labels,
		// The report's name is relative to the output dir.
		"--json-report", filepath.Base(report), "--output-dir", out,
		"--flake-attempts", fmt.Sprint(o.flakes),
	}
	for _, f := range o.focus {
		args = append(args, "--focus", f)
	}
	for _, s := range append(skipRegexps(), o.skip...) {
		args = append(args, "--skip", s)
	}
	args = append(args, suite, "--",
		"--k8s-bin-dir", binDir,
		"--container-runtime-endpoint", endpoint,
		"--container-runtime-pid-file", runtimePid,
		"--container-runtime-process-name", runtimeProcessName,
		// Every image the suite's prepull names is imported before it
		// starts (the BeforeSuite prepull would find each and pull
		// nothing), and on, the flag adds prepulls after the eviction and
		// SystemNodeCriticalPod specs, which would fail once image GC
		// removed the busybox stand-in named by a digest: no registry can
		// serve that (docs/conformance-harness.md, "The stand-ins' registry").
		"--prepull-images=false",
		"--kubelet-config-file", base,
		// Without these the suite moves every process of the machine's root
		// cgroup into /system, and the container runtime into /docker-daemon.
		"--kubelet-flags="+strings.Join(append([]string{"--system-cgroups=", "--kubelet-cgroups=", "--runtime-cgroups="}, o.kubeletFlags...), " "),
		"--report-dir", out,
	)
	if o.criProxy {
		// The suite serves CRI on a socket of its own in /tmp, passes it to
		// the agent as --container-runtime-endpoint and forwards to ours.
		args = append(args, "--cri-proxy-enabled")
	}
	cmd := exec.CommandContext(ctx, b.ginkgo, args...)
	cmd.Dir = runDir
	cmd.Env = append(os.Environ(), "PATH="+path)
	logFile, err := os.Create(filepath.Join(out, "ginkgo.log"))
	if err != nil {
		return results{}, err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Interrupted, ginkgo stops the specs, runs their cleanup and writes
	// its report: what ran is kept. It writes the report only at its end,
	// after each process's cleanup (AfterEach prepulls, the suite's own
	// teardown), which took more than 3 minutes after an interrupt on this
	// machine (2026-11-28, the report lost): it gets 10.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Minute
	if err := portsFree(suitePorts...); err != nil {
		return results{}, err
	}
	log.Info("running the node e2e suite", "agent", agent, "log", logFile.Name(), "procs", o.procs)
	began := time.Now()
	runErr := runGroup(cmd, 10*time.Second)
	took := time.Since(began)
	res, err := readReport(report)
	if err != nil {
		if runErr != nil {
			return results{}, fmt.Errorf("ginkgo: %v (see %s); %w", runErr, logFile.Name(), err)
		}
		return results{}, err
	}
	res.Took = took
	res.Agent = agent
	if len(res.Specs) == 0 {
		return res, fmt.Errorf("no spec ran (see %s): %v", logFile.Name(), runErr)
	}
	// ginkgo exits non-zero when a spec failed: that is a result, not an
	// error. An interrupted or timed-out suite is an error.
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// kubeletRoot is the suite's --root-dir for its kubelet. Specs use paths
// under it directly (the device-plugin and pod-resources sockets), so both
// agents run on it, each from a clean directory.
const kubeletRoot = "/var/lib/kubelet"

// suiteHostFiles are what the suite's pods make on the host outside
// kubeletRoot, in the order to remove them (a file before its directory):
// the sample device plugin's pod (every device plugin spec's, with
// CDI_ENABLED=1) mounts the hostPath /var/run/cdi, which containerd makes
// when it is missing, and writes its CDI spec example.com.json there,
// removing it when it stops. Those absent before a run are removed after it.
var suiteHostFiles = []string{"/var/run/cdi/example.com.json", "/var/run/cdi"}

// rootMarker, in kubeletRoot, says the directory is this program's to clean.
const rootMarker = ".nodekeeper-conformance"

// cleanKubeletRoot empties dir for the next agent: it unmounts what the last
// one mounted beneath it (volumes) and removes its files. A dir that exists
// without rootMarker belongs to someone else, a kubelet of this machine: it is
// left alone and the run refused.
func cleanKubeletRoot(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case len(entries) > 0 && !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == rootMarker }):
		return fmt.Errorf("%s exists and was not made by this program (no %s in it): the suite's kubelet uses it; move it away first", dir, rootMarker)
	}
	if err := unmountAll(dir); err != nil {
		return err
	}
	entries, err = os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != rootMarker {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, rootMarker), []byte("made by nodekeeper's test/conformance; emptied before each run\n"), 0o644)
}

// unmountAll unmounts dir and everything mounted beneath it, deepest first:
// the harness binds its kubelet's root directory onto itself (for mount
// propagation), and volumes are mounted beneath it. Only directories of this
// program's are passed (the work directory; kubeletRoot once its marker is
// checked).
func unmountAll(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var under []string
	for line := range strings.Lines(string(mounts)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			under = append(under, f[4])
		}
	}
	slices.SortStableFunc(under, func(a, b string) int { return len(b) - len(a) }) // deepest first
	for _, m := range under {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	return nil
}

// suitePorts are the fixed ports of the suite's services and its kubelet:
// kube-apiserver, healthz, the kubelet API and its read-only port.
var suitePorts = []int{6443, 10248, 10250, 10255}

// portsFree fails naming the first of ports something listens on, on
// loopback: the suite would fail to start, or talk to someone else's server.
func portsFree(ports ...int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return fmt.Errorf("port %d is taken (the suite needs %v free): %w", p, ports, err)
		}
		l.Close()
	}
	return nil
}

// baseKubeletConfig is the base configuration the suite amends for each
// agent: cgroup v1 is what this machine has.
const baseKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupRoot: /
podCIDR: ` + podCIDR + `
`

// pathWithout makes dir a directory of links to every program on $PATH except
// the named ones, and a sudo that runs its command on that PATH, and
// returns it as a PATH value. The suite starts the kubelet
// through systemd-run when it finds it, as a unit of the machine's systemd.
func pathWithout(dir string, omit ...string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for d := range strings.SplitSeq(os.Getenv("PATH"), string(os.PathListSeparator)) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if slices.Contains(omit, e.Name()) {
				continue
			}
			link := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier PATH entry has it
			}
			if err := os.Symlink(filepath.Join(d, e.Name()), link); err != nil {
				return "", err
			}
		}
	}
	// Specs run `sudo ...` for what needs root; the suite runs as root here.
	// This sudo runs its command on this PATH (a real sudo's secure_path
	// would reach the machine's systemctl).
	if err := writeScript(filepath.Join(dir, "sudo"), "# root already: run the command as it is, on this PATH\n"+
		"case \"$1\" in -*) echo \"sudo (nodekeeper conformance harness): option $1 not supported\" >&2; exit 1;; esac\nexec \"$@\"\n"); err != nil {
		return "", err
	}
	return dir, nil
}

// cgroupGuard records the cgroups of processes this program did not start,
// so a run that moved them is caught.
type cgroupGuard map[int][]byte

func snapshotCgroups() (cgroupGuard, error) {
	g := cgroupGuard{}
	for _, pid := range []int{1, os.Getppid(), os.Getpid()} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			return nil, err
		}
		g[pid] = b
	}
	return g, nil
}

func (g cgroupGuard) check() error {
	for pid, want := range g {
		got, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue // gone
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("process %d was moved to other cgroups:\n%s\nwas:\n%s", pid, got, want)
		}
	}
	return nil
}
