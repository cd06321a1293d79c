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
		wantDelay time.Duration // of NextBackoff(PullPolicy(), entry, ok, event, now)
	}{
		{name: "first exit restarts at once", event: t0, now: t0, wantDelay: 10 * time.Second},
		{name: "second exit waits 10s", entry: Backoff{Delay: 10 * time.Second, Last: t0}, ok: true, event: t0.Add(time.Second), now: t0.Add(3 * time.Second), wantIn: true, wantLeft: 8 * time.Second, wantDelay: 20 * time.Second},
		{name: "back-off over", entry: Backoff{Delay: 10 * time.Second, Last: t0}, ok: true, event: t0.Add(time.Second), now: t0.Add(11 * time.Second), wantDelay: 20 * time.Second},
		{name: "doubling stops at 5m", entry: Backoff{Delay: 160 * time.Second, Last: t0}, ok: true, event: t0.Add(time.Minute), now: t0.Add(time.Minute), wantIn: true, wantLeft: 160 * time.Second, wantDelay: 5 * time.Minute},
		{name: "at 5m stays 5m", entry: Backoff{Delay: 5 * time.Minute, Last: t0}, ok: true, event: t0.Add(time.Minute), now: t0.Add(time.Minute), wantIn: true, wantLeft: 5 * time.Minute, wantDelay: 5 * time.Minute},
		{name: "ran 10 minutes: no reset yet", entry: Backoff{Delay: 5 * time.Minute, Last: t0}, ok: true, event: t0.Add(10 * time.Minute), now: t0.Add(10 * time.Minute), wantIn: true, wantLeft: 5 * time.Minute, wantDelay: 5 * time.Minute},
		{name: "ran over 10 minutes: reset", entry: Backoff{Delay: 5 * time.Minute, Last: t0}, ok: true, event: t0.Add(10*time.Minute + time.Second), now: t0.Add(10*time.Minute + time.Second), wantDelay: 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, left := InBackoff(PullPolicy(), tc.entry, tc.ok, tc.event, tc.now)
			if in != tc.wantIn || left != tc.wantLeft {
				t.Errorf("InBackoff = %v, %v; want %v, %v", in, left, tc.wantIn, tc.wantLeft)
			}
			got := NextBackoff(PullPolicy(), tc.entry, tc.ok, tc.event, tc.now)
			if diff := cmp.Diff(Backoff{Delay: tc.wantDelay, Last: tc.now}, got); diff != "" {
				t.Errorf("NextBackoff (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCrashLoopPolicy checks the first delay and the cap the kubelet v1.36
// derives from its two gates and maxContainerRestartPeriod
// (newCrashLoopBackOff), and the delays of a container that crashes at once
// after each restart: the upstream e2e comments count restarts at 0s, 0s,
// 10s, 30s, 70s, 150s, 310s by default.
func TestCrashLoopPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		reduced    bool
		maxPeriod  time.Duration
		want       Policy
		wantDelays []time.Duration // after the 1st, 2nd, ... restart
	}{
		{name: "defaults", want: Policy{Initial: 10 * time.Second, Max: 5 * time.Minute, Reset: 10 * time.Minute},
			wantDelays: secs(10, 20, 40, 80, 160, 300, 300)},
		{name: "defaulted max 300s", maxPeriod: 300 * time.Second, want: Policy{Initial: 10 * time.Second, Max: 5 * time.Minute, Reset: 10 * time.Minute},
			wantDelays: secs(10, 20, 40, 80, 160, 300, 300)},
		{name: "max 30s", maxPeriod: 30 * time.Second, want: Policy{Initial: 10 * time.Second, Max: 30 * time.Second, Reset: 10 * time.Minute},
			wantDelays: secs(10, 20, 30, 30)},
		{name: "max 2s lowers the first delay", maxPeriod: 2 * time.Second, want: Policy{Initial: 2 * time.Second, Max: 2 * time.Second, Reset: 10 * time.Minute},
			wantDelays: secs(2, 2, 2)},
		{name: "reduced, max gate off", reduced: true, want: Policy{Initial: time.Second, Max: time.Minute, Reset: 10 * time.Minute},
			wantDelays: secs(1, 2, 4, 8, 16, 32, 60, 60)},
		{name: "reduced, the max set wins over 60s", reduced: true, maxPeriod: 300 * time.Second, want: Policy{Initial: time.Second, Max: 5 * time.Minute, Reset: 10 * time.Minute},
			wantDelays: secs(1, 2, 4, 8, 16, 32, 64, 128, 256, 300)},
		{name: "reduced, max 1s", reduced: true, maxPeriod: time.Second, want: Policy{Initial: time.Second, Max: time.Second, Reset: 10 * time.Minute},
			wantDelays: secs(1, 1, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := CrashLoopPolicy(tc.reduced, tc.maxPeriod)
			if diff := cmp.Diff(tc.want, p); diff != "" {
				t.Fatalf("CrashLoopPolicy (-want +got):\n%s", diff)
			}
			// A container that exits as it starts: each restart happens
			// when its back-off ends, and advances it.
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var e Backoff
			ok := false
			var got []time.Duration
			for range tc.wantDelays {
				if in, left := InBackoff(p, e, ok, now, now); ok && (!in || left != e.Delay) {
					t.Fatalf("InBackoff at the exit = %v, %v; want true, %v", in, left, e.Delay)
				}
				now = now.Add(e.Delay) // the restart
				if in, _ := InBackoff(p, e, ok, now.Add(-e.Delay), now); in {
					t.Fatalf("still in back-off at %v after the exit", e.Delay)
				}
				e, ok = NextBackoff(p, e, ok, now.Add(-e.Delay), now), true
				got = append(got, e.Delay)
			}
			if diff := cmp.Diff(tc.wantDelays, got); diff != "" {
				t.Errorf("delays (-want +got):\n%s", diff)
			}
		})
	}
}

func secs(s ...int) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v) * time.Second
	}
	return out
}
