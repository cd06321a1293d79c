package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cleanTimeout bounds the cleaning of leftovers after each start.
const cleanTimeout = time.Minute

// Cleaned counts what Clean removed.
type Cleaned struct {
	// Shims are the shims killed: their task is unknown to containerd.
	Shims int
	// Inits are the `runc init` processes killed (with their container's
	// other processes) by `runc delete --force`, of unknown containers.
	Inits int
	// TaskDirs are the task (bundle) directories removed.
	TaskDirs int
}

// taskDir is where containerd's runtime v2 keeps the bundles of the CRI
// namespace's tasks (state/io.containerd.runtime.v2.task/k8s.io).
func (m *Managed) taskDir() string {
	return filepath.Join(m.cfg.StateDir, "state", "io.containerd.runtime.v2.task", Namespace)
}

// runcRoot is runc's state directory for the CRI namespace.
func (m *Managed) runcRoot() string { return filepath.Join(m.cfg.StateDir, "runc", Namespace) }

// leftovers are the processes and directories of one containerd's CRI
// namespace, found on the machine, with the container IDs they belong to.
type leftovers struct {
	shims    map[int]string // shim pid -> its -id
	inits    map[int]string // `runc init` pid -> its container's ID
	taskDirs []string       // container IDs with a bundle directory
}

// Clean removes what an interrupted operation left of this StateDir's
// containerd (a containerd killed while it created a sandbox, or the one an
// older agent took down with it): the shims serving its socket whose task it
// does not know, the `runc init` processes of containers it does not know
// (stuck on their exec fifo, they hold a pod cgroup forever), and the bundle
// directories of tasks it does not know. Run calls it each time a containerd
// answers, before it signals Ready or a restart. It touches only what is
// proven this containerd's: shims whose command line names this socket,
// `runc init`s whose runc state directory is under this StateDir, and
// directories under it. What containerd knows is read after the processes
// and directories are listed, so a container being created meanwhile (its
// record precedes its shim) is never taken for a leftover.
func (m *Managed) Clean(ctx context.Context) (Cleaned, error) {
	var done Cleaned
	found := m.findLeftovers()
	if len(found.shims)+len(found.inits)+len(found.taskDirs) == 0 {
		return done, nil
	}
	known, err := m.containers(ctx)
	if err != nil {
		return done, err
	}
	live := map[string]bool{} // IDs of the shims of known tasks
	deleted := map[string]bool{}
	var errs []error
	for pid, id := range found.shims {
		if known[id] {
			live[id] = true
			continue
		}
		// Its container's processes first (runc init among them): with
		// the shim gone they would be nobody's.
		if !deleted[id] {
			deleted[id] = true
			errs = append(errs, m.runcDelete(ctx, id))
		}
		if err := killVerified(pid, id, m.Socket()); err != nil {
			errs = append(errs, err)
			continue
		}
		m.cfg.Logger.Info("killed a leaked containerd shim", "pid", pid, "id", id)
		done.Shims++
	}
	for pid, id := range found.inits {
		if known[id] {
			continue
		}
		if !deleted[id] {
			deleted[id] = true
			errs = append(errs, m.runcDelete(ctx, id))
		}
		if alive(pid) && isInit(pid, m.runcRoot()) == id {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		m.cfg.Logger.Info("killed a leaked runc init", "pid", pid, "id", id)
		done.Inits++
	}
	for _, id := range found.taskDirs {
		if known[id] || live[id] {
			continue
		}
		if !deleted[id] {
			deleted[id] = true
			errs = append(errs, m.runcDelete(ctx, id))
		}
		if err := m.removeBundle(id); err != nil {
			errs = append(errs, err)
			continue
		}
		m.cfg.Logger.Info("removed a stale task directory", "id", id)
		done.TaskDirs++
	}
	return done, errors.Join(errs...)
}

// findLeftovers lists this containerd's shims, `runc init` processes and
// bundle directories.
func (m *Managed) findLeftovers() leftovers {
	l := leftovers{shims: map[int]string{}, inits: map[int]string{}}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if id := isShim(pid, m.Socket()); id != "" {
			l.shims[pid] = id
		} else if id := isInit(pid, m.runcRoot()); id != "" {
			l.inits[pid] = id
		}
	}
	dirs, _ := os.ReadDir(m.taskDir())
	for _, d := range dirs {
		if d.IsDir() {
			l.taskDirs = append(l.taskDirs, d.Name())
		}
	}
	return l
}

