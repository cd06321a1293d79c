// Package periodic runs the passes of nodekeeper's background managers (image
// GC, container GC):
//
//   - [Run] drives a manager's periodic duties on ONE timer of an injected
//     k8s.io/utils/clock clock, re-armed once per wake-up. nodekeeper simulate
//     relies on that discipline to drive the real loops on a virtual clock: it
//     fires the one timer, then waits for the loop's next Reset before it moves
//     virtual time.
//   - [Serial] lets one pass run at a time, whether the loop or an on-demand
//     caller (eviction's reclaim) started it, honouring the caller's context.
//
// The package keeps no state of its own.
package periodic

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/clock"
)

// Duty is one periodic duty of a loop.
type Duty struct {
	// Period is how long after a run the duty is due again; it must be positive.
	Period time.Duration
	// Do runs the duty once. It handles (logs, records) its own failures and
	// returns when it is done or ctx has ended.
	Do func(ctx context.Context)
}

// Run runs duties on one timer of clk until ctx ends, then returns nil. Every
// duty is first due at the first wake-up, which the timer, created once and
// armed for 0, gives at once. On each wake-up Run reads the time once, runs the
// due duties in the order given, each due again Period after that time, and
// then re-arms the timer with one Reset to the earliest next due time. Reset is
// its last clock call before it waits again; it uses no other timer, ticker,
// After or Sleep. Run calls the duties from its own goroutine, one at a time.
// It returns an error, without running anything, if duties is empty or a
// period is not positive (a programmer error).
func Run(ctx context.Context, clk clock.WithTicker, duties ...Duty) error {
	if len(duties) == 0 {
		return errors.New("periodic: no duties")
	}
	for _, d := range duties {
		if d.Period <= 0 || d.Do == nil {
			return errors.New("periodic: a duty needs a positive period and a function")
		}
	}
	next := make([]time.Time, len(duties)) // the zero time: due at the first wake-up
	t := clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if ctx.Err() != nil {
			return nil
		}
		now := clk.Now()
		earliest := time.Time{}
		for i, d := range duties {
			if !now.Before(next[i]) {
				d.Do(ctx)
				next[i] = now.Add(d.Period)
			}
			if i == 0 || next[i].Before(earliest) {
				earliest = next[i]
			}
		}
		t.Reset(max(earliest.Sub(clk.Now()), 0))
	}
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
