// Package periodic runs the passes of nodekeeper's scheduled managers (the
// eviction manager, image GC, container GC) in the one time model of
// docs/architecture.md:
//
//   - a manager's pass is a [Step]: it runs what is due at now and returns when
//     it is due again; nodekeeper simulate calls the steps on virtual time;
//   - [Duties] makes one step of several duties with their own periods;
//   - [Loop] is the thin real-time loop over a step that a manager's Run is;
//   - [Serial] lets one pass run at a time, whether the loop or an on-demand
//     caller (eviction's reclaim) started it, honouring the caller's context.
//
// The package keeps no state of its own.
package periodic

import (
	"context"
	"errors"
	"time"
)

// Step runs the work due at now and returns the time it is due again; a time
// not after now means "call again at once". Its caller calls it from one
// goroutine at a time.
type Step func(ctx context.Context, now time.Time) (next time.Time)

// Loop calls step until ctx ends, then returns nil: at once, then at each time
// step returns, and at once whenever wake delivers (a nil wake never does; a
// wake while step runs is kept for after it). It reads time.Now once per
// wake-up, before the step, and waits on one time.Timer. It calls step from its
// own goroutine only.
func Loop(ctx context.Context, step Step, wake <-chan struct{}) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
		if ctx.Err() != nil {
			return nil
		}
		t.Reset(time.Until(step(ctx, time.Now())))
	}
}

// Duty is one periodic duty of a step.
type Duty struct {
	// Period is how long after a run the duty is due again; it must be positive.
	Period time.Duration
	// Do runs the duty once at now. It handles (logs, records) its own failures
	// and returns when it is done or ctx has ended.
	Do func(ctx context.Context, now time.Time)
}

// Duties returns a step that runs duties on their periods: every duty is
// first due at the first call; a call runs the due duties in the order given,
// each due again Period after now, and returns the earliest next due time.
// The step keeps the duties' due times: call it from one goroutine at a time.
// It returns an error if duties is empty or a duty has no function or a
// period that is not positive (a programmer error).
func Duties(duties ...Duty) (Step, error) {
	if len(duties) == 0 {
		return nil, errors.New("periodic: no duties")
	}
	for _, d := range duties {
		if d.Period <= 0 || d.Do == nil {
			return nil, errors.New("periodic: a duty needs a positive period and a function")
		}
	}
	next := make([]time.Time, len(duties)) // the zero time: due at the first call
	return func(ctx context.Context, now time.Time) time.Time {
		var earliest time.Time
		for i, d := range duties {
			if !now.Before(next[i]) {
				d.Do(ctx, now)
				next[i] = now.Add(d.Period)
			}
			if i == 0 || next[i].Before(earliest) {
				earliest = next[i]
			}
		}
		return earliest
	}, nil
}

// Serial admits one pass at a time. Create it with NewSerial; its methods may
// be called from any goroutine.
type Serial chan struct{}

// NewSerial returns a Serial that admits a pass.
func NewSerial() Serial { return make(Serial, 1) }

// Lock waits until no other pass holds s and takes it, or returns ctx's error
// if ctx ends first. Each successful Lock must be followed by one Unlock.
func (s Serial) Lock(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases s, taken by Lock.
func (s Serial) Unlock() { <-s }
