package containerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pidFileName is the pid file under StateDir that records the containerd Run
// started, so that the next Run (or StopRecorded) finds it.
const pidFileName = "containerd.pid"

// record is the pid file's content: enough to tell the containerd Run started
// from any other process that later got the same pid.
type record struct {
	// PID is containerd's process ID.
	PID int `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat (clock ticks after boot): a
	// reused pid has another.
	StartTime uint64 `json:"startTime"`
	// Config is the --config path it was started with.
	Config string `json:"config"`
}

// pidFile returns the pid file's path under stateDir.
func pidFile(stateDir string) string { return filepath.Join(stateDir, pidFileName) }

// writeRecord writes r to stateDir's pid file atomically.
func writeRecord(stateDir string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(pidFile(stateDir), append(b, '\n')); err != nil {
		return fmt.Errorf("containerd: write pid file: %w", err)
	}
	return nil
}

// readRecord reads stateDir's pid file; ok is false when there is none. A
// file that does not parse is an error naming it.
func readRecord(stateDir string) (r record, ok bool, err error) {
	path := pidFile(stateDir)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("containerd: pid file: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(&limitedReader{f, 4096})
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, false, fmt.Errorf("containerd: pid file %s: %w", path, err)
	}
	if r.PID <= 0 || r.StartTime == 0 || r.Config == "" {
		return r, false, fmt.Errorf("containerd: pid file %s: pid %d, startTime %d, config %q: want a pid, its start time and the config path", path, r.PID, r.StartTime, r.Config)
	}
	return r, true, nil
}

// limitedReader reads at most n bytes, then reports an error (a pid file is
// a line; a larger one is not ours).
type limitedReader struct {
	f *os.File
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("larger than 4096 bytes")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= n
	return n, err
}

// removeRecord removes stateDir's pid file; a missing one is fine.
func removeRecord(stateDir string) {
	_ = os.Remove(pidFile(stateDir))
}

// procStat returns the state (field 3) and the start time in clock ticks
// after boot (field 22) of /proc/pid/stat, read once.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const field = 22 - 3 // f[0] is field 3, the state
	if len(f) <= field || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err = strconv.ParseUint(f[field], 10, 64)
	return f[0][0], start, err
}

// startTime returns the start time of process pid (procStat).
func startTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	state, _, err := procStat(pid)
	return err == nil && state != 'Z'
}

// cmdline returns the arguments of process pid.
func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}

// hasFlag reports whether args hold "name value" (or "name=value").
func hasFlag(args []string, name, value string) bool {
	for i, a := range args {
		if a == name+"="+value || (a == name && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
}

// pidfd is an open pidfd of a process this one may not wait for (not its
// child): it signals exactly that process, even after its pid is reused, and
// reports its exit.
type pidfd struct {
	f      *os.File
	exited chan struct{} // closed when the process has exited (or close was called)
}

// openPidfd opens a pidfd for r's process and checks, through it, that the
// process is still the one r records (no reuse between the check and the
// open). The caller must close it.
func openPidfd(r record) (*pidfd, error) {
	return openPidfdIf(r.PID, r.StartTime, func() bool {
		args, err := cmdline(r.PID)
		return err == nil && hasFlag(args, "--config", r.Config)
	})
}

// openPidfdIf opens a pidfd for pid when, after the open, pid still has the
// start time start, is alive and same reports true: the pidfd then refers to
// the process that was checked, whatever happens to the pid later. The
// caller must close it.
func openPidfdIf(pid int, start uint64, same func() bool) (*pidfd, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// The pid named the checked process before the open; it still does
	// after it only if the start time did not change.
	if state, st, err := procStat(pid); err != nil || st != start || state == 'Z' || !same() {
		unix.Close(fd)
		return nil, fmt.Errorf("pid %d is no longer the process checked", pid)
	}
	p := &pidfd{f: os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid)), exited: make(chan struct{})}
	rc, err := p.f.SyscallConn()
	if err != nil {
		p.f.Close()
		return nil, err
	}
	go func() {
		// A pidfd becomes readable when its process exits; the runtime's
		// poller wakes this goroutine then, or when close closes the file.
		_ = rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0 || (err != nil && err != unix.EINTR)
		})
		close(p.exited)
	}()
	return p, nil
}

// signal sends sig to the process; it is a no-op after it exited.
func (p *pidfd) signal(sig syscall.Signal) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return nil
	}
	return serr
}

// close releases the pidfd (and ends the exit watch).
func (p *pidfd) close() { _ = p.f.Close(); <-p.exited }

// terminate sends SIGTERM to the process and waits up to timeout for its
// exit, then SIGKILLs it and waits for its exit. It reports whether SIGKILL
// was needed.
func terminate(signal func(syscall.Signal) error, exited <-chan struct{}, timeout time.Duration) (killed bool) {
	select {
	case <-exited:
		return false
	default:
	}
	_ = signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-exited:
		return false
	case <-t.C:
		_ = signal(syscall.SIGKILL)
		<-exited
		return true
	}
}

// ErrAgentRunning is StopRecorded's class of error when the state directory's
// containerd is in use by an agent (the caller checks the agent's lock).
var ErrAgentRunning = errors.New("an agent is running")

// StopRecorded stops the containerd recorded in stateDir's pid file — one
// that an agent started and left running when it died — with SIGTERM, then
// SIGKILL after timeout, and removes the pid file. It reports the pid it
// stopped, 0 when the file records no live containerd (none, or a pid now
// used by another process: nothing is signalled then), and whether it took
// SIGKILL. It does not touch the
// shims: the pods keep running, and the next agent's containerd re-attaches
// them. The caller must make sure no agent is running on stateDir's root.
func StopRecorded(stateDir string, timeout time.Duration) (pid int, killed bool, err error) {
	r, ok, err := readRecord(stateDir)
	if err != nil || !ok {
		return 0, false, err
	}
	if filepath.Dir(r.Config) != filepath.Clean(stateDir) {
		return 0, false, fmt.Errorf("containerd: pid file %s: config %q is not in %s", pidFile(stateDir), r.Config, stateDir)
	}
	p, err := openPidfd(r)
	if err != nil {
		removeRecord(stateDir) // gone, or the pid is another process's now
		return 0, false, nil
	}
	defer p.close()
	killed = terminate(p.signal, p.exited, timeout)
	removeRecord(stateDir)
	return r.PID, killed, nil
}

// ours reports whether pid is a containerd serving cfgPath: its command
// line holds --config cfgPath (a path under our own StateDir).
func ours(pid int, cfgPath string) bool {
	args, err := cmdline(pid)
	return err == nil && hasFlag(args, "--config", cfgPath)
}

// staleContainerds lists the processes, other than this one and except,
// whose command line holds "--config cfgPath".
func staleContainerds(cfgPath string, except ...int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || slices.Contains(except, pid) {
			continue
		}
		if ours(pid, cfgPath) {
			pids = append(pids, pid)
		}
	}
	return pids
}
