package simulate

import (
	"context"
	"slices"
	"testing"
	"time"
)

// loop is a Run loop with the discipline the clock expects: one timer, armed for
// 0, re-armed once per wake-up.
func loop(ctx context.Context, c *virtualClock, name string, period time.Duration, log *[]string) {
	t := c.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
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
	stopped := make(chan struct{})
	done := make(chan struct{}, 2)
	for _, l := range []struct {
		name   string
		period time.Duration
	}{{"a", 10 * time.Second}, {"b", 15 * time.Second}} {
		go func() { loop(ctx, c, l.name, l.period, &log); done <- struct{}{} }()
		if err := c.awaitArm(ctx, stopped); err != nil {
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
			fired, err := c.fireDue(ctx, stopped)
			if err != nil {
				t.Fatal(err)
			}
			if !fired {
				break
			}
		}
	}
	cancel()
	<-done
	<-done
	want := []string{"0s a", "0s b", "10s a", "15s b", "20s a", "30s a", "30s b"}
	if !slices.Equal(log, want) {
		t.Errorf("fired %q, want %q", log, want)
	}
}

func TestVirtualClockStop(t *testing.T) {
	t.Parallel()
	c := newVirtualClock(start)
	go func() { <-c.armed }()
	tm := c.NewTimer(time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Error("Stop of an armed timer should report true once")
	}
	if _, ok := c.next(); ok {
		t.Error("a stopped timer is still armed")
	}
}
