package plan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		entry     Backoff
		ok        bool
		event     time.Time
		now       time.Time
		wantIn    bool
		wantLeft  time.Duration
		wantDelay time.Duration // of NextBackoff(entry, ok, event)
	}{
		{name: "first exit restarts at once", event: t0, now: t0, wantDelay: 10 * time.Second},
		{name: "second exit waits 10s", entry: Backoff{Delay: 10 * time.Second, Last: t0}, ok: true, event: t0.Add(time.Second), now: t0.Add(3 * time.Second), wantIn: true, wantLeft: 8 * time.Second, wantDelay: 20 * time.Second},
		{name: "back-off over", entry: Backoff{Delay: 10 * time.Second, Last: t0}, ok: true, event: t0.Add(time.Second), now: t0.Add(11 * time.Second), wantDelay: 20 * time.Second},
		{name: "doubling stops at 5m", entry: Backoff{Delay: 160 * time.Second, Last: t0}, ok: true, event: t0.Add(time.Minute), now: t0.Add(time.Minute), wantIn: true, wantLeft: 160 * time.Second, wantDelay: 5 * time.Minute},
		{name: "at 5m stays 5m", entry: Backoff{Delay: 5 * time.Minute, Last: t0}, ok: true, event: t0.Add(time.Minute), now: t0.Add(time.Minute), wantIn: true, wantLeft: 5 * time.Minute, wantDelay: 5 * time.Minute},
		{name: "ran over 10 minutes: reset", entry: Backoff{Delay: 5 * time.Minute, Last: t0}, ok: true, event: t0.Add(10*time.Minute + time.Second), now: t0.Add(10*time.Minute + time.Second), wantDelay: 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, left := InBackoff(tc.entry, tc.ok, tc.event, tc.now)
			if in != tc.wantIn || left != tc.wantLeft {
				t.Errorf("InBackoff = %v, %v; want %v, %v", in, left, tc.wantIn, tc.wantLeft)
			}
			got := NextBackoff(tc.entry, tc.ok, tc.event)
			if diff := cmp.Diff(Backoff{Delay: tc.wantDelay, Last: tc.event}, got); diff != "" {
				t.Errorf("NextBackoff (-want +got):\n%s", diff)
			}
		})
	}
}
