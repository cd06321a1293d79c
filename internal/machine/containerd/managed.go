package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Restart back-off: the first restart waits initialBackoff, each further one
// twice the last, at most maxBackoff; a containerd that ran resetAfter or
// longer before dying starts the sequence again.
const (
	initialBackoff = time.Second
	maxBackoff     = 30 * time.Second
	resetAfter     = time.Minute
)

// Bounds of the supervisor's waits.
const (
	// readyTimeout bounds the wait for a started containerd's CRI API; one that
	// does not answer in time is killed and restarted.
	readyTimeout = time.Minute
	// defaultStopTimeout is how long containerd gets to exit on SIGTERM
	// before SIGKILL.
	defaultStopTimeout = 10 * time.Second
	// staleTimeout bounds the wait for a stale containerd to disappear.
	staleTimeout = 10 * time.Second
)

// Managed is a containerd run as a supervised child of this process. New
// builds it, Run runs it; Endpoint and Ready may be used from any goroutine.
type Managed struct {
	// mu guards cfg.Snapshotter, which Run detects; New resolves the rest of
	// cfg and nothing writes it after.
	mu       sync.Mutex
	cfg      Config
	ready    chan struct{} // closed by Run when CRI first answers
	wasReady bool          // ready is closed; only Run's goroutine touches it
	// restarts, starts and pid are read by the tests only (export_test.go):
	// the agent relists the runtime on its own period, restarted or not.
	restarts chan struct{} // cap 1: poked by Run when a restarted containerd answers
	started  atomic.Bool   // Run was called
	starts   atomic.Int64  // containerd processes started
	pid      atomic.Int64  // the running containerd's PID, 0 when none
	// stopTimeout is defaultStopTimeout (tests shorten it); set by New.
	stopTimeout time.Duration
	// reapInterval and stuckAfter time the reaping of stuck runc inits
	// (tests shorten them); set by New.
	reapInterval, stuckAfter time.Duration
	// sources maps each image imported from a file (its normalized name)
	// to that file, for ImportAgain; guarded by sourcesMu.
	sourcesMu sync.Mutex
	sources   map[string]string
}

// New validates cfg and resolves its defaults and the oom_score_adj detection.
// It writes nothing and starts nothing. The errors name the field and value;
// a missing binary is "containerd not found on PATH; install the containerd
// and runc packages or set containerRuntimeEndpoint" (runc likewise).
func New(cfg Config) (*Managed, error) {
	cfg, err := resolve(cfg, CanLowerOOMScoreAdj)
	if err != nil {
		return nil, err
	}
	return &Managed{cfg: cfg, ready: make(chan struct{}), restarts: make(chan struct{}, 1), stopTimeout: defaultStopTimeout,
		reapInterval: reapInterval, stuckAfter: stuckAfter}, nil
}

// Endpoint is the CRI endpoint, "unix://<StateDir>/containerd.sock".
func (m *Managed) Endpoint() string { return "unix://" + m.Socket() }

// Socket is containerd's gRPC socket path.
func (m *Managed) Socket() string { return socketPath(m.cfg.StateDir) }

// LogPath is the file containerd's output is appended to.
func (m *Managed) LogPath() string { return filepath.Join(m.cfg.StateDir, "containerd.log") }

// Ready is closed when containerd's CRI API first answers Version.
func (m *Managed) Ready() <-chan struct{} { return m.ready }

