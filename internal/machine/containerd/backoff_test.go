package containerd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// timerClock is a fake clock that reports each timer made, so a test knows
// when the supervisor waits and for how long.
type timerClock struct {
	*testingclock.FakeClock
	timers chan time.Duration
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers <- d
	return t
}

// TestRunBacksOff runs a "containerd" that exits at once: Run restarts it
// after 1s, 2s, 4s... at most 30s, and returns when ctx ends during a wait.
func TestRunBacksOff(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "containerd"), []byte("#!/bin/sh\necho crashing >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	executable(t, bin, "runc")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	state, err := os.MkdirTemp("/tmp", "nkb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	clk := timerClock{FakeClock: testingclock.NewFakeClock(time.Unix(1000, 0)), timers: make(chan time.Duration)}
	m, err := New(Config{
		StateDir: state, SandboxImage: "docker.io/nodekeeper/pause:1", Snapshotter: Native,
		CNIBinDirs: []string{bin}, Clock: clk, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	for i, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		want *= time.Second
		select {
		case got := <-clk.timers:
			if got != want {
				t.Fatalf("wait %d: %v, want %v", i+1, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no back-off wait %d within 10s", i+1)
		}
		if got := m.Starts(); got != int64(i+1) {
			t.Fatalf("before wait %d: %d starts, want %d", i+1, got, i+1)
		}
		clk.Step(want)
	}
	<-clk.timers // waiting again
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	select {
	case <-m.Ready():
		t.Error("Ready closed, but containerd never answered")
	default:
	}
	if b, _ := os.ReadFile(m.LogPath()); len(b) == 0 {
		t.Error("containerd's output is not in its log")
	}
}

// TestRunKillsAfterStopTimeout: a containerd that ignores SIGTERM is killed
// when the stop timeout passes, and Run returns.
func TestRunKillsAfterStopTimeout(t *testing.T) {
	bin := t.TempDir()
	state, err := os.MkdirTemp("/tmp", "nkb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	fifo := filepath.Join(state, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ntrap '' TERM\necho $$ > " + fifo + "\nexec sleep 1000\n"
	if err := os.WriteFile(filepath.Join(bin, "containerd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	executable(t, bin, "runc")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	m, err := New(Config{
		StateDir: state, SandboxImage: "docker.io/nodekeeper/pause:1", Snapshotter: Native,
		CNIBinDirs: []string{bin}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	m.stopTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	pidc := make(chan int, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // blocks until the script writes
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		pidc <- pid
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake containerd did not start within 10s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return: the SIGTERM-ignoring containerd was not killed")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d after Run returned: kill(0) = %v, want ESRCH", pid, err)
	}
}
