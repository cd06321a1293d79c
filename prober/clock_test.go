package prober

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// armingClock is a fake clock that reports on armed the fake time every
// timer created or reset on it is due at, once the timer is armed: a test
// that has received it knows the waiter is in place and may step the clock.
type armingClock struct {
	*testingclock.FakeClock
	armed chan time.Time
}

func (c armingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.armed <- c.Now().Add(d)
	return armingTimer{Timer: t, clk: c}
}

type armingTimer struct {
	clock.Timer
	clk armingClock
}

func (t armingTimer) Reset(d time.Duration) bool {
	active := t.Timer.Reset(d)
	t.clk.armed <- t.clk.Now().Add(d)
	return active
}

// TestManagerRunsOnFakeClock: with Deps.Clock a fake clock, a probe runs at
// once (no jitter), its next run is armed for one period later, and it runs
// again when the fake clock reaches that time, not a millisecond before.
func TestManagerRunsOnFakeClock(t *testing.T) {
	t.Parallel()
	const period = 10 * time.Second
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := armingClock{FakeClock: testingclock.NewFakeClock(t0), armed: make(chan time.Time, 64)}
	calls := make(chan time.Time, 16) // the fake time of each probe run
	runner := RunnerFunc(func(context.Context, Target) (Outcome, string, error) {
		calls <- clk.Now()
		return OutcomeSuccess, "", nil
	})
	pod := testPod("p", v1.Container{Name: "app", LivenessProbe: execProbe("live", func(p *v1.Probe) {
		p.PeriodSeconds = int32(period / time.Second)
	})})
	st := runningStatus("c1", ptr.To(true))
	st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Minute)) // on the fake clock
	status := &fakeStatus{m: map[types.UID]v1.PodStatus{pod.UID: st}}
	m, err := New(Config{Concurrency: 1}, Deps{Status: status, Exec: runner, Clock: clk,
		Jitter: func(time.Duration) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}

	wantCall := func(at time.Time) {
		t.Helper()
		select {
		case got := <-calls:
			if !got.Equal(at) {
				t.Errorf("probe ran at %v, want %v", got.Sub(t0), at.Sub(t0))
			}
		case <-ctx.Done():
			t.Fatalf("no probe run at %v", at.Sub(t0))
		}
	}
	// wantArmed waits until the scheduler's timer is armed for at. (A wake-up
	// by a stale poke may re-arm it for an earlier due time first.)
	wantArmed := func(at time.Time) {
		t.Helper()
		for {
			select {
			case got := <-clk.armed:
				if got.Equal(at) {
					return
				}
				if got.After(at) {
					t.Fatalf("scheduler armed its timer for %v, want %v", got.Sub(t0), at.Sub(t0))
				}
			case <-ctx.Done():
				t.Fatalf("scheduler did not arm its timer for %v", at.Sub(t0))
			}
		}
	}

	wantCall(t0)
	select {
	case u := <-m.Results(Liveness).Updates():
		if u.ContainerID != "c1" || u.Result != Success {
			t.Errorf("update %+v, want c1 Success", u)
		}
	case <-ctx.Done():
		t.Fatal("no result published")
	}
	wantArmed(t0.Add(period))

	clk.Step(period - time.Millisecond)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d waiters on the fake clock after %v, want the scheduler's timer still pending", n, period-time.Millisecond)
	}
	select {
	case at := <-calls:
		t.Fatalf("probe ran at %v, before its period", at.Sub(t0))
	default:
	}

	clk.Step(time.Millisecond)
	wantCall(t0.Add(period))
	wantArmed(t0.Add(2 * period))
	if n := clk.Waiters(); n != 1 {
		t.Errorf("%d waiters on the fake clock, want 1 (the scheduler's one timer)", n)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