// isShim returns the -id of pid when it is a containerd shim of the CRI
// namespace serving socket; "" otherwise.
func isShim(pid int, socket string) string {
	args, err := cmdline(pid)
	if err != nil || len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
		return ""
	}
	if !hasFlag(args, "-address", socket) || !hasFlag(args, "-namespace", Namespace) {
		return ""
	}
	id := flagValue(args, "-id")
	if !validID(id) {
		return ""
	}
	return id
}

// isInit returns the container ID of pid when it is a `runc init` whose runc
// state directory is runcRoot/ID; "" otherwise.
func isInit(pid int, runcRoot string) string {
	args, err := cmdline(pid)
	if err != nil || len(args) != 2 || filepath.Base(args[0]) != "runc" || args[1] != "init" {
		return ""
	}
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if dir, ok := strings.CutPrefix(string(kv), "_LIBCONTAINER_STATEDIR="); ok {
			if filepath.Dir(dir) == runcRoot && validID(filepath.Base(dir)) {
				return filepath.Base(dir)
			}
		}
	}
	return ""
}

// validID reports whether id may name a container's directory: not empty,
// no path separator, not "." or "..".
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsRune(id, '/')
}

// flagValue returns the value after name in args, "" when absent.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// killVerified SIGKILLs the shim pid through a pidfd after checking, on that
// pidfd, that it is still the shim of id serving socket, and waits for its exit.
func killVerified(pid int, id, socket string) error {
	st, err := startTime(pid)
	if err != nil {
		return nil // gone
	}
	p, err := openPidfdIf(pid, st, func() bool { return isShim(pid, socket) == id })
	if err != nil {
		return nil // gone, or another process now
	}
	defer p.close()
	if err := p.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill shim %d of %s: %w", pid, id, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(staleTimeout):
		return fmt.Errorf("shim %d of %s did not exit on SIGKILL", pid, id)
	}
}

// containers returns the IDs of the containers containerd has in the CRI
// namespace (its metadata, whatever their tasks' state), asked with ctr.
func (m *Managed) containers(ctx context.Context) (map[string]bool, error) {
	ctr, err := m.ctrPath()
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, ctr, "-a", m.Socket(), "-n", Namespace, "containers", "ls", "-q")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("list containers: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	known := map[string]bool{}
	for _, id := range strings.Fields(out.String()) {
		known[id] = true
	}
	return known, nil
}

// runcDelete runs `runc delete --force` on the container id of our runc
// root: it kills the container's processes (a stuck `runc init` among them)
// and removes its cgroups and runc state. A container runc does not know is
// no error.
func (m *Managed) runcDelete(ctx context.Context, id string) error {
	if _, err := os.Stat(filepath.Join(m.runcRoot(), id)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := exec.CommandContext(ctx, "runc", "--root", m.runcRoot(), "delete", "--force", id).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		return fmt.Errorf("runc delete --force %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeBundle unmounts what is mounted in the bundle directory of task id
// (its rootfs), removes the shim's socket it names (under /run/containerd/s,
// where the shim made it), and removes the directory.
func (m *Managed) removeBundle(id string) error {
	dir := filepath.Join(m.taskDir(), id)
	if b, err := os.ReadFile(filepath.Join(dir, "address")); err == nil {
		if s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "unix://"); ok && filepath.Dir(s) == "/run/containerd/s" {
			if st, err := os.Lstat(s); err == nil && st.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(s)
			}
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", mounts[i], err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove stale task directory: %w", err)
	}
	return nil
}

// Stuck `runc init` reaping: a `runc init` lives from the creation of its
// task to its start, milliseconds apart. A create whose start never came (the
// CRI call was cut off: its client, the agent, died) leaves it waiting on its
// exec fifo forever, holding the pod's cgroup, while containerd keeps the
// task it cannot delete ("cannot delete running task"). Run looks for them
// every reapInterval and kills those seen for stuckAfter.
const (
	reapInterval = 20 * time.Second
	stuckAfter   = time.Minute
)

// initKey names one `runc init` process: its pid and start time.
type initKey struct {
	pid   int
	start uint64
}

// inits returns the `runc init` processes of this StateDir's runc root, with
// their container IDs.
func (m *Managed) inits() map[initKey]string {
	ids := map[initKey]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		id := isInit(pid, m.runcRoot())
		if id == "" {
			continue
		}
		st, err := startTime(pid)
		if err != nil {
			continue
		}
		ids[initKey{pid, st}] = id
	}
	return ids
}

