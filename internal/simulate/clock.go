package simulate

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// virtualClock is the simulation's clock: the managers' real Run loops wait on
// its timers, and the simulator moves its time. Time stands still while a
// manager works, so a run is exact to the nanosecond and as fast as the work.
//
// Now and Since come from k8s.io/utils' fake clock. Its timers are our own:
// the fake clock fires every due timer at once, which would let several loops
// run together against the scripted node and make the timeline depend on the
// scheduler. Here the simulator fires one timer at a time — the earliest, and
// among equal deadlines the one made first — and then waits until a loop arms
// a timer again, which the loops do exactly once per wake-up, as the last thing
// before they wait (the discipline their Run methods document). Only NewTimer
// is supported; the other ways to wait are programmer errors here.
type virtualClock struct {
	*testingclock.FakePassiveClock

	mu     sync.Mutex
	timers []*virtualTimer // every timer made, in creation order; guarded by mu
	// armed receives one value each time a timer is made or reset.
	armed chan struct{}
	// done is closed when the simulation ends: from then on making or
	// resetting a timer no longer waits for the simulator.
	done chan struct{}
}

var _ clock.WithTicker = (*virtualClock)(nil)

func newVirtualClock(t time.Time) *virtualClock {
	return &virtualClock{FakePassiveClock: testingclock.NewFakePassiveClock(t), armed: make(chan struct{}), done: make(chan struct{})}
}

// virtualTimer is a timer of a virtualClock. Its deadline and state are
// guarded by the clock's mu.
type virtualTimer struct {
	c      *virtualClock
	ch     chan time.Time
	at     time.Time
	active bool
}

// newStoppedTimer makes a timer that is not armed; unlike NewTimer it does not
// wait for the simulator. The simulator makes such timers for its own use.
func (c *virtualClock) newStoppedTimer() *virtualTimer {
	t := &virtualTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

// NewTimer makes a timer that fires d from now. Like Reset, it blocks until the
// simulator takes note.
func (c *virtualClock) NewTimer(d time.Duration) clock.Timer {
	t := c.newStoppedTimer()
	t.Reset(d)
	return t
}

func (t *virtualTimer) C() <-chan time.Time { return t.ch }

// Reset arms the timer to fire d from now and tells the simulator.
func (t *virtualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.active
	t.at, t.active = t.c.Now().Add(d), true
	t.c.mu.Unlock()
	select {
	case t.c.armed <- struct{}{}:
	case <-t.c.done:
	}
	return was
}

// expedite moves an armed timer's deadline to the clock's time, so that the
// simulator fires it at the current instant. Unlike Reset it does not wait for
// the simulator: the simulator calls it.
func (t *virtualTimer) expedite() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.active {
		t.at = t.c.Now()
	}
}

// stop ends the simulation's hold on the loops: a loop that makes or resets a
// timer after it no longer waits for the simulator to take note.
func (c *virtualClock) stop() { close(c.done) }

// Stop disarms the timer.
func (t *virtualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (c *virtualClock) After(time.Duration) <-chan time.Time {
	panic("simulate: loops must wait on NewTimer")
}
func (c *virtualClock) Tick(time.Duration) <-chan time.Time {
	panic("simulate: loops must wait on NewTimer")
}
func (c *virtualClock) NewTicker(time.Duration) clock.Ticker {
	panic("simulate: loops must wait on NewTimer")
}
func (c *virtualClock) Sleep(time.Duration) { panic("simulate: loops must wait on NewTimer") }

// errLoopStopped: a loop ended while the simulator waited for it to arm a timer.
var errLoopStopped = errors.New("simulate: a manager's loop stopped")

// awaitArm waits until a loop makes or resets a timer, or until stopped is
// closed (a loop returned).
func (c *virtualClock) awaitArm(ctx context.Context, stopped <-chan struct{}) error {
	select {
	case <-c.armed:
		return nil
	case <-stopped:
		return errLoopStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the earliest deadline of an armed timer; ok is false when no
// timer is armed.
func (c *virtualClock) next() (at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if t.active && (!ok || t.at.Before(at)) {
			at, ok = t.at, true
		}
	}
	return at, ok
}

// fireDue fires the first-made armed timer whose deadline is not after the
// clock's time and waits until its loop has armed a timer again. It reports
// whether it fired one.
func (c *virtualClock) fireDue(ctx context.Context, stopped <-chan struct{}) (bool, error) {
	c.mu.Lock()
	now := c.Now()
	var due *virtualTimer
	for _, t := range c.timers {
		if t.active && !t.at.After(now) {
			due = t
			break
		}
	}
	if due == nil {
		c.mu.Unlock()
		return false, nil
	}
	due.active = false
	c.mu.Unlock()
	due.ch <- now // buffered, and empty: its loop took the previous value before re-arming
	return true, c.awaitArm(ctx, stopped)
}
