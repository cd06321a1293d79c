package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// t0 is a time for the tests of pure functions; the recorder's tests run in
// a synctest bubble, on its clock.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

// syncBuffer is a log destination safe for the writer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (s *fakeSink) created() []v1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []v1.Event
	for _, c := range s.calls {
		if c.op == "create" && c.err == nil {
			out = append(out, c.event)
		}
	}
	return out
}

func (s *fakeSink) ncalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// startRecorder is New with Run started; the function returned cancels Run's
// context and waits for it to return.
func startRecorder(sink Sink, o Options) (*Recorder, func()) {
	r := New(sink, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	return r, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				panic(err) // Run returns an error only when called twice
			}
		})
	}
}

// TestRunOnce: an event recorded before Run is written by it, even when its
// context is already done (the flush); a second Run is an error.
func TestRunOnce(t *testing.T) {
	s := newFakeSink()
	r := New(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
	r.Event(pod1, v1.EventTypeNormal, "Early", "before Run")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := s.created(); len(got) != 1 || got[0].Reason != "Early" {
		t.Errorf("written %v, want the event recorded before Run", got)
	}
	r.Event(pod1, v1.EventTypeNormal, "Late", "after Run")
	if err := r.Run(t.Context()); err == nil {
		t.Error("a second Run returned nil")
	}
	if got := s.created(); len(got) != 1 {
		t.Errorf("%d events written, want only the one before Run returned", len(got))
	}
}

// TestEventFields: the event built for an object, a node and a container.
func TestEventFields(t *testing.T) {
	synctest.Test(t, testEventFields)
}

func testEventFields(t *testing.T) {
	time.Sleep(123456789) // a time with nanoseconds: the names show them
	t0 := time.Now()
	s := newFakeSink()
	rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
	rec.AnnotatedEventf(pod1, map[string]string{"k": "v"}, v1.EventTypeWarning, "Evicted", "low on %s", "memory")
	rec.Event(node1, v1.EventTypeNormal, "NodeReady", "ready")
	time.Sleep(time.Millisecond) // another name for the container's event than the pod's
	rec.Eventf(ctr1, v1.EventTypeNormal, "Pulled", "image %q", "x")
	rec.Event(node1, "Info", "Bogus", "dropped: not Normal nor Warning")
	stop()
	got := s.created()
	if len(got) != 3 {
		t.Fatalf("created %d events, want 3", len(got))
	}
	ts := metav1.NewTime(t0)
	want := v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p1.%x", t0.UnixNano()), Namespace: "a",
			Annotations: map[string]string{"k": "v"}},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "a", Name: "p1", UID: "u1"},
		Reason:         "Evicted", Message: "low on memory", Source: testSource,
		FirstTimestamp: ts, LastTimestamp: ts, Count: 1, Type: v1.EventTypeWarning,
		ReportingController: "kubelet", ReportingInstance: "n1",
	}
	if e := got[0]; !equalJSON(e, want) {
		t.Errorf("pod event\n got  %+v\n want %+v", e, want)
	}
	if e := got[1]; e.Namespace != metav1.NamespaceDefault || e.InvolvedObject != *node1 || e.Name != fmt.Sprintf("n1.%x", t0.UnixNano()) {
		t.Errorf("node event %+v", e)
	}
	if e := got[2]; e.InvolvedObject != *ctr1 || e.Message != `image "x"` || e.Annotations != nil {
		t.Errorf("container event %+v", e)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestEventNameInvalid: an object name that makes no valid event name gets a
// random UUID.
func TestEventNameInvalid(t *testing.T) {
	if n := eventName("Upper", t0); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(n) {
		t.Errorf("eventName(Upper) = %q, want a UUID", n)
	}
	if n := eventName("ok", time.Unix(0, 255)); n != "ok.ff" {
		t.Errorf("eventName(ok) = %q", n)
	}
}

// TestPatchIsStrategicMerge: the hand-made patch is the strategic merge patch
// client-go computes.
func TestPatchIsStrategicMerge(t *testing.T) {
	for _, e := range []v1.Event{
		{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns", ResourceVersion: "7"}, Count: 3, Message: "m \"q\" <>&",
			LastTimestamp: metav1.NewTime(t0), FirstTimestamp: metav1.NewTime(t0.Add(-time.Hour)), Reason: "R"},
		{Count: 2, LastTimestamp: metav1.NewTime(t0)},
		{Count: 2, Message: "epoch", LastTimestamp: metav1.NewTime(time.Unix(0, 5))},
	} {
		old := e
		old.Count, old.Message, old.LastTimestamp = 0, "", metav1.NewTime(time.Unix(0, 0))
		oldJSON, _ := json.Marshal(old)
		newJSON, _ := json.Marshal(e)
		want, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, &e)
		if err != nil {
			t.Fatal(err)
		}
		if got := countPatch(&e); string(got) != string(want) {
			t.Errorf("patch %s, want %s", got, want)
		}
	}
}

