package simulate

import (
	"context"
	"errors"
	"fmt"
	"iter"
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
//
// Each loop runs as a coroutine (iter.Pull) that the simulator resumes: it
// runs while the simulator waits, and hands control back when it arms a timer
// (Reset yields) or returns. So exactly one of the simulator and the loops runs
// at any moment, and a wake-up passes control twice without the scheduler: a
// goroutine hand-off through channels per wake-up, with the runtime waking an
// idle thread each time, made a long scenario (millions of wake-ups) 2-3 times
// slower than calling the passes directly. The clock's state (timers, running)
// is touched only by whichever of them runs, so it needs no lock.
type virtualClock struct {
	*testingclock.FakePassiveClock

	timers []*virtualTimer // every timer made, in creation order
	loops  []*coLoop       // the loops started, in start order
	// running is the loop that runs now; nil while the simulator runs.
	running *coLoop
	// fired counts the timers fired: the loops' wake-ups.
	fired int
}

var _ clock.WithTicker = (*virtualClock)(nil)

func newVirtualClock(t time.Time) *virtualClock {
	return &virtualClock{FakePassiveClock: testingclock.NewFakePassiveClock(t)}
}

// coLoop is a manager's Run loop played as a coroutine of the simulator.
type coLoop struct {
	name string
	// resume runs the loop until it arms a timer or returns; ok is false
	// once it has returned. stop ends the coroutine: the loop's Reset returns
	// and no longer yields, so the loop must find its ctx done and return.
	resume func() (struct{}, bool)
	stop   func()
	// yield hands control back to the simulator; set when the coroutine starts.
	yield func(struct{}) bool
	// err is Run's error once it has returned.
	err error
}

// virtualTimer is a timer of a virtualClock.
type virtualTimer struct {
	c      *virtualClock
	ch     chan time.Time
	at     time.Time
	active bool
	// owner is the loop that armed the timer last, resumed when it fires; nil
	// when the simulator armed it.
	owner *coLoop
}

// errLoopStopped: a loop returned when it should have armed a timer.
var errLoopStopped = errors.New("simulate: a manager's loop stopped")

// startLoop starts run (a manager's Run method) as a coroutine on ctx and
// returns when it has made its timer. Loops' timers are ordered by the order
// in which the loops are started. ctx must end before stopLoops.
func (c *virtualClock) startLoop(ctx context.Context, name string, run func(context.Context) error) error {
	l := &coLoop{name: name}
	l.resume, l.stop = iter.Pull(func(yield func(struct{}) bool) {
		l.yield = yield
		if err := run(ctx); err != nil {
			l.err = fmt.Errorf("simulate: %s loop: %w", name, err)
		}
	})
	c.loops = append(c.loops, l)
	return c.resumeLoop(l)
}

// resumeLoop runs l until it arms a timer again.
func (c *virtualClock) resumeLoop(l *coLoop) error {
	c.running = l
	_, ok := l.resume()
	c.running = nil
	if !ok {
		return errLoopStopped
	}
	return nil
}

// stopLoops ends every loop, whose ctx must have ended, and returns their
// errors. Making or resetting a timer no longer waits for the simulator.
func (c *virtualClock) stopLoops() error {
	var errs []error
	for _, l := range c.loops {
		c.running = l
		l.stop()
		c.running = nil
		errs = append(errs, l.err)
	}
	return errors.Join(errs...)
}

// newStoppedTimer makes a timer that is not armed; unlike NewTimer it does not
// hand control back to the simulator. The simulator makes such timers for its
// own use.
func (c *virtualClock) newStoppedTimer() *virtualTimer {
	t := &virtualTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// NewTimer makes a timer that fires d from now. Like Reset, it hands control
// back to the simulator.
func (c *virtualClock) NewTimer(d time.Duration) clock.Timer {
	t := c.newStoppedTimer()
	t.Reset(d)
	return t
}

func (t *virtualTimer) C() <-chan time.Time { return t.ch }

// Reset arms the timer to fire d from now. Called by a loop, it hands control
// back to the simulator and returns when the simulator resumes the loop (the
// timer has fired, or the loop is being stopped).
func (t *virtualTimer) Reset(d time.Duration) bool {
	was := t.active
	t.at, t.active, t.owner = t.c.Now().Add(d), true, t.c.running
	if l := t.c.running; l != nil {
		l.yield(struct{}{})
	}
	return was
}

// expedite moves an armed timer's deadline to the clock's time, so that the
// simulator fires it at the current instant.
func (t *virtualTimer) expedite() {
	if t.active {
		t.at = t.c.Now()
	}
}

// Stop disarms the timer.
func (t *virtualTimer) Stop() bool {
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

// next returns the earliest deadline of an armed timer; ok is false when no
// timer is armed.
func (c *virtualClock) next() (at time.Time, ok bool) {
	for _, t := range c.timers {
		if t.active && (!ok || t.at.Before(at)) {
			at, ok = t.at, true
		}
	}
	return at, ok
}

// fireDue fires the first-made armed timer whose deadline is not after the
// clock's time and runs its loop until it has armed a timer again. It reports
// whether it fired one.
func (c *virtualClock) fireDue() (bool, error) {
	now := c.Now()
	var due *virtualTimer
	for _, t := range c.timers {
		if t.active && !t.at.After(now) {
			due = t
			break
		}
	}
	if due == nil {
		return false, nil
	}
	due.active = false
	c.fired++
	due.ch <- now // buffered, and empty: its loop took the previous value before re-arming
	if due.owner == nil {
		return true, nil
	}
	return true, c.resumeLoop(due.owner)
}
