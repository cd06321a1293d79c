package periodic

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2025, 11, 21, 12, 0, 0, 0, time.UTC)

// Three duties in one step: each runs at its own period, in the order given,
// and the step returns the earliest next due time.
func TestDuties(t *testing.T) {
	t.Parallel()
	var ran []string
	duty := func(name string, period time.Duration) Duty {
		return Duty{Period: period, Do: func(context.Context, time.Time) { ran = append(ran, name) }}
	}
	step, err := Duties(duty("detect", 2*time.Minute), duty("cache", 30*time.Second), duty("gc", 3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at   time.Duration
		ran  string
		next time.Duration
	}{
		{0, "detect cache gc", 30 * time.Second},
		{30 * time.Second, "cache", time.Minute},
		{time.Minute, "cache", 90 * time.Second},
		{90 * time.Second, "cache", 2 * time.Minute},
		{2 * time.Minute, "detect cache", 150 * time.Second},
		{150 * time.Second, "cache", 3 * time.Minute},
		{3 * time.Minute, "cache gc", 210 * time.Second},
		{200 * time.Second, "", 210 * time.Second}, // early: nothing due
	}
	for _, w := range want {
		ran = nil
		next := step(t.Context(), t0.Add(w.at))
		if got := strings.Join(ran, " "); got != w.ran {
			t.Errorf("step at %v ran %q, want %q", w.at, got, w.ran)
		}
		if got := next.Sub(t0); got != w.next {
			t.Errorf("step at %v: next due at %v, want %v", w.at, got, w.next)
		}
	}
}

// A late call runs each due duty once, not once per missed period, and the
// next due times count from the call.
func TestDutiesLateCall(t *testing.T) {
	t.Parallel()
	var at []time.Duration
	step, err := Duties(Duty{Period: 5 * time.Minute, Do: func(_ context.Context, now time.Time) { at = append(at, now.Sub(t0)) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, 17 * time.Minute, 21 * time.Minute, 22 * time.Minute} {
		step(t.Context(), t0.Add(d))
	}
	if diff := cmp.Diff([]time.Duration{0, 17 * time.Minute, 22 * time.Minute}, at); diff != "" {
		t.Errorf("runs at (-want +got):\n%s", diff)
	}
}

func TestDutiesRejectsBad(t *testing.T) {
	t.Parallel()
	for name, duties := range map[string][]Duty{
		"none":        nil,
		"zero period": {{Period: 0, Do: func(context.Context, time.Time) {}}},
		"no function": {{Period: time.Second}},
	} {
		if _, err := Duties(duties...); err == nil {
			t.Errorf("%s: Duties succeeded", name)
		}
	}
}

// Loop calls the step at once, then at the time it returned, and at once on a
// wake, with the bubble's time as now; it returns nil when ctx ends.
func TestLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var calls []time.Duration // guarded by mu
		step := func(_ context.Context, now time.Time) time.Time {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, now.Sub(start))
			return now.Add(time.Minute)
		}
		take := func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			out := calls
			calls = nil
			return out
		}
		wake := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- Loop(ctx, step, wake) }()
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{0}, take()); diff != "" {
			t.Fatalf("first call (-want +got):\n%s", diff)
		}
		time.Sleep(time.Minute) // virtual time in the bubble
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{time.Minute}, take()); diff != "" {
			t.Fatalf("call at the due time (-want +got):\n%s", diff)
		}
		time.Sleep(10 * time.Second)
		wake <- struct{}{}
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{70 * time.Second}, take()); diff != "" {
			t.Fatalf("call on wake (-want +got):\n%s", diff)
		}
		time.Sleep(59 * time.Second) // the wake's step moved the next due time
		synctest.Wait()
		if got := take(); len(got) != 0 {
			t.Fatalf("called at %v, before the next due time 2m10s", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]time.Duration{130 * time.Second}, take()); diff != "" {
			t.Fatalf("call after the wake's due time (-want +got):\n%s", diff)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Loop = %v, want nil", err)
		}
	})
}

// A step that returns a time not after now is called again at once.
func TestLoopPastDueCallsAgainAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var calls []time.Duration // guarded by mu
		step := func(_ context.Context, now time.Time) time.Time {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, now.Sub(start))
			if len(calls) == 1 {
				time.Sleep(5 * time.Second) // a pass that takes time
				return now
			}
			return now.Add(time.Hour)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- Loop(ctx, step, nil) }()
		time.Sleep(5 * time.Second) // until the first step has returned
		synctest.Wait()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]time.Duration{0, 5 * time.Second}, calls); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
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