// Config returns the resolved configuration. Snapshotter is detected by Run:
// it is "" (detect) until Run has detected it, final once Ready is closed.
func (m *Managed) Config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// Run writes containerd's config (and the CNI config when the conf dir has
// none), then adopts the containerd a previous Run left running on the same
// StateDir (see below) or starts one, and keeps it running until ctx ends,
// restarting it with back-off when it dies. When ctx ends it stops containerd
// (SIGTERM, then SIGKILL after 10s) but not the pods: their shims keep
// running and the next containerd started on the same StateDir re-attaches
// them. Run returns nil after containerd is gone, or an error if it cannot
// set up the StateDir. It may be called once.
//
// containerd runs in its own session (and, with Config.Place, its own
// cgroup), so the death of this process does not take it along (unless
// Config.DieWithParent). Its pid and start time are kept in
// StateDir/containerd.pid: Run adopts the containerd that file records when
// that process still runs with this StateDir's config and its CRI API
// answers, and supervises it through a pidfd as it would its child. Any other
// process running containerd with this StateDir's config is killed first;
// nothing else is.
func (m *Managed) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("containerd: Run called twice")
	}
	if m.cfg.DieWithParent {
		// Pdeathsig fires when the thread that started the child ends: keep
		// this goroutine on one thread while containerd runs (Go otherwise
		// may end the thread under it).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	cfgPath, env, changed, err := m.prepare()
	if err != nil {
		return err
	}
	log := m.cfg.Logger
	adopted := m.adoptable(cfgPath, changed)
	var keep []int
	if adopted != nil {
		keep = append(keep, adopted.pid)
	}
	if err := killStale(cfgPath, keep...); err != nil {
		if adopted != nil {
			adopted.fd.close()
		}
		return err
	}
	var delay time.Duration
	for {
		if adopted == nil {
			// A socket left by a containerd that was killed must not block the
			// next (containerd unlinks it too, but a non-socket file would stop it).
			for _, s := range []string{m.Socket(), ttrpcSocket(m.cfg.StateDir)} {
				if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("containerd: remove stale socket: %w", err)
				}
			}
		}
		startedAt := m.cfg.Clock.Now()
		ranOK := m.runOnce(ctx, cfgPath, env, adopted)
		if ctx.Err() != nil {
			return nil
		}
		if adopted != nil && !ranOK {
			// The recorded containerd did not answer: start ours at once.
			adopted = nil
			continue
		}
		adopted = nil
		if !ranOK {
			// Never became ready: count it as a run of zero length.
			startedAt = m.cfg.Clock.Now()
		}
		delay = nextBackoff(delay, m.cfg.Clock.Since(startedAt))
		log.Info("containerd restarting after back-off", "delay", delay)
		t := m.cfg.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// prepare makes the StateDir layout, detects the snapshotter, writes the CNI
// and containerd configs and returns the config path, the child's env and
// whether the config differs from the one found there.
func (m *Managed) prepare() (string, []string, bool, error) {
	cfg := m.Config()
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "root"), filepath.Join(cfg.StateDir, "state"), cfg.CNIConfDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", nil, false, fmt.Errorf("containerd: %w", err)
		}
	}
	var overlayErr error
	if cfg.Snapshotter == "" {
		cfg.Snapshotter, overlayErr = detectSnapshotter(filepath.Join(cfg.StateDir, "root"), syscall.Mount, syscall.Unmount)
		m.mu.Lock()
		m.cfg.Snapshotter = cfg.Snapshotter
		m.mu.Unlock()
	}
	binDir, err := cniBinDir(cfg.StateDir, cfg.CNIBinDirs)
	if err != nil {
		return "", nil, false, err
	}
	written, err := WriteCNIConfig(cfg.CNIConfDir, cfg.PodCIDR, CNIOptions{
		Bridge: cfg.CNIBridge, DataDir: filepath.Join(cfg.StateDir, "cni", "networks"),
	})
	if err != nil {
		return "", nil, false, err
	}
	if err := writeRegistryHosts(registryHostsDir(cfg.StateDir), cfg.RegistryMirrors); err != nil {
		return "", nil, false, err
	}
	path := filepath.Join(cfg.StateDir, "config.toml")
	toml := configTOML(cfg, binDir)
	old, _ := os.ReadFile(path)
	if err := writeFileAtomic(path, []byte(toml)); err != nil {
		return "", nil, false, fmt.Errorf("containerd: write config: %w", err)
	}
	attrs := []any{"stateDir", cfg.StateDir, "binary", cfg.Binary, "snapshotter", cfg.Snapshotter,
		"restrictOOMScoreAdj", *cfg.RestrictOOMScoreAdj, "cniBinDirs", cfg.CNIBinDirs, "cniBinDir", binDir,
		"cniConfDir", cfg.CNIConfDir, "cniConfigWritten", written, "podCIDR", cfg.PodCIDR, "bridge", cfg.CNIBridge}
	if len(cfg.RegistryMirrors) > 0 {
		attrs = append(attrs, "registryMirrors", cfg.RegistryMirrors)
	}
	if overlayErr != nil {
		attrs = append(attrs, "overlayUnsupported", overlayErr.Error())
	}
	cfg.Logger.Info("starting managed containerd", attrs...)
	if len(cfg.CNIBinDirs) == 0 {
		cfg.Logger.Warn("no CNI plugin directory found; only hostNetwork pods can run (install containernetworking-plugins)",
			"searched", DefaultCNIBinDirs)
	}
	// containerd looks the shim up in PATH before its own directory: put the
	// binary's directory first, so a containerd outside PATH uses its own shim.
	env := append(os.Environ(), "PATH="+filepath.Dir(cfg.Binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return path, env, string(old) != toml, nil
}

// adoptee is a containerd left running by an earlier Run, found through the
// pid file.
type adoptee struct {
	pid int
	fd  *pidfd
}

// adoptable returns the containerd the pid file records when it still runs
// with cfgPath and the config did not change; nil otherwise. A recorded
// containerd whose config changed is stopped (it is ours: the pid file and
// its start time say so), so that one with the new config starts.
func (m *Managed) adoptable(cfgPath string, changed bool) *adoptee {
	log := m.cfg.Logger
	r, ok, err := readRecord(m.cfg.StateDir)
	if err != nil {
		log.Warn("ignoring the containerd pid file", "err", err)
		removeRecord(m.cfg.StateDir)
		return nil
	}
	if !ok {
		return nil
	}
	if r.Config != cfgPath {
		log.Warn("ignoring the containerd pid file: another config", "pid", r.PID, "config", r.Config, "want", cfgPath)
		removeRecord(m.cfg.StateDir)
		return nil
	}
	fd, err := openPidfd(r)
	if err != nil {
		log.Info("the recorded containerd is gone", "pid", r.PID, "reason", err.Error())
		removeRecord(m.cfg.StateDir)
		return nil
	}
	if changed {
		log.Info("containerd's config changed; restarting the running containerd", "pid", r.PID)
		terminate(fd.signal, fd.exited, m.stopTimeout)
		fd.close()
		removeRecord(m.cfg.StateDir)
		return nil
	}
	return &adoptee{pid: r.PID, fd: fd}
}

// runOnce starts containerd (or, with a, adopts that one), waits for its CRI
// API and then for its exit or the end of ctx (then it stops it). It reports
// whether CRI answered.
func (m *Managed) runOnce(ctx context.Context, cfgPath string, env []string, a *adoptee) bool {
	log := m.cfg.Logger
	var (
		pid     int
		exited  <-chan struct{}
		signal  func(syscall.Signal) error
		exitErr func() error // how it ended, once exited is closed
	)
	if a != nil {
		defer a.fd.close()
		pid, exited, signal = a.pid, a.fd.exited, a.fd.signal
		exitErr = func() error { return errors.New("exited (not our child: no status)") }
	} else {
		cmd, done, err := m.start(cfgPath, env)
		if err != nil {
			log.Error("start containerd", "err", err)
			return false
		}
		var waitErr error
		ch := make(chan struct{})
		go func() {
			waitErr = cmd.Wait()
			close(ch)
		}()
		done()
		pid, exited, signal = cmd.Process.Pid, ch, func(s syscall.Signal) error { return cmd.Process.Signal(s) }
		exitErr = func() error { return waitErr }
	}
	m.pid.Store(int64(pid))
	defer m.pid.Store(0)
	stop := func() {
		if terminate(signal, exited, m.stopTimeout) {
			log.Warn("containerd ignored SIGTERM; killed it", "pid", pid, "after", m.stopTimeout)
		} else {
			log.Info("containerd stopped", "pid", pid)
		}
		removeRecord(m.cfg.StateDir)
	}

	readyCtx, cancel := context.WithTimeout(ctx, readyTimeout)
	version, err := waitReady(readyCtx, m.Endpoint(), exited)
	cancel()
	if err != nil {
		stop()
		if ctx.Err() == nil {
			log.Error("containerd did not become ready", "pid", pid, "adopted", a != nil, "err", err, "exit", exitErr(), "log", m.LogPath())
		}
		return false
	}
	if a != nil {
		log.Info("adopted the running containerd", "pid", pid, "version", version)
	} else {
		log.Info("containerd ready", "pid", pid, "version", version)
	}
	// Before anyone uses it: what an interrupted operation left.
	cleanCtx, cancel := context.WithTimeout(ctx, cleanTimeout)
	if c, err := m.Clean(cleanCtx); err != nil {
		log.Warn("cleaning containerd's leftovers", "err", err, "shims", c.Shims, "runcInits", c.Inits, "taskDirs", c.TaskDirs)
	} else if c != (Cleaned{}) {
		log.Info("containerd's leftovers cleaned", "shims", c.Shims, "runcInits", c.Inits, "taskDirs", c.TaskDirs)
	}
	cancel()
	// The runc inits that run before anyone was told containerd is ready can
	// only be an interrupted operation's (the agent that asked died between
	// a task's creation and its start): the first pass reaps them.
	seen := m.initsBefore(time.Now().Add(-m.stuckAfter))
	if !m.wasReady {
		m.wasReady = true
		close(m.ready)
	} else {
		select {
		case m.restarts <- struct{}{}:
		default: // one pending already
		}
	}
	reap := time.NewTicker(m.reapInterval)
	defer reap.Stop()
	for {
		select {
		case <-exited:
			removeRecord(m.cfg.StateDir)
			log.Error("containerd exited", "pid", pid, "err", exitErr(), "log", m.LogPath())
			return true
		case <-ctx.Done():
			stop()
			return true
		case now := <-reap.C:
			seen = m.reapStuck(ctx, seen, now)
		}
	}
}

// start starts a containerd with cfgPath, records it in the pid file and
// places it with Config.Place. The caller must Wait for it, then call done
// (which closes this end of the log).
func (m *Managed) start(cfgPath string, env []string) (*exec.Cmd, func(), error) {
	log := m.cfg.Logger
	logf, err := os.OpenFile(m.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open containerd log: %w", err)
	}
	cmd := exec.Command(m.cfg.Binary, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr, cmd.Env = logf, logf, env
	// Its own session: neither a terminal's signals nor the death of this
	// process reach it (its shims, and so the pods, outlive it anyway).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if m.cfg.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	m.starts.Add(1)
	pid := cmd.Process.Pid
	// Placed before it serves: the shims it starts for pods inherit its
	// cgroup.
	if m.cfg.Place != nil {
		if err := m.cfg.Place(pid); err != nil {
			log.Warn("cannot place containerd in its cgroup; it runs in the agent's", "pid", pid, "err", err)
		}
	}
	// Its start time tells it from a later process with the same pid.
	if st, err := startTime(pid); err != nil {
		log.Warn("containerd's start time unknown; the next agent will not adopt it", "pid", pid, "err", err)
	} else if err := writeRecord(m.cfg.StateDir, record{PID: pid, StartTime: st, Config: cfgPath}); err != nil {
		log.Warn("the next agent will not adopt containerd", "pid", pid, "err", err)
	}
	return cmd, func() { logf.Close() }, nil
}

// nextBackoff returns the delay before the next restart, given the previous
// delay (0: none yet) and how long the containerd that just died ran.
func nextBackoff(prev, ranFor time.Duration) time.Duration {
	if prev == 0 || ranFor >= resetAfter {
		return initialBackoff
	}
	return min(2*prev, maxBackoff)
}

// waitReady waits until the CRI API at endpoint answers Version, the process
// exits or ctx ends, and returns the runtime version. It asks again, every
// 50ms, while the answer is an error: a containerd restarted over running
// pods answers "server is not initialized yet" until it has recovered them.
func waitReady(ctx context.Context, endpoint string, exited <-chan struct{}) (string, error) {
	// A short reconnect back-off: the socket appears milliseconds after start.
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		version string
		err     error
	}
	ready := make(chan result, 1)
	go func() {
		rt := runtimeapi.NewRuntimeServiceClient(conn)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			v, err := rt.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
			if err == nil || ctx.Err() != nil {
				ready <- result{v.GetRuntimeName() + " " + v.GetRuntimeVersion(), err}
				return
			}
			select {
			case <-ctx.Done():
				ready <- result{err: fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)}
				return
			case <-tick.C:
			}
		}
	}()
	select {
	case r := <-ready:
		return r.version, r.err
	case <-exited:
		cancel()
		<-ready
		return "", errors.New("containerd exited")
	}
}

// killStale SIGKILLs the containerd processes, other than except, left
// running with this config (an agent that died before it could stop them, or
// a containerd started by hand on our StateDir) and waits until they are
// gone: two containerds on one root would fight over it. Each is signalled
// through a pidfd opened after its command line was checked, so a pid reused
// meanwhile is not.
func killStale(cfgPath string, except ...int) error {
	for _, pid := range staleContainerds(cfgPath, except...) {
		st, err := startTime(pid)
		if err != nil {
			continue // gone
		}
		p, err := openPidfdIf(pid, st, func() bool { return ours(pid, cfgPath) })
		if err != nil {
			continue // gone, or another process now
		}
		err = p.signal(syscall.SIGKILL)
		if err == nil {
			select {
			case <-p.exited:
			case <-time.After(staleTimeout):
				err = fmt.Errorf("containerd: a stale containerd (pid %d) serving %s did not exit on SIGKILL", pid, cfgPath)
			}
		}
		p.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so a reader (containerd's CNI config watcher) never sees a partial file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}
