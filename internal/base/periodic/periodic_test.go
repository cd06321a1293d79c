package periodic

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2025, 11, 21, 12, 0, 0, 0, time.UTC)

// callLog is a clock that logs the clock calls made through it and the
// timers it created, over a FakeClock.
type callLog struct {
	*testingclock.FakeClock
	mu    sync.Mutex
	calls []string // guarded by mu
}

func (c *callLog) add(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
}

// take returns the calls logged since the last take.
func (c *callLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

func (c *callLog) Now() time.Time { c.add("Now"); return c.FakeClock.Now() }
func (c *callLog) Since(ts time.Time) time.Duration {
	c.add("Since")
	return c.FakeClock.Since(ts)
}
func (c *callLog) After(d time.Duration) <-chan time.Time {
	c.add("After")
	return c.FakeClock.After(d)
}
func (c *callLog) NewTicker(d time.Duration) clock.Ticker {
	c.add("NewTicker")
	return c.FakeClock.NewTicker(d)
}
func (c *callLog) Tick(d time.Duration) <-chan time.Time {
	c.add("Tick")
	return c.FakeClock.Tick(d)
}
func (c *callLog) Sleep(d time.Duration) { c.add("Sleep"); c.FakeClock.Sleep(d) }
func (c *callLog) NewTimer(d time.Duration) clock.Timer {
	c.add(fmt.Sprintf("NewTimer(%v)", d))
	return loggedTimer{c.FakeClock.NewTimer(d), c}
}

type loggedTimer struct {
	clock.Timer
	c *callLog
}

func (t loggedTimer) Reset(d time.Duration) bool {
	t.c.add(fmt.Sprintf("Reset(%v)", d))
	return t.Timer.Reset(d)
}

func (t loggedTimer) Stop() bool { t.c.add("Stop"); return t.Timer.Stop() }

// Three duties on one timer: each runs at its own period, in the order given,
// and each wake-up ends with exactly one Reset to the earliest next due time.
func TestRunDuties(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := &callLog{FakeClock: testingclock.NewFakeClock(t0)}
		var mu sync.Mutex
		var ran []string // guarded by mu
		duty := func(name string, period time.Duration) Duty {
			return Duty{Period: period, Do: func(context.Context) {
				mu.Lock()
				defer mu.Unlock()
				ran = append(ran, name)
			}}
		}
		takeRan := func() string {
			mu.Lock()
			defer mu.Unlock()
			out := strings.Join(ran, " ")
			ran = nil
			return out
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() {
			done <- Run(ctx, clk, duty("detect", 2*time.Minute), duty("cache", 30*time.Second), duty("gc", 3*time.Minute))
		}()
		synctest.Wait()
		if diff := cmp.Diff([]string{"NewTimer(0s)"}, clk.take()); diff != "" {
			t.Fatalf("clock calls before the first wake-up (-want +got):\n%s", diff)
		}
		if got := takeRan(); got != "" {
			t.Fatalf("duties ran before the first wake-up: %s", got)
		}
		type wake struct {
			ran   string
			reset time.Duration
		}
		want := []wake{
			{"detect cache gc", 30 * time.Second}, // 0s
			{"cache", 30 * time.Second},           // 30s
			{"cache", 30 * time.Second},           // 1m
			{"cache", 30 * time.Second},           // 1m30s
			{"detect cache", 30 * time.Second},    // 2m
			{"cache", 30 * time.Second},           // 2m30s
			{"cache gc", 30 * time.Second},        // 3m
		}
		step := time.Duration(0)
		for i, w := range want {
			clk.Step(step)
			synctest.Wait()
			if got := takeRan(); got != w.ran {
				t.Errorf("wake-up %d at %v: ran %q, want %q", i, clk.FakeClock.Since(t0), got, w.ran)
			}
			calls := clk.take()
			if len(calls) == 0 || calls[len(calls)-1] != fmt.Sprintf("Reset(%v)", w.reset) {
				t.Fatalf("wake-up %d: clock calls %v, want Now calls then Reset(%v)", i, calls, w.reset)
			}
			for _, c := range calls[:len(calls)-1] {
				if c != "Now" {
					t.Errorf("wake-up %d: clock call %s before Reset, want only Now", i, c)
				}
			}
			if n := clk.Waiters(); n != 1 {
				t.Errorf("wake-up %d: %d timers armed, want 1", i, n)
			}
			step = w.reset
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if diff := cmp.Diff([]string{"Stop"}, clk.take()); diff != "" {
			t.Errorf("clock calls at the end (-want +got):\n%s", diff)
		}
	})
}

// A late wake-up runs each due duty once, not once per missed period, and the
// next due times count from the wake-up.
func TestRunLateWakeUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := testingclock.NewFakeClock(t0)
		var mu sync.Mutex
		var at []time.Duration // guarded by mu
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() {
			done <- Run(ctx, clk, Duty{Period: 5 * time.Minute, Do: func(context.Context) {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, clk.Since(t0))
			}})
		}()
		synctest.Wait()
		for _, d := range []time.Duration{0, 17 * time.Minute, 4 * time.Minute, time.Minute} {
			clk.Step(d)
			synctest.Wait()
		}
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]time.Duration{0, 17 * time.Minute, 22 * time.Minute}, at); diff != "" {
			t.Errorf("runs at (-want +got):\n%s", diff)
		}
	})
}

func TestRunRejectsBadDuties(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0)
	for name, duties := range map[string][]Duty{
		"none":        nil,
		"zero period": {{Period: 0, Do: func(context.Context) {}}},
		"no function": {{Period: time.Second}},
	} {
		if err := Run(t.Context(), clk, duties...); err == nil {
			t.Errorf("%s: Run succeeded", name)
		}
	}
	if clk.HasWaiters() {
		t.Error("Run armed a timer for bad duties")
	}
}

func TestSerial(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial()
		if err := s.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := s.Lock(ctx); err != context.Canceled {
			t.Fatalf("Lock while held with an ended ctx = %v, want context.Canceled", err)
		}
		locked := make(chan error, 1)
		go func() { locked <- s.Lock(t.Context()) }()
		synctest.Wait() // the second pass is blocked in Lock
		select {
		case err := <-locked:
			t.Fatalf("a second pass got past Lock (%v) while the first held it", err)
		default:
		}
		s.Unlock()
		synctest.Wait()
		select {
		case err := <-locked:
			if err != nil {
				t.Fatalf("Lock after Unlock = %v", err)
			}
		default:
			t.Fatal("the waiting pass did not get the lock after Unlock")
		}
		s.Unlock()
	})
}
