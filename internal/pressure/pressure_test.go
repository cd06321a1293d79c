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

	"github.com/nodekeeper/nodekeeper/internal/integration"
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

// child starts the test binary as a memory-taking child (see allocChildEnv)
// in the v1 memory cgroup dir; do runs one command and waits for it.
func child(t *testing.T, dir string) (do func(cmd string)) {
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
	out := bufio.NewReader(stdout)
	return func(c string) {
		t.Helper()
		if _, err := io.WriteString(stdin, c+"\n"); err != nil {
			t.Fatal(err)
		}
		if line, err := out.ReadString('\n'); err != nil || line != "done\n" {
			t.Fatalf("child %q: %q, %v; want done", c, line, err)
		}
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
		PollPeriod: time.Second,
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

// TestPSITrigger: the trigger is accepted with a 2s window on this machine
// and refused (then left out, logged) with a 1s one; Run returns when its
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

// TestMemcgThresholdWakes is the real thing on cgroup v1: a memory cgroup
// the test makes (limited to 1GiB, room for the race detector's shadow, so the machine is never at risk), a
// usage threshold at 64MiB, and a process in it allocating 128MiB: the
// notifier wakes without any poll (the poll period is an hour).
func TestMemcgThresholdWakes(t *testing.T) {
	t.Parallel()
	name, dir := memcgDir(t)
	do := child(t, dir)
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
	name, dir := memcgDir(t)
	do := child(t, dir)
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
	n, err := New(Config{MinWakeInterval: -1, FollowUps: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}},
		Deps{Wake: w.wake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	n.fds = []notifyFD{{fd: efd, events: unix.POLLIN, what: "test eventfd"}} // closed by Run
	run(t, n)
	if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	w.await(t, 10*time.Second, "the notification")
	start := time.Now()
	var at []time.Duration
	for range 2 {
		w.await(t, 10*time.Second, "a follow-up")
		at = append(at, time.Since(start))
	}
	if at[0] < 150*time.Millisecond || at[1] < 350*time.Millisecond {
		t.Errorf("follow-ups at %v after the notification, want about 200ms and 400ms", at)
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