// TestNoLimit: QPS 0 lets any number of events about an object through.
func TestNoLimit(t *testing.T) {
	synctest.Test(t, testNoLimit)
}

func testNoLimit(t *testing.T) {
	s := newFakeSink()
	rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
	for i := range 500 { // distinct reasons: neither counted nor aggregated
		rec.Event(node1, v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
		time.Sleep(time.Microsecond) // distinct names
	}
	stop()
	if n := len(s.created()); n != 500 {
		t.Errorf("%d events written, want 500", n)
	}
	s = newFakeSink()
	rec, stop = startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme, QPS: 1, Burst: 7})
	for i := range 500 {
		rec.Event(node1, v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
	}
	stop()
	if n := s.ncalls(); n != 7 {
		t.Errorf("QPS 1, burst 7: %d sink calls, want 7", n)
	}
}

// TestStopFlushes: stop writes the queued events before it returns, and the
// events recorded after it are dropped.
func TestStopFlushes(t *testing.T) {
	synctest.Test(t, testStopFlushes)
}

func testStopFlushes(t *testing.T) {
	s := newFakeSink()
	s.block, s.entered = make(chan struct{}), make(chan struct{}, 100)
	rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
	for i := range 50 {
		rec.Event(pod1, v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
		time.Sleep(time.Millisecond)
	}
	<-s.entered // the writer holds the first
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	synctest.Wait() // the writer and stop are blocked, or stop returned
	select {
	case <-stopped:
		t.Fatal("stop returned with events queued")
	default:
	}
	close(s.block)
	synctest.Wait()
	select {
	case <-stopped:
	default:
		t.Fatal("stop did not return")
	}
	if n := len(s.created()); n != 50 {
		t.Errorf("%d events written, want 50", n)
	}
	rec.Event(pod1, v1.EventTypeNormal, "Late", "m") // no panic, dropped
	stop()                                           // again: returns
	if n := len(s.created()); n != 50 {
		t.Errorf("%d events written after stop, want 50", n)
	}
}

// TestFullQueueDrops: with the writer blocked and the queue full, recording
// returns at once and drops the event with a log line.
func TestFullQueueDrops(t *testing.T) {
	synctest.Test(t, testFullQueueDrops)
}

func testFullQueueDrops(t *testing.T) {
	s := newFakeSink()
	s.block, s.entered = make(chan struct{}), make(chan struct{}, 100)
	var logs syncBuffer
	rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme, QueueSize: 2,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	rec.Event(pod1, v1.EventTypeNormal, "R0", "m")
	<-s.entered
	done := make(chan struct{})
	go func() {
		for i := 1; i <= 10; i++ {
			time.Sleep(time.Millisecond) // distinct names
			rec.Event(pod1, v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
		}
		close(done)
	}()
	time.Sleep(time.Second) // the recording goroutine's ten sleeps, and more
	synctest.Wait()
	select {
	case <-done:
	default:
		t.Fatal("recording blocked")
	}
	close(s.block)
	stop()
	if n := len(s.created()); n != 3 { // the one written and the two queued
		t.Errorf("%d events written, want 3", n)
	}
	if n := strings.Count(logs.String(), "too many queued events"); n != 8 {
		t.Errorf("%d drops logged, want 8:\n%s", n, logs.String())
	}
}

// TestRetry: a failed write is retried RetryInterval apart until it is
// written, up to MaxTries; the server's refusal is not retried; stop ends
// the waiting. The recorder runs in a synctest bubble: synctest.Wait returns
// once the writer waits for its next try.
func TestRetry(t *testing.T) {
	errDown := errors.New("connection refused")
	t.Run("recovers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeSink()
			fails := 2
			s.createErr = func(*v1.Event) error {
				if fails > 0 {
					return errDown
				}
				return nil
			}
			rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
			defer stop()
			rec.Event(pod1, v1.EventTypeNormal, "R", "m")
			for range 2 {
				synctest.Wait() // the writer waits to retry
				s.mu.Lock()
				fails--
				s.mu.Unlock()
				time.Sleep(RetryInterval)
			}
			synctest.Wait()
			if n, calls := len(s.created()), s.ncalls(); n != 1 || calls != 3 {
				t.Errorf("written %d, %d calls; want 1 and 3", n, calls)
			}
		})
	})
	t.Run("limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeSink()
			s.createErr = func(*v1.Event) error { return errDown }
			rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
			rec.Event(pod1, v1.EventTypeNormal, "R", "m")
			for range MaxTries - 1 {
				synctest.Wait()
				time.Sleep(RetryInterval)
			}
			synctest.Wait()
			if n := s.ncalls(); n != MaxTries {
				t.Errorf("%d calls after %d retry intervals, want %d", n, MaxTries-1, MaxTries)
			}
			time.Sleep(10 * RetryInterval) // no more tries
			synctest.Wait()
			stop()
			if n := s.ncalls(); n != MaxTries {
				t.Errorf("%d calls, want %d", n, MaxTries)
			}
		})
	})
	t.Run("refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeSink()
			s.createErr = func(*v1.Event) error { return apierrors.NewForbidden(v1.Resource("events"), "e", errDown) }
			rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
			rec.Event(pod1, v1.EventTypeNormal, "R", "m")
			stop()
			if n := s.ncalls(); n != 1 {
				t.Errorf("%d calls, want 1", n)
			}
		})
	})
	t.Run("stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeSink()
			s.createErr = func(*v1.Event) error { return errDown }
			rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme})
			rec.Event(pod1, v1.EventTypeNormal, "R", "m")
			synctest.Wait() // the writer waits to retry
			stopped := make(chan struct{})
			go func() { stop(); close(stopped) }()
			synctest.Wait() // no time passes: stop returns without a retry's wait
			select {
			case <-stopped:
			default:
				t.Fatal("stop waits for the retries")
			}
			if n := s.ncalls(); n != 1 {
				t.Errorf("%d calls, want 1", n)
			}
		})
	})
}

// TestFlushTimeout: stop gives up after the flush timeout, cancelling the
// write in flight and dropping the queued events.
func TestFlushTimeout(t *testing.T) {
	synctest.Test(t, testFlushTimeout)
}

func testFlushTimeout(t *testing.T) {
	s := newFakeSink()
	s.block, s.entered = make(chan struct{}), make(chan struct{}, 100)
	var logs syncBuffer
	rec, stop := startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 5 {
		rec.Event(pod1, v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
		time.Sleep(time.Millisecond)
	}
	<-s.entered
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	synctest.Wait()
	select {
	case <-stopped:
		t.Fatal("stop returned before the flush timeout")
	default:
	}
	time.Sleep(FlushTimeout)
	synctest.Wait()
	select {
	case <-stopped:
	default:
		t.Fatal("stop did not time out")
	}
	if n := s.ncalls(); n != 0 {
		t.Errorf("%d sink calls completed, want 0", n)
	}
	if !strings.Contains(logs.String(), "count=4") {
		t.Errorf("the 4 queued events are not reported dropped:\n%s", logs.String())
	}
}
