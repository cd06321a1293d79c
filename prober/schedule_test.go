package prober

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestManagerRunsOnSchedule (in a synctest bubble, whose time is virtual): a
// probe runs at once (no jitter), and again when one period has passed, not a
// millisecond before.
func TestManagerRunsOnSchedule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const period = 10 * time.Second
		t0 := time.Now()
		var mu sync.Mutex
		var calls []time.Duration // guarded by mu; when each probe ran, since t0
		takeCalls := func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			out := calls
			calls = nil
			return out
		}
		runner := RunnerFunc(func(context.Context, Target) (Outcome, string, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, time.Since(t0))
			return OutcomeSuccess, "", nil
		})
		pod := testPod("p", v1.Container{Name: "app", LivenessProbe: execProbe("live", func(p *v1.Probe) {
			p.PeriodSeconds = int32(period / time.Second)
		})})
		st := runningStatus("c1", ptr.To(true))
		st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Minute))
		status := &fakeStatus{m: map[types.UID]v1.PodStatus{pod.UID: st}}
		m, err := New(Config{Concurrency: 1}, Deps{Status: status, Exec: runner,
			Jitter: func(time.Duration) time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		if err := m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := takeCalls(); len(got) != 1 || got[0] != 0 {
			t.Fatalf("probe runs at %v, want one at once", got)
		}
		select {
		case u := <-m.Results(Liveness).Updates():
			if u.ContainerID != "c1" || u.Result != Success {
				t.Errorf("update %+v, want c1 Success", u)
			}
		default:
			t.Fatal("no result published")
		}

		time.Sleep(period - time.Millisecond)
		synctest.Wait()
		if got := takeCalls(); len(got) != 0 {
			t.Fatalf("probe ran at %v, before its period", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := takeCalls(); len(got) != 1 || got[0] != period {
			t.Fatalf("probe runs at %v, want one at %v", got, period)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
