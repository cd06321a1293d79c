package pressure

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// allocChildEnv makes the test binary a child that takes memory on command:
// each line on stdin is "alloc MIB" (allocate and touch anonymous memory) or
// "cache MIB FILE" (write FILE, whose pages stay in the page cache as
// inactive file pages); it prints "done" after each and holds what it took
// until stdin closes.
const allocChildEnv = "NODEKEEPER_PRESSURE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(allocChildEnv) != "" {
		os.Exit(allocChild())
	}
	os.Exit(m.Run())
}

func allocChild() int {
	in := bufio.NewScanner(os.Stdin)
	var held [][]byte
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) < 2 {
			return 2
		}
		mib, err := strconv.Atoi(f[1])
		if err != nil {
			return 2
		}
		switch {
		case f[0] == "alloc":
			buf := make([]byte, mib<<20)
			for i := 0; i < len(buf); i += 4096 {
				buf[i] = 1
			}
			held = append(held, buf)
		case f[0] == "cache" && len(f) == 3:
			if err := writeCache(f[2], mib); err != nil {
				return 3
			}
		default:
			return 2
		}
		fmt.Println("done")
	}
	return len(held) - len(held) // held stays reachable until here
}

// writeCache writes a file of mib MiB a MiB at a time, so that the child's
// own anonymous memory stays small.
func writeCache(path string, mib int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := bytes.Repeat([]byte{1}, 1<<20)
	for range mib {
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// childProc is a memory-taking child of the test (see allocChildEnv).
type childProc struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// child starts the test binary as a memory-taking child in the memory
// cgroup dir (v1, or a v2 leaf).
func child(t testing.TB, dir string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), allocChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	if err := writeExisting(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	return &childProc{t: t, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
}

// stop ends the child and waits for it: its memory is uncharged when it
// returns.
func (c *childProc) stop() {
	_ = c.stdin.Close()
	_ = c.cmd.Wait()
}

// send gives the child a command without waiting for it to be done.
func (c *childProc) send(cmd string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// do runs one command and waits for it.
func (c *childProc) do(cmd string) {
	c.t.Helper()
	c.send(cmd)
	if line, err := c.out.ReadString('\n'); err != nil || line != "done\n" {
		c.t.Fatalf("child %q: %q, %v; want done", cmd, line, err)
	}
}

// memcgDir makes a v1 memory cgroup limited to 1 GiB for the test and
// returns its path in the hierarchy and its directory.
func memcgDir(t *testing.T) (name, dir string) {
	t.Helper()
	base := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(base, "cgroup.event_control")); err != nil {
		integration.Require(t, "no cgroup v1 memory hierarchy with cgroup.event_control: "+err.Error())
	}
	name = fmt.Sprintf("/nk-pressure-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	dir = filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		integration.Require(t, "cannot make a memory cgroup: "+err.Error())
	}
	t.Cleanup(func() {
		// The child has exited (its cleanup ran first); its page cache is
		// reparented when the cgroup goes.
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	if err := writeExisting(filepath.Join(dir, "memory.limit_in_bytes"), strconv.Itoa(1<<30)); err != nil {
		t.Fatal(err)
	}
	return name, dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// wakes counts Wake calls and signals each on a channel.
type wakes struct {
	n atomic.Int32
	c chan time.Time
}

func newWakes() *wakes { return &wakes{c: make(chan time.Time, 64)} }

func (w *wakes) wake() {
	w.n.Add(1)
	select {
	case w.c <- time.Now():
	default:
	}
}

// await waits up to d for a wake and returns when it happened (stamped by
// wake, not when the test goroutine got to it: on a busy machine that can
// be much later).
func (w *wakes) await(t *testing.T, d time.Duration, what string) time.Time {
	t.Helper()
	select {
	case at := <-w.c:
		return at
	case <-time.After(d):
		t.Fatalf("no wake within %v: %s", d, what)
		return time.Time{}
	}
}

// run runs n until the test ends and checks that Run returns nil.
func run(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after its context ended")
		}
	})
}

// v1Tree makes a cgroup v1 fixture tree with the memory cgroup /kp whose
// usage file holds usage and no cgroup.event_control: the notifier must poll.
func v1Tree(t *testing.T, usage string) (root, usageFile string) {
	t.Helper()
	root = t.TempDir()
	for _, f := range []string{"cpu/cgroup.procs", "memory/cgroup.procs", "memory/kp/memory.usage_in_bytes"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	usageFile = filepath.Join(root, "memory/kp/memory.usage_in_bytes")
	writeFile(t, usageFile, usage)
	return root, usageFile
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPollFallback: without memcg notifications the usage file is polled
// every PollPeriod, and statfs of each disk watch too; each wakes once when
// its value crosses the mark (not again while it stays past it), and again
// after it has come back and crossed anew.
func TestPollFallback(t *testing.T) {
	t.Parallel()
	root, usage := v1Tree(t, "100\n")
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var avail atomic.Uint64
	avail.Store(1000)
	polled := make(chan struct{}) // one value per poll, once it has read its figures
	w := newWakes()
	n, err := New(Config{
		CgroupFSRoot: root, ProcRoot: t.TempDir(),
		Memory:     []MemoryWatch{{Cgroup: "/kp", Usage: 500}},
		Disk:       []DiskWatch{{Path: "/data", Available: 300}},
		PollPeriod: time.Second, MemoryPollPeriod: time.Second,
	}, Deps{Wake: w.wake, Clock: clk, Logger: testLogger(t), Statfs: func(path string, st *unix.Statfs_t) error {
		if path != "/data" {
			return fmt.Errorf("statfs of unexpected path %q", path)
		}
		st.Bsize, st.Bavail = 1, avail.Load()
		polled <- struct{}{}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{MechanismMemoryPoll, MechanismStatfsPoll}, n.Mechanisms()); diff != "" {
		t.Errorf("mechanisms (-want +got):\n%s", diff)
	}
	awaitPoll := func(what string) {
		t.Helper()
		select {
		case <-polled:
		case <-time.After(10 * time.Second):
			t.Fatalf("no poll: %s", what)
		}
	}
	run(t, n)
	awaitPoll("at start") // usage 100, available 1000: no wake
	type state struct {
		usage string
		avail uint64
		wakes int32
	}
	for _, s := range []state{
		{"600", 1000, 1}, {"700", 1000, 1}, {"100", 1000, 1}, {"500", 1000, 2},
		{"500", 200, 3}, {"500", 100, 3}, {"500", 900, 3}, {"500", 299, 4},
	} {
		writeFile(t, usage, s.usage)
		avail.Store(s.avail)
		before := w.n.Load()
		clk.Step(time.Second)
		what := fmt.Sprintf("usage %s available %d", s.usage, s.avail)
		awaitPoll(what)
		if s.wakes > before {
			w.await(t, 10*time.Second, what)
		}
	}
	// A poll that should not wake is checked by the next one that should:
	// the count must be exact then, and at the end.
	if n := w.n.Load(); n != 4 {
		t.Errorf("wakes = %d, want 4", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"memory without usage", Config{Memory: []MemoryWatch{{Cgroup: "/kp"}}}, `pressure: memory watch 0: cgroup "/kp" usage 0: want a cgroup and a usage`},
		{"disk without path", Config{Disk: []DiskWatch{{Available: 1}}}, "pressure: disk watch 0: empty path"},
		{"negative period", Config{PollPeriod: -time.Second}, "pressure: poll period -1s: must not be negative"},
		{"negative memory period", Config{MemoryPollPeriod: -time.Second}, "pressure: memory poll period -1s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.cfg, Deps{Wake: func() {}})
			if err == nil || err.Error() != tc.want {
				t.Errorf("New error = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPSITrigger: the default trigger is accepted (with its 1s window, or
// widened to 2s where the process lacks CAP_SYS_RESOURCE) and one with a
// 1ms window is refused (then left out, logged); Run returns when its
// context ends while it waits on the trigger.
func TestPSITrigger(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		integration.Require(t, "no PSI: "+err.Error())
	}
	n, err := New(Config{PSITrigger: DefaultPSITrigger}, Deps{Wake: func() {}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Mechanisms(), MechanismPSI) {
		integration.Require(t, "PSI trigger refused here: "+fmt.Sprint(n.Mechanisms()))
	}
	run(t, n)
	bad, err := New(Config{PSITrigger: "some 150000 1000"}, Deps{Wake: func() {}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(bad.Mechanisms(), MechanismPSI) {
		t.Errorf("a 1ms window was accepted: %v", bad.Mechanisms())
	}
	bad.close()
}

// TestPSITriggerWidened: a 1s window the kernel refuses (it takes windows
// that are not a multiple of 2s only from a process with CAP_SYS_RESOURCE)
// is written again as 2s; where the kernel takes 1s, it stays 1s.
func TestPSITriggerWidened(t *testing.T) {
	t.Parallel()
	const path = "/proc/pressure/memory"
	if _, err := os.Stat(path); err != nil {
		integration.Require(t, "no PSI: "+err.Error())
	}
	want := DefaultPSITrigger
	fd, err := writeTrigger(path, DefaultPSITrigger)
	if err == nil {
		unix.Close(fd)
	} else {
		want = "some 150000 2000000"
	}
	fd, got, err := psiTrigger(path, DefaultPSITrigger)
	if err != nil {
		t.Fatalf("psiTrigger: %v", err)
	}
	unix.Close(fd)
	if got != want {
		t.Errorf("trigger taken %q, want %q (1s write error: %v)", got, want, err)
	}
	if _, _, err := psiTrigger(path, "some 150000 12000000"); err == nil {
		t.Errorf("a 12s window (over the kernel's 10s) was accepted")
	}
}

// TestMemcgThresholdWakes is the real thing on cgroup v1: a memory cgroup
// the test makes (limited to 1GiB, room for the race detector's shadow, so the machine is never at risk), a
// usage threshold at 64MiB, and a process in it allocating 128MiB: the
// notifier wakes without any poll (the poll period is an hour).
func TestMemcgThresholdWakes(t *testing.T) {
	t.Parallel()
	integration.OnCgroup(t, 1)
	name, dir := memcgDir(t)
	do := child(t, dir).do
	w := newWakes()
	n, err := New(Config{Memory: []MemoryWatch{{Cgroup: name, Usage: 64 << 20}}, PollPeriod: time.Hour},
		Deps{Wake: w.wake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{MechanismMemcgThreshold}, n.Mechanisms()); diff != "" {
		t.Fatalf("mechanisms (-want +got):\n%s", diff)
	}
	run(t, n)
	if w.n.Load() != 0 {
		t.Fatalf("woke %d times before the allocation", w.n.Load())
	}
	start := time.Now()
	do("alloc 128")
	w.await(t, 10*time.Second, "usage crossing 64MiB")
	t.Logf("woken %v after the allocation started", time.Since(start))
}

// TestMemcgThresholdRearmedForInactiveFile: the usage threshold counts the
// cgroup's inactive file pages, moved every RearmPeriod, so that a working
// set crossing the mark wakes even after page cache took usage past the
// working-set mark itself (the kubelet re-arms its notifiers the same way).
func TestMemcgThresholdRearmedForInactiveFile(t *testing.T) {
	t.Parallel()
	integration.OnCgroup(t, 1)
	name, dir := memcgDir(t)
	do := child(t, dir).do
	const period = time.Minute
	clk := clocktesting.NewFakeClock(time.Now())
	rearmed := make(chan struct{}, 1)
	w := newWakes()
	n, err := New(Config{Memory: []MemoryWatch{{Cgroup: name, Usage: 64 << 20}}, PollPeriod: time.Hour,
		RearmPeriod: period, FollowUps: []time.Duration{}, MinWakeInterval: -1},
		Deps{Wake: w.wake, Logger: testLogger(t), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	n.onRearm = func() { rearmed <- struct{}{} }
	run(t, n)

	// 96 MiB of page cache crosses the 64 MiB mark set before it existed: an
	// early wake, as with the kubelet between two re-arms.
	do(fmt.Sprintf("cache 96 %s", filepath.Join(t.TempDir(), "cache")))
	w.await(t, 10*time.Second, "usage crossing 64MiB with page cache")
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	clk.Step(period)
	select {
	case <-rearmed:
	case <-time.After(10 * time.Second):
		t.Fatal("no re-arm after the period")
	}
	if got := n.memcg[0].armed; got < (64+90)<<20 {
		t.Fatalf("re-armed at %d MiB, want 64 MiB plus the ~96 MiB of inactive file pages", got>>20)
	}
	for len(w.c) > 0 {
		<-w.c
	}
	// The working set now crosses 64 MiB: usage crosses the re-armed mark.
	do("alloc 128")
	w.await(t, 10*time.Second, "usage crossing the re-armed mark")
}

// TestNotificationsSpaced: notifications are delivered as wakes at most once
// per MinWakeInterval; those in between are merged into one wake at the end
// of the interval, none lost. The notifications come from an eventfd of the
// test's own, signalled as the kernel signals a memcg threshold.
func TestNotificationsSpaced(t *testing.T) {
	t.Parallel()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	w := newWakes()
	n, err := New(Config{MinWakeInterval: 300 * time.Millisecond, FollowUps: []time.Duration{}}, Deps{Wake: w.wake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	n.fds = []notifyFD{{fd: efd, events: unix.POLLIN, what: "test eventfd"}} // closed by Run
	run(t, n)
	signal := func() {
		t.Helper()
		if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	signal()
	first := w.await(t, 10*time.Second, "the first notification")
	for range 5 { // a burst within the interval
		signal()
	}
	if gap := w.await(t, 10*time.Second, "the burst, merged").Sub(first); gap < 250*time.Millisecond {
		t.Errorf("the burst woke %v after the first wake, want about the 300ms interval", gap)
	}
	select {
	case <-w.c:
		t.Errorf("the burst woke more than once (%d wakes)", w.n.Load())
	case <-time.After(500 * time.Millisecond): // checking that nothing more comes
	}
	if got := w.n.Load(); got != 2 {
		t.Errorf("wakes = %d, want 2", got)
	}
}

// TestFollowUps: a notification wakes at once and again after each
// follow-up delay (the working set may cross the mark after the usage did);
// a new notification restarts the follow-ups.
func TestFollowUps(t *testing.T) {
	t.Parallel()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	w := newWakes()
	// Follow-ups far enough apart that a poll woken late on a busy machine
	// does not find both due at once (then they are one wake, by design).
	n, err := New(Config{MinWakeInterval: -1, FollowUps: []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond}},
		Deps{Wake: w.wake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	n.fds = []notifyFD{{fd: efd, events: unix.POLLIN, what: "test eventfd"}} // closed by Run
	run(t, n)
	if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	start := w.await(t, 10*time.Second, "the notification")
	var at []time.Duration
	for range 2 {
		at = append(at, w.await(t, 10*time.Second, "a follow-up").Sub(start))
	}
	if at[0] < 250*time.Millisecond || at[1] < 1150*time.Millisecond {
		t.Errorf("follow-ups at %v after the notification, want about 300ms and 1.2s", at)
	}
	select {
	case <-w.c:
		t.Errorf("a wake after the last follow-up (%d wakes)", w.n.Load())
	case <-time.After(500 * time.Millisecond): // checking that nothing more comes
	}
}

func TestNewRejectsUnsortedFollowUps(t *testing.T) {
	t.Parallel()
	_, err := New(Config{FollowUps: []time.Duration{time.Second, time.Millisecond}}, Deps{Wake: func() {}})
	if want := "pressure: follow-ups [1s 1ms]: want non-negative delays in ascending order"; err == nil || err.Error() != want {
		t.Errorf("New error = %v, want %q", err, want)
	}
}

// v2Tree makes a cgroup v2 fixture tree: the root cgroup, whose memory.stat
// holds rootStat, and the cgroup /kp whose memory.current and memory.stat
// hold current and kpStat. It has no memory.events or memory.pressure: the
// notifier polls.
func v2Tree(t *testing.T, rootStat, current, kpStat string) (root string) {
	t.Helper()
	root = t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "kp"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "cgroup.controllers"), "cpu memory pids\n")
	writeFile(t, filepath.Join(root, "memory.stat"), rootStat)
	writeFile(t, filepath.Join(root, "kp/memory.current"), current)
	writeFile(t, filepath.Join(root, "kp/memory.stat"), kpStat)
	return root
}

// TestPollV2WorkingSet: on cgroup v2 each memory poll reads the working set
// itself — memory.current less inactive_file, or anon + file less
// inactive_file at the root, which has no memory.current — so a change of
// the inactive file pages counts at the next poll, with no re-arm.
func TestPollV2WorkingSet(t *testing.T) {
	t.Parallel()
	stat := func(anon, file, inactive int) string {
		return fmt.Sprintf("anon %d\nfile %d\nkernel 7\ninactive_anon 0\ninactive_file %d\n", anon, file, inactive)
	}
	root := v2Tree(t, stat(100, 100, 50), "200\n", stat(0, 0, 0))
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	polled := make(chan struct{}) // one value per poll, once it has read its figures
	w := newWakes()
	n, err := New(Config{
		CgroupFSRoot: root, ProcRoot: t.TempDir(),
		Memory:     []MemoryWatch{{Cgroup: "/", Usage: 500}, {Cgroup: "/kp", Usage: 300}},
		Disk:       []DiskWatch{{Path: "/data"}}, // never below: it marks the polls
		PollPeriod: time.Second, MemoryPollPeriod: time.Second,
		RearmPeriod: time.Hour,
	}, Deps{Wake: w.wake, Clock: clk, Logger: testLogger(t), Statfs: func(string, *unix.Statfs_t) error {
		polled <- struct{}{}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{MechanismMemoryPoll, MechanismStatfsPoll}, n.Mechanisms()); diff != "" {
		t.Errorf("mechanisms (-want +got):\n%s", diff)
	}
	awaitPoll := func(what string) {
		t.Helper()
		select {
		case <-polled:
		case <-time.After(10 * time.Second):
			t.Fatalf("no poll: %s", what)
		}
	}
	run(t, n)
	awaitPoll("at start") // root 150, kp 200: no wake
	for _, s := range []struct {
		what              string
		rootStat, current string
		kpStat            string
		wakes             int32
	}{
		{"kp usage 400 of which 200 inactive file: working set 200", stat(100, 100, 50), "400", stat(0, 300, 200), 0},
		{"kp inactive file down to 50: working set 350", stat(100, 100, 50), "400", stat(0, 300, 50), 1},
		{"kp stays over", stat(100, 100, 50), "450", stat(0, 300, 50), 1},
		{"root anon 400 file 200 inactive 50: working set 550", stat(400, 200, 50), "450", stat(0, 300, 50), 2},
		{"root inactive file 200: working set 400", stat(400, 200, 200), "450", stat(0, 300, 50), 2},
		{"root back over", stat(400, 200, 100), "450", stat(0, 300, 50), 3},
	} {
		writeFile(t, filepath.Join(root, "memory.stat"), s.rootStat)
		writeFile(t, filepath.Join(root, "kp/memory.current"), s.current)
		writeFile(t, filepath.Join(root, "kp/memory.stat"), s.kpStat)
		before := w.n.Load()
		clk.Step(time.Second)
		awaitPoll(s.what)
		if s.wakes > before {
			w.await(t, 10*time.Second, s.what)
		}
	}
	// Memory is polled before statfs: each count is exact once its poll
	// has reached statfs.
	if n := w.n.Load(); n != 3 {
		t.Errorf("wakes = %d, want 3", n)
	}
}

// v2Cgroup makes a cgroup v2 leaf for the test under the root, with memory
// enabled, memory.max 1GiB (room for the race detector's shadow, so the
// machine is never at risk), no swap and memory.high at high when it is
// not 0; it returns its path in the hierarchy and its directory.
func v2Cgroup(t testing.TB, high int) (name, dir string) {
	t.Helper()
	integration.OnCgroup(t, 2)
	const base = "/sys/fs/cgroup"
	ctl, err := os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
	if err != nil || !slices.Contains(strings.Fields(string(ctl)), "memory") {
		integration.Require(t, fmt.Sprintf("no memory controller in %s/cgroup.subtree_control: %q, %v", base, ctl, err))
	}
	name = fmt.Sprintf("/nk-pressure-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	dir = filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		integration.Require(t, "cannot make a cgroup: "+err.Error())
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	if err := writeExisting(filepath.Join(dir, "memory.max"), strconv.Itoa(1<<30)); err != nil {
		t.Fatal(err)
	}
	_ = writeExisting(filepath.Join(dir, "memory.swap.max"), "0") // absent without swap accounting
	if high > 0 {
		if err := writeExisting(filepath.Join(dir, "memory.high"), strconv.Itoa(high)); err != nil {
			t.Fatal(err)
		}
	}
	return name, dir
}

// unthrottle lifts memory.high of the cgroup dir when the test ends, before
// its child's cleanup waits for the child: a child throttled over
// memory.high would take minutes to finish its allocation.
func unthrottle(t *testing.T, dir string) {
	t.Cleanup(func() {
		if err := writeExisting(filepath.Join(dir, "memory.high"), "max"); err != nil {
			t.Errorf("lift memory.high: %v", err)
		}
	})
}

// fillTo has the child allocate 4MiB at a time until the cgroup's
// memory.current is within margin of mark (the race detector's shadow
// counts too, so the child's allocations are not the cgroup's usage).
func fillTo(t *testing.T, c *childProc, dir string, mark, margin uint64) {
	t.Helper()
	for {
		cur, err := readUint(filepath.Join(dir, "memory.current"))
		if err != nil {
			t.Fatal(err)
		}
		if cur+margin >= mark {
			return
		}
		c.do("alloc 4")
	}
}

// notifyFDOf returns the descriptor of n whose watch is what.
func notifyFDOf(t *testing.T, n *Notifier, what string) int {
	t.Helper()
	for _, f := range n.fds {
		if f.what == what {
			return f.fd
		}
	}
	t.Fatalf("no notification %q in %v", what, n.fds)
	return -1
}

// TestMemoryEventsReadAtOpen: a memory.events descriptor the notifier
// opened has nothing pending. kernfs reports POLLPRI|POLLERR at once on one
// that was never read, which woke the eviction manager 4 times at every
// start (the wake and its 3 follow-ups) while the cgroup sat idle.
func TestMemoryEventsReadAtOpen(t *testing.T) {
	t.Parallel()
	name, _ := v2Cgroup(t, 0)
	n, err := New(Config{Memory: []MemoryWatch{{Cgroup: name, Usage: 512 << 20}}}, Deps{Wake: func() {}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	if diff := cmp.Diff([]string{MechanismMemoryEvents, MechanismMemoryPoll}, n.Mechanisms()); diff != "" {
		t.Fatalf("mechanisms (-want +got):\n%s", diff)
	}
	pfd := []unix.PollFd{{Fd: int32(notifyFDOf(t, n, "memory.events "+name)), Events: unix.POLLPRI}}
	if _, err := unix.Poll(pfd, 0); err != nil {
		t.Fatal(err)
	}
	if pfd[0].Revents != 0 {
		t.Errorf("memory.events reports revents %#x at start, before any event", pfd[0].Revents)
	}
}

// TestMemoryEventsWakes is the real thing on cgroup v2: a cgroup the test
// makes with memory.high at 128MiB and a process in it that allocates past
// it: the notifier wakes on memory.events (the poll's mark, 768MiB, is never
// reached), and not before the crossing.
func TestMemoryEventsWakes(t *testing.T) {
	t.Parallel()
	const high = 128 << 20
	name, dir := v2Cgroup(t, high)
	c := child(t, dir)
	unthrottle(t, dir)
	w := newWakes()
	n, err := New(Config{Memory: []MemoryWatch{{Cgroup: name, Usage: 768 << 20}}, FollowUps: []time.Duration{}},
		Deps{Wake: w.wake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Mechanisms(), MechanismMemoryEvents) {
		t.Fatalf("mechanisms %v: no %s", n.Mechanisms(), MechanismMemoryEvents)
	}
	run(t, n)
	fillTo(t, c, dir, high, 16<<20) // rounds trips with the child: time for a wake at start to show
	if got := w.n.Load(); got != 0 {
		t.Fatalf("woke %d times below memory.high", got)
	}
	start := time.Now()
	c.send("alloc 32") // throttled over memory.high: its "done" is not awaited
	w.await(t, 10*time.Second, "memory.events on crossing memory.high")
	t.Logf("woken %v after the allocation started", time.Since(start))
}

// TestCgroupPSITrigger: on cgroup v2 the PSI trigger is written to the
// watched cgroup's memory.pressure too, and fires when a process of the
// cgroup stalls (throttled over memory.high, with no swap to reclaim to).
func TestCgroupPSITrigger(t *testing.T) {
	t.Parallel()
	const high = 64 << 20
	name, dir := v2Cgroup(t, high)
	c := child(t, dir)
	unthrottle(t, dir)
	n, err := New(Config{Memory: []MemoryWatch{{Cgroup: name, Usage: 768 << 20}}, PSITrigger: DefaultPSITrigger},
		Deps{Wake: func() {}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	if !slices.Contains(n.Mechanisms(), MechanismCgroupPSI) {
		t.Fatalf("mechanisms %v: no %s", n.Mechanisms(), MechanismCgroupPSI)
	}
	fillTo(t, c, dir, high, 8<<20)
	pfd := []unix.PollFd{{Fd: int32(notifyFDOf(t, n, "psi "+name)), Events: unix.POLLPRI}}
	start := time.Now()
	c.send("alloc 64") // throttled: its "done" is not awaited
	for pfd[0].Revents == 0 {
		left := 10*time.Second - time.Since(start)
		if left <= 0 {
			t.Fatalf("no PSI trigger within 10s; %s/memory.pressure: %s", dir, readOrErr(filepath.Join(dir, "memory.pressure")))
		}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
	}
	if pfd[0].Revents&unix.POLLPRI == 0 {
		t.Fatalf("PSI trigger revents %#x, want POLLPRI", pfd[0].Revents)
	}
	t.Logf("PSI trigger fired %v after the allocation started", time.Since(start))
}

func readOrErr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// BenchmarkWorkingSetReaction measures on cgroup v2 the notifier's reaction
// to a cgroup's working set crossing its mark, with the mechanisms the agent
// uses (the 100ms poll, memory.events, the cgroup's PSI trigger; no
// memory.high, so it is the poll that sees the crossing): from the onset,
// seen by the benchmark's own 5ms poll of memory.current less
// inactive_file, to Wake. A fresh child per run allocates 96MiB past a mark
// 32MiB over the cgroup's usage.
//
//	go test -c ./internal/machine/pressure && (in the cgroup v2 VM) ./pressure.test -test.run '^$' -test.bench WorkingSetReaction -test.benchtime 20x
func BenchmarkWorkingSetReaction(b *testing.B) {
	name, dir := v2Cgroup(b, 0)
	var lat []time.Duration
	for b.Loop() {
		c := child(b, dir)
		cur, err := readUint(filepath.Join(dir, "memory.current"))
		if err != nil {
			b.Fatal(err)
		}
		mark := cur + 32<<20
		woke := make(chan time.Time, 1)
		n, err := New(Config{Memory: []MemoryWatch{{Cgroup: name, Usage: mark}}, PSITrigger: DefaultPSITrigger, FollowUps: []time.Duration{}},
			Deps{Wake: func() {
				select {
				case woke <- time.Now():
				default:
				}
			}})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		onset := make(chan time.Time, 1)
		go func() {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for range t.C {
				if ws, err := workingSetV2(filepath.Join(dir, "memory.current"), filepath.Join(dir, "memory.stat")); err == nil && ws >= mark {
					onset <- time.Now()
					return
				}
			}
		}()
		c.do("alloc 96")
		var at, w time.Time
		select {
		case at = <-onset:
		case <-time.After(30 * time.Second):
			b.Fatal("no onset within 30s")
		}
		select {
		case w = <-woke:
		case <-time.After(30 * time.Second):
			b.Fatal("no wake within 30s of the onset")
		}
		lat = append(lat, w.Sub(at))
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		c.stop()
	}
	slices.Sort(lat)
	var s []string
	for _, d := range lat {
		s = append(s, d.Round(time.Millisecond).String())
	}
	b.Logf("onset to wake, sorted: %s", strings.Join(s, " "))
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "ms-median")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*9/10)].Milliseconds()), "ms-p90")
}

// TestWakeGate: the coalescing of notifications into wakes, with the time as
// data: a notification wakes at once and after each follow-up; a new one
// restarts the follow-ups; wakes closer than the minimum interval to the last
// are held and delivered as one at its end; next says when to look again.
func TestWakeGate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type call struct {
		at       int // ms
		notified bool
		wake     bool // want
		next     int  // want, ms; -1: none
	}
	tests := []struct {
		name      string
		interval  time.Duration
		followUps []time.Duration
		calls     []call
	}{
		{
			name: "follow-ups, restarted by a new notification", interval: -1,
			followUps: []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond},
			calls: []call{
				{0, true, true, 300},
				{299, false, false, 300},
				{300, false, true, 1200},
				{500, true, true, 800}, // restarts: 800, 1700
				{800, false, true, 1700},
				{1700, false, true, -1},
			},
		},
		{
			name: "a burst within the interval is one wake at its end", interval: 300 * time.Millisecond,
			calls: []call{
				{0, true, true, -1},
				{10, true, false, 300},
				{20, true, false, 300},
				{300, false, true, -1},
				{700, true, true, -1}, // past the interval: at once
			},
		},
		{
			name: "follow-ups due together are one wake", interval: -1,
			followUps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
			calls: []call{
				{0, true, true, 100},
				{250, false, true, -1},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := wakeGate{minInterval: tc.interval, followUps: tc.followUps}
			for _, c := range tc.calls {
				wake := g.step(c.notified, ms(c.at))
				if wake {
					g.woke(ms(c.at))
				}
				if wake != c.wake {
					t.Errorf("at %dms (notified %v): wake %v, want %v", c.at, c.notified, wake, c.wake)
				}
				want := time.Time{}
				if c.next >= 0 {
					want = ms(c.next)
				}
				if got := g.next(); !got.Equal(want) {
					t.Errorf("at %dms: next %v, want %v", c.at, got.Sub(t0), want.Sub(t0))
				}
			}
		})
	}
}
