package simulate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// manySteps is a scenario without loops whose n steps, one a second, each
// record one action result.
func manySteps(t *testing.T, n int) *Scenario {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "until: %ds\nloops: false\nsteps:\n", n)
	for i := range n {
		fmt.Fprintf(&b, "  - {at: %ds, do: [detectImages]}\n", i)
	}
	sc, err := Parse("s.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Events reach the sink while the run goes on: a sink that ends the run after
// the first batch stops it there, with that batch delivered and nothing more
// computed.
func TestStreamDeliversBeforeTheEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []Event
	err := Stream(ctx, manySteps(t, 1000), nil, func(batch []Event) error {
		got = append(got, batch...)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if len(got) != 1 || got[0].Event != EventActionResult || got[0].At != 0 {
		t.Errorf("events = %+v, want the first step's action result only", got)
	}
}

// With the loops running, an interrupted run has printed a prefix of the full
// timeline, passes' threshold and condition records in place.
func TestStreamInterruptedIsAPrefix(t *testing.T) {
	t.Parallel()
	const file = "../../../examples/scenarios/memory-pressure.yaml"
	sc, err := Load(t.Context(), file)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for stopAfter := 1; stopAfter <= 3; stopAfter++ {
		ctx, cancel := context.WithCancel(t.Context())
		var out bytes.Buffer
		batches := 0
		err := Stream(ctx, sc, nil, func(batch []Event) error {
			if err := WriteJSON(&out, batch); err != nil {
				return err
			}
			if batches++; batches == stopAfter {
				cancel()
			}
			return nil
		})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stop after %d: err = %v, want context.Canceled", stopAfter, err)
		}
		if out.Len() == 0 || out.Len() >= len(want) || !bytes.HasPrefix(want, out.Bytes()) {
			t.Errorf("stop after %d batches: output is not a proper prefix of the golden timeline:\n%s", stopAfter, out.String())
		}
	}
}

// A sink's error stops the run and is returned.
func TestStreamSinkError(t *testing.T) {
	t.Parallel()
	boom := errors.New("disk full")
	calls := 0
	err := Stream(t.Context(), manySteps(t, 100), nil, func([]Event) error {
		calls++
		return boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("err = %v after %d calls, want %v after 1", err, calls, boom)
	}
}

// The simulator keeps no event once it is delivered: what it holds does not
// grow with the length of the run.
func TestStreamRetainsNoEvents(t *testing.T) {
	t.Parallel()
	retained := func(n int) (delivered, held int) {
		s := newSim(manySteps(t, n), nil)
		err := s.stream(t.Context(), func(batch []Event) error {
			delivered += len(batch)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return delivered, cap(s.pending)
	}
	d1, h1 := retained(100)
	d2, h2 := retained(5000)
	if d1 != 100 || d2 != 5000 {
		t.Fatalf("delivered %d and %d events, want 100 and 5000", d1, d2)
	}
	if h2 > h1 || h2 > 4 {
		t.Errorf("holds room for %d events after 100 steps, %d after 5000: want a small constant", h1, h2)
	}
}

// BenchmarkLongRunHeap plays the memory-pressure example for 100 h and 1,000 h
// of virtual time with its loops running and reports the peak heap in use
// (sampled after a GC every 20 ms): it stays flat as virtual time grows.
func BenchmarkLongRunHeap(b *testing.B) {
	data, err := os.ReadFile("../../../examples/scenarios/memory-pressure.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, until := range []string{"100h", "1000h"} {
		b.Run(until, func(b *testing.B) {
			sc, err := Parse("m.yaml", bytes.Replace(data, []byte("until: 5m"), []byte("until: "+until), 1))
			if err != nil {
				b.Fatal(err)
			}
			var peak atomic.Uint64
			done := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						runtime.GC()
						var ms runtime.MemStats
						runtime.ReadMemStats(&ms)
						if ms.HeapInuse > peak.Load() {
							peak.Store(ms.HeapInuse)
						}
					}
				}
			}()
			for b.Loop() {
				if err := Stream(b.Context(), sc, nil, func([]Event) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
			close(done)
			<-sampled
			b.ReportMetric(float64(peak.Load()>>10), "peak-heap-KiB")
		})
	}
}
