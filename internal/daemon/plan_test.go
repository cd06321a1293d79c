package daemon

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// record notes what the parts did, in order.
type record struct {
	mu     sync.Mutex // guards events
	events []string
}

func (r *record) note(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *record) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// sorted returns the events sorted: the parts started together run their
// first lines in any order.
func (r *record) sorted() []string {
	e := r.get()
	slices.Sort(e)
	return e
}

// blocking is a part that notes its start and, once ctx ends, its stop.
func blocking(rec *record, name string, ready <-chan struct{}) part {
	return part{Name: name, Ready: ready, Run: func(ctx context.Context) error {
		rec.note("start " + name)
		<-ctx.Done()
		rec.note("stop " + name)
		return nil
	}}
}

// TestRunnerStartsInOrderAfterReady: a part starts only once the part before
// it is ready, in the order the plan lists them; the caller's context ending
// stops them all and wait returns nil.
func TestRunnerStartsInOrderAfterReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &record{}
		ready := make(chan struct{})
		p := &plan{}
		p.add(blocking(rec, "a", nil), blocking(rec, "b", ready), blocking(rec, "c", nil))
		ctx, cancel := context.WithCancel(t.Context())
		r := newRunner(ctx)
		started := make(chan bool, 1)
		go func() { started <- r.start(p) }()
		synctest.Wait()
		if got, want := rec.sorted(), []string{"start a", "start b"}; !slices.Equal(got, want) {
			t.Fatalf("before b is ready: %v, want %v", got, want)
		}
		close(ready)
		if !<-started {
			t.Fatal("start = false, want true")
		}
		synctest.Wait()
		if got, want := rec.get()[2:], []string{"start c"}; !slices.Equal(got, want) {
			t.Fatalf("after b is ready: %v, want %v", got, want)
		}
		if got, want := p.names(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Errorf("names = %v, want %v", got, want)
		}
		cancel()
		if err := r.wait(); err != nil {
			t.Fatalf("wait after the context ended = %v, want nil", err)
		}
		if got := len(rec.get()); got != 6 {
			t.Errorf("events %v, want every part started and stopped", rec.get())
		}
	})
}

// TestRunnerStopsWhileWaitingForReady: the caller's context ending while a
// part is not ready yet stops the parts started, starts no other, and wait
// returns nil.
func TestRunnerStopsWhileWaitingForReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &record{}
		p := &plan{}
		p.add(blocking(rec, "a", make(chan struct{})), blocking(rec, "b", nil))
		ctx, cancel := context.WithCancel(t.Context())
		r := newRunner(ctx)
		started := make(chan bool, 1)
		go func() { started <- r.start(p) }()
		synctest.Wait()
		cancel()
		if <-started {
			t.Fatal("start = true after the context ended")
		}
		if err := r.wait(); err != nil {
			t.Fatalf("wait = %v, want nil", err)
		}
		if got, want := rec.get(), []string{"start a", "stop a"}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v (b never started)", got, want)
		}
	})
}

// TestRunnerFirstErrorStopsAll: a part's error ends the others' context, is
// what wait returns, and keeps the parts not started yet from starting.
func TestRunnerFirstErrorStopsAll(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &record{}
		boom := errors.New("boom")
		never := make(chan struct{})
		p := &plan{}
		p.add(blocking(rec, "a", nil),
			part{Name: "failing", Ready: never, Run: func(context.Context) error { return boom }},
			blocking(rec, "c", nil))
		r := newRunner(t.Context())
		if r.start(p) {
			t.Fatal("start = true after a part failed before it was ready")
		}
		if err := r.wait(); !errors.Is(err, boom) {
			t.Fatalf("wait = %v, want %v", err, boom)
		}
		if got, want := rec.get(), []string{"start a", "stop a"}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v (c never started)", got, want)
		}
		// A phase built after the failure adds parts that never start.
		p.add(blocking(rec, "d", nil))
		if r.start(p) {
			t.Error("start = true on a stopped runner")
		}
		synctest.Wait()
		if got := rec.get(); slices.Contains(got, "start d") {
			t.Errorf("events %v: d started on a stopped runner", got)
		}
	})
}

// TestRunnerLastStopsAfterTheOthers: a Last part's context ends only once
// every other part returned (one takes a second to stop), whatever the order
// they were added in; its error stops the others and is returned.
func TestRunnerLastStopsAfterTheOthers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := &record{}
		p := &plan{}
		p.add(blocking(rec, "a", nil), part{Name: "events", Last: true, Run: func(ctx context.Context) error {
			<-ctx.Done()
			rec.note("stop events")
			return nil
		}}, part{Name: "b", Run: func(ctx context.Context) error {
			rec.note("start b")
			<-ctx.Done()
			time.Sleep(time.Second) // a slow stop: the bubble's clock
			rec.note("stop b")
			return nil
		}})
		ctx, cancel := context.WithCancel(t.Context())
		r := newRunner(ctx)
		if !r.start(p) {
			t.Fatal("start = false")
		}
		cancel()
		if err := r.wait(); err != nil {
			t.Fatal(err)
		}
		if got := rec.get(); len(got) != 5 || got[4] != "stop events" {
			t.Errorf("events %v, want the Last part stopped last", got)
		}

		rec = &record{}
		boom := errors.New("events down")
		p = &plan{}
		p.add(part{Name: "events", Last: true, Run: func(context.Context) error { return boom }}, blocking(rec, "a", nil))
		r = newRunner(t.Context())
		r.start(p)
		if err := r.wait(); !errors.Is(err, boom) {
			t.Errorf("wait = %v, want the Last part's %v", err, boom)
		}
	})
}
