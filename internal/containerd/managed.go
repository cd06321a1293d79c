package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
// builds it, Run runs it; Endpoint, Ready and Restarts may be used from any
// goroutine.
type Managed struct {
	// mu guards cfg.Snapshotter, which Run detects; New resolves the rest of
	// cfg and nothing writes it after.
	mu       sync.Mutex
	cfg      Config
	ready    chan struct{} // closed by Run when CRI first answers
	wasReady bool          // ready is closed; only Run's goroutine touches it
	restarts chan struct{} // cap 1: poked by Run when a restarted containerd answers
	started  atomic.Bool   // Run was called
	starts   atomic.Int64  // containerd processes started
	pid      atomic.Int64  // the running containerd's PID, 0 when none
	// stopTimeout is defaultStopTimeout (tests shorten it); set by New.
	stopTimeout time.Duration
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
	return &Managed{cfg: cfg, ready: make(chan struct{}), restarts: make(chan struct{}, 1), stopTimeout: defaultStopTimeout}, nil
}

// Endpoint is the CRI endpoint, "unix://<StateDir>/containerd.sock".
func (m *Managed) Endpoint() string { return "unix://" + m.Socket() }

// Socket is containerd's gRPC socket path.
func (m *Managed) Socket() string { return socketPath(m.cfg.StateDir) }

// LogPath is the file containerd's output is appended to.
func (m *Managed) LogPath() string { return filepath.Join(m.cfg.StateDir, "containerd.log") }

// Ready is closed when containerd's CRI API first answers Version.
func (m *Managed) Ready() <-chan struct{} { return m.ready }

// Restarts receives a value after containerd died, was restarted and its CRI
// API answers again: the agent's cue to relist and resync its pods. Values
// coalesce (the channel holds at most one), so a slow reader sees one value
// for several restarts; the first start is signalled by Ready, not here.
func (m *Managed) Restarts() <-chan struct{} { return m.restarts }

// Starts returns how many containerd processes Run has started (1 after the
// first start, +1 per restart).
func (m *Managed) Starts() int64 { return m.starts.Load() }

// PID returns the running containerd's process ID, or 0 when none runs.
func (m *Managed) PID() int { return int(m.pid.Load()) }

// Config returns the resolved configuration. Snapshotter is detected by Run:
// it is "" (detect) until Run has detected it, final once Ready is closed.
func (m *Managed) Config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// Run writes containerd's config (and the CNI config when the conf dir has
// none), starts containerd and keeps it running until ctx ends, restarting it
// with back-off when it dies. When ctx ends it stops containerd (SIGTERM, then
// SIGKILL after 10s) but not the pods: their shims keep running and the next
// containerd started on the same StateDir re-attaches them. Run returns nil
// after containerd is gone, or an error if it cannot set up the StateDir. It
// may be called once.
func (m *Managed) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("containerd: Run called twice")
	}
	// containerd dies with this process through Pdeathsig, which fires when the
	// thread that started it ends: keep this goroutine on one thread while
	// containerd runs (Go otherwise may end the thread under it).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	cfgPath, env, err := m.prepare()
	if err != nil {
		return err
	}
	log := m.cfg.Logger
	if err := killStale(cfgPath); err != nil {
		return err
	}
	var delay time.Duration
	for {
		// A socket left by a containerd that was killed must not block the
		// next (containerd unlinks it too, but a non-socket file would stop it).
		for _, s := range []string{m.Socket(), ttrpcSocket(m.cfg.StateDir)} {
			if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("containerd: remove stale socket: %w", err)
			}
		}
		startedAt := m.cfg.Clock.Now()
		ranOK := m.runOnce(ctx, cfgPath, env)
		if ctx.Err() != nil {
			return nil
		}
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
// and containerd configs and returns the config path and the child's env.
func (m *Managed) prepare() (string, []string, error) {
	cfg := m.Config()
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "root"), filepath.Join(cfg.StateDir, "state"), cfg.CNIConfDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", nil, fmt.Errorf("containerd: %w", err)
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
		return "", nil, err
	}
	written, err := WriteCNIConfig(cfg.CNIConfDir, cfg.PodCIDR, CNIOptions{
		Bridge: cfg.CNIBridge, DataDir: filepath.Join(cfg.StateDir, "cni", "networks"),
	})
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(cfg.StateDir, "config.toml")
	if err := writeFileAtomic(path, []byte(configTOML(cfg, binDir))); err != nil {
		return "", nil, fmt.Errorf("containerd: write config: %w", err)
	}
	attrs := []any{"stateDir", cfg.StateDir, "binary", cfg.Binary, "snapshotter", cfg.Snapshotter,
		"restrictOOMScoreAdj", *cfg.RestrictOOMScoreAdj, "cniBinDirs", cfg.CNIBinDirs, "cniBinDir", binDir,
		"cniConfDir", cfg.CNIConfDir, "cniConfigWritten", written, "podCIDR", cfg.PodCIDR, "bridge", cfg.CNIBridge}
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
	return path, env, nil
}

