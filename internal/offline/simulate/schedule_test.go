package simulate

import (
	"context"
	"slices"
	"testing"
	"time"
)

// playUntil calls the due steps, moving the schedule's time to each due time,
// until the next is after until.
func playUntil(s *schedule, until time.Duration, t *testing.T) {
	t.Helper()
	for {
		at, ok := s.next()
		if !ok {
			t.Fatal("nothing due")
		}
		if at.Sub(start) > until {
			return
		}
		if at.After(s.now) {
			s.now = at
		}
		for s.fireDue() {
		}
	}
}

// TestScheduleOrder runs two steps and checks that the schedule calls them at
// their due times, the first started first among equal times, one at a time
// (the shared log is written without a lock: the race detector checks that
// the steps never run together).
func TestScheduleOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	s := newSchedule(start)
	var log []string
	for _, l := range []struct {
		name   string
		period time.Duration
	}{{"a", 10 * time.Second}, {"b", 15 * time.Second}} {
		s.startLoop(ctx, l.name, func(_ context.Context, now time.Time) time.Time {
			log = append(log, now.Sub(start).String()+" "+l.name)
			return now.Add(l.period)
		})
	}
	playUntil(s, 30*time.Second, t)
	cancel()
	s.stopLoops()
	want := []string{"0s a", "0s b", "10s a", "15s b", "20s a", "30s a", "30s b"}
	if !slices.Equal(log, want) {
		t.Errorf("called %q, want %q", log, want)
	}
	if s.fired != len(want) {
		t.Errorf("fired = %d, want %d", s.fired, len(want))
	}
}

// A step that sleeps lets virtual time pass and the other steps run; it
// resumes at its wake-up (before the steps due then), or at once when
// expedited, and sleep returns false when the loops are stopped meanwhile.
func TestScheduleSleep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	s := newSchedule(start)
	var log []string
	at := func(what string) { log = append(log, s.now.Sub(start).String()+" "+what) }
	var woke []bool
	s.startLoop(ctx, "sleeper", func(_ context.Context, now time.Time) time.Time {
		at("sleeper")
		woke = append(woke, s.sleep(now.Add(12*time.Second)))
		at("sleeper woke")
		return s.now.Add(20 * time.Second)
	})
	s.startLoop(ctx, "ticker", func(_ context.Context, now time.Time) time.Time {
		at("ticker")
		return now.Add(6 * time.Second)
	})
	playUntil(s, 40*time.Second, t) // the second sleep, from 32s to 44s, is under way
	s.expedite()
	for s.fireDue() {
	}
	playUntil(s, 62*time.Second, t) // the third sleep, from 56s, is under way
	cancel()
	s.stopLoops()
	want := []string{
		"0s sleeper", "0s ticker", "6s ticker", "12s sleeper woke", "12s ticker", "18s ticker", "24s ticker",
		"30s ticker", "32s sleeper", "36s ticker", "36s sleeper woke", "42s ticker", "48s ticker", "54s ticker",
		"56s sleeper", "1m0s ticker", "1m0s sleeper woke",
	}
	if !slices.Equal(log, want) {
		t.Errorf("called %q,\nwant %q", log, want)
	}
	if !slices.Equal(woke, []bool{true, true, false}) {
		t.Errorf("sleeps returned %v, want true, true, false", woke)
	}
}
