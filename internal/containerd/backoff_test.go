package containerd

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
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