// runOnce starts containerd, waits for its CRI API and then for its exit or the
// end of ctx (then it stops it). It reports whether CRI answered.
func (m *Managed) runOnce(ctx context.Context, cfgPath string, env []string) bool {
	log := m.cfg.Logger
	logf, err := os.OpenFile(m.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Error("open containerd log", "err", err)
		return false
	}
	defer logf.Close()
	cmd := exec.Command(m.cfg.Binary, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr, cmd.Env = logf, logf, env
	// Its own process group, so a terminal's SIGINT reaches only us; SIGKILL
	// when this thread (see Run) dies, so a SIGKILLed agent leaves no
	// containerd behind. The shims are not its children in this sense: they
	// outlive it, and with them the pods.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Error("start containerd", "err", err)
		return false
	}
	m.starts.Add(1)
	m.pid.Store(int64(cmd.Process.Pid))
	// exited is closed when containerd has exited, with exitErr set before.
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		m.pid.Store(0)
		close(exited)
	}()

	readyCtx, cancel := context.WithTimeout(ctx, readyTimeout)
	version, err := waitReady(readyCtx, m.Endpoint(), exited)
	cancel()
	if err != nil {
		stop(cmd, exited, m.stopTimeout, log)
		if ctx.Err() == nil {
			log.Error("containerd did not become ready", "pid", cmd.Process.Pid, "err", err, "exit", exitErr, "log", m.LogPath())
		}
		return false
	}
	log.Info("containerd ready", "pid", cmd.Process.Pid, "version", version)
	if !m.wasReady {
		m.wasReady = true
		close(m.ready)
	} else {
		select {
		case m.restarts <- struct{}{}:
		default: // one pending already
		}
	}
	select {
	case <-exited:
		log.Error("containerd exited", "pid", cmd.Process.Pid, "err", exitErr, "log", m.LogPath())
	case <-ctx.Done():
		stop(cmd, exited, m.stopTimeout, log)
	}
	return true
}

// stop ends containerd: SIGTERM, then SIGKILL after timeout. It does not
// touch the shims (the pods keep running).
func stop(cmd *exec.Cmd, exited <-chan struct{}, timeout time.Duration, log *slog.Logger) {
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-exited:
		log.Info("containerd stopped", "pid", cmd.Process.Pid)
	case <-t.C:
		log.Warn("containerd ignored SIGTERM; killing it", "pid", cmd.Process.Pid, "after", timeout)
		_ = cmd.Process.Kill()
		<-exited
	}
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

// killStale SIGKILLs containerd processes left running with this config (by a
// parent that died without Pdeathsig reaching them) and waits until they are
// gone: two containerds on one root would fight over it.
func killStale(cfgPath string) error {
	pids := staleContainerds(cfgPath)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(staleTimeout)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("containerd: a stale containerd (pid %d) serving %s did not exit on SIGKILL", pid, cfgPath)
			}
			time.Sleep(10 * time.Millisecond) // bounded poll: no way to wait on a non-child
		}
	}
	return nil
}

// staleContainerds lists processes whose command line is "... --config cfgPath".
func staleContainerds(cfgPath string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "--config" && args[i+1] == cfgPath {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
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
