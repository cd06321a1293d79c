package simulate

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// loop is a Run loop with the discipline the clock expects: one timer, armed for
// 0, re-armed once per wake-up.
func loop(ctx context.Context, c *virtualClock, name string, period time.Duration, log *[]string) error {
	t := c.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		*log = append(*log, c.Now().Sub(start).String()+" "+name)
		t.Reset(period)
	}
}

// TestVirtualClockOrder runs two loops and checks that the clock fires their
// timers in deadline order, the first-made first among equal deadlines, one at
// a time (the shared log is written without a lock: the race detector checks
// that the loops never run together).
func TestVirtualClockOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	c := newVirtualClock(start)
	var log []string
	for _, l := range []struct {
		name   string
		period time.Duration
	}{{"a", 10 * time.Second}, {"b", 15 * time.Second}} {
		run := func(ctx context.Context) error { return loop(ctx, c, l.name, l.period, &log) }
		if err := c.startLoop(ctx, l.name, run); err != nil {
			t.Fatal(err)
		}
	}
	for {
		at, ok := c.next()
		if !ok {
			t.Fatal("no armed timer")
		}
		if at.Sub(start) > 30*time.Second {
			break
		}
		c.SetTime(at)
		for {
			fired, err := c.fireDue()
			if err != nil {
				t.Fatal(err)
			}
			if !fired {
				break
			}
		}
	}
	cancel()
	if err := c.stopLoops(); err != nil {
		t.Fatal(err)
	}
	want := []string{"0s a", "0s b", "10s a", "15s b", "20s a", "30s a", "30s b"}
	if !slices.Equal(log, want) {
		t.Errorf("fired %q, want %q", log, want)
	}
}

// A loop that returns instead of arming its timer again stops the run with
// its error.
func TestVirtualClockLoopReturns(t *testing.T) {
	t.Parallel()
	c := newVirtualClock(start)
	boom := errors.New("boom")
	err := c.startLoop(t.Context(), "once", func(context.Context) error {
		tm := c.NewTimer(time.Second)
		<-tm.C()
		return boom
	})
	if err != nil {
		t.Fatal(err)
	}
	c.SetTime(start.Add(time.Second))
	if fired, err := c.fireDue(); !fired || !errors.Is(err, errLoopStopped) {
		t.Errorf("fireDue = %v, %v; want true, %v", fired, err, errLoopStopped)
	}
	if err := c.stopLoops(); !errors.Is(err, boom) {
		t.Errorf("stopLoops = %v, want %v", err, boom)
	}
}

func TestVirtualClockStop(t *testing.T) {
	t.Parallel()
	c := newVirtualClock(start)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Error("Stop of an armed timer should report true once")
	}
	if _, ok := c.next(); ok {
		t.Error("a stopped timer is still armed")
	}
}
