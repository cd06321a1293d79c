package simulate

import (
	"context"
	"iter"
	"time"
)

// schedule drives the managers' steps (docs/architecture.md, One time model)
// on virtual time. It keeps each step's next due time; the simulator moves its
// time and calls the due steps one at a time — the earliest, and among equal
// times the first in start order — with its time as the steps' now. Time stands
// still while a step works, so a run is exact to the nanosecond and as fast as
// the work.
//
// A step may wait on virtual time once: a kill of a pod whose shutdown the
// scenario holds waits for the kill's timeout (sleep), and meanwhile the
// simulator goes on with the scenario and the other steps. So each loop runs
// as a coroutine (iter.Pull) that the simulator resumes when its step is due:
// it calls the step and hands control back when the step has returned (with
// its next due time) or sleeps. Exactly one of the simulator and the loops
// runs at any moment, and a wake-up passes control twice without the
// scheduler: a goroutine hand-off through channels per wake-up, with the
// runtime waking an idle thread each time, made a long scenario (millions of
// wake-ups) 2-3 times slower. The schedule is touched only by whichever of
// them runs, so it needs no lock.
type schedule struct {
	now time.Time
	// sleeper is the kill that sleeps; it comes before the loops among equal
	// times.
	sleeper timer
	loops   []*stepLoop // in start order
	// running is the loop that runs now; nil while the simulator runs.
	running *stepLoop
	// fired counts the wake-ups: steps called and sleeps ended.
	fired int
}

// timer is a due time, and the loop to resume at it.
type timer struct {
	at    time.Time
	armed bool
	owner *stepLoop
}

// stepLoop is a manager's step played as a coroutine of the simulator.
type stepLoop struct {
	name string
	timer
	// resume runs the loop until its step returns or sleeps; stop ends the
	// coroutine: a sleep then returns false at once.
	resume func() (struct{}, bool)
	stop   func()
	// yield hands control back to the simulator; set when the coroutine starts.
	yield func(struct{}) bool
}

func newSchedule(t time.Time) *schedule { return &schedule{now: t} }

// startLoop adds step, due at once, to the schedule; it runs on ctx, which
// must end before stopLoops. Loops are ordered by the order they are started.
func (s *schedule) startLoop(ctx context.Context, name string, step func(context.Context, time.Time) time.Time) {
	l := &stepLoop{name: name}
	l.timer = timer{at: s.now, armed: true, owner: l}
	l.resume, l.stop = iter.Pull(func(yield func(struct{}) bool) {
		l.yield = yield
		for {
			next := step(ctx, s.now)
			l.at, l.armed = next, true
			if !yield(struct{}{}) {
				return
			}
		}
	})
	s.loops = append(s.loops, l)
}

// stopLoops ends every loop, whose ctx must have ended.
func (s *schedule) stopLoops() {
	for _, l := range s.loops {
		s.running = l
		l.stop()
		s.running = nil
	}
}

// sleep suspends the running loop's step until the schedule's time reaches
// at, or expedite moves the wake-up to the current time; it reports false when
// the loops are being stopped instead. Only a step may sleep, one at a time.
func (s *schedule) sleep(at time.Time) bool {
	l := s.running
	s.sleeper = timer{at: at, armed: true, owner: l}
	return l.yield(struct{}{})
}

// expedite moves the sleeping step's wake-up to the current time, so that the
// simulator resumes it at the current instant.
func (s *schedule) expedite() {
	if s.sleeper.armed {
		s.sleeper.at = s.now
	}
}

// cancelSleep disarms a sleep that ended without its wake-up.
func (s *schedule) cancelSleep() { s.sleeper.armed = false }

// next returns the earliest due time; ok is false when nothing is due.
func (s *schedule) next() (at time.Time, ok bool) {
	if s.sleeper.armed {
		at, ok = s.sleeper.at, true
	}
	for _, l := range s.loops {
		if l.armed && (!ok || l.at.Before(at)) {
			at, ok = l.at, true
		}
	}
	return at, ok
}

// fireDue resumes the first loop whose step (or sleep) is due at the
// schedule's time, until its step returns or sleeps. It reports whether one
// was due.
func (s *schedule) fireDue() bool {
	due := &s.sleeper
	if !due.armed || due.at.After(s.now) {
		due = nil
		for _, l := range s.loops {
			if l.armed && !l.at.After(s.now) {
				due = &l.timer
				break
			}
		}
	}
	if due == nil {
		return false
	}
	due.armed = false
	s.fired++
	s.running = due.owner
	due.owner.resume()
	s.running = nil
	return true
}