// initsBefore returns the `runc init`s running now as first seen at since:
// Run seeds the reaping with those that run before this process has asked
// containerd anything (they were made by an operation of an agent that
// died), dated back by stuckAfter so the first pass, reapInterval later,
// reaps them.
func (m *Managed) initsBefore(since time.Time) map[initKey]time.Time {
	seen := map[initKey]time.Time{}
	for k := range m.inits() {
		seen[k] = since
	}
	return seen
}

// stuckInits returns the processes of firstSeen seen at least after before now.
func stuckInits(firstSeen map[initKey]time.Time, now time.Time, after time.Duration) []initKey {
	var out []initKey
	for k, t := range firstSeen {
		if now.Sub(t) >= after {
			out = append(out, k)
		}
	}
	return out
}

// reapStuck updates firstSeen (the `runc init`s of this StateDir seen, with
// the time each was first seen; gone ones are dropped) and kills those seen
// for stuckAfter, then deletes their stopped tasks in containerd (which the
// CRI plugin leaves, so that removing the container fails with "cannot
// delete running task"); a task containerd does not know goes with `runc
// delete`. It returns the updated map.
func (m *Managed) reapStuck(ctx context.Context, firstSeen map[initKey]time.Time, now time.Time) map[initKey]time.Time {
	current := map[initKey]time.Time{}
	ids := m.inits()
	for k := range ids {
		if t, ok := firstSeen[k]; ok {
			current[k] = t
		} else {
			current[k] = now
		}
	}
	for _, k := range stuckInits(current, now, m.stuckAfter) {
		id := ids[k]
		p, err := openPidfdIf(k.pid, k.start, func() bool { return isInit(k.pid, m.runcRoot()) == id })
		if err != nil {
			continue
		}
		err = p.signal(syscall.SIGKILL)
		if err == nil {
			select {
			case <-p.exited:
			case <-ctx.Done():
			}
		}
		p.close()
		first := current[k]
		delete(current, k)
		if err != nil {
			continue
		}
		err = m.deleteTask(ctx, id)
		m.cfg.Logger.Warn("killed a stuck runc init: its task was created and never started", "pid", k.pid, "id", id,
			"after", now.Sub(first).Round(time.Second), "deleteTaskErr", err)
	}
	return current
}

// deleteTask deletes the task of container id, whose process was killed, in
// containerd when it knows the container (it may take a moment to see the
// task stopped), else with `runc delete`.
func (m *Managed) deleteTask(ctx context.Context, id string) error {
	known, err := m.containers(ctx)
	if err != nil {
		return err
	}
	if !known[id] {
		return m.runcDelete(ctx, id)
	}
	ctr, err := m.ctrPath()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := exec.CommandContext(ctx, ctr, "-a", m.Socket(), "-n", Namespace, "tasks", "delete", id).CombinedOutput()
		if err == nil || strings.Contains(string(out), "not found") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ctr tasks delete %s: %w: %s", id, err, strings.TrimSpace(string(out)))
		case <-tick.C: // the shim reports the exit asynchronously
		}
	}
}
