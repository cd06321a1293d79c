package events

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// The differential test: the same sequences of events go through client-go's
// record broadcaster (with the same correlator options and clock) and through
// a Recorder, each writing to a fakeSink; the sink calls must be the same.
//
// Both run in a synctest bubble, on its clock (client-go's correlator and
// ours read the time package's), so time moves only when the runner sleeps.
// Names and timestamps are not compared: each event name is replaced by the
// order of its first appearance, and a patch's lastTimestamp by its
// presence. Both run the writer on their own goroutine: after each event the
// runner records a marker event about an object of its own and waits until
// every goroutine of the bubble is blocked, the marker written, so that the
// clock moves only between events that were handled.

var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

var testSource = v1.EventSource{Component: "kubelet", Host: "n1"}

// fakeSink is an event store recording the calls made to it. It is both a
// Sink and a record.EventSink.
type fakeSink struct {
	mu      sync.Mutex
	store   map[string]*v1.Event // by namespace/name
	rv      int
	calls   []sinkCall
	markers map[string]bool
	// createErr, if set, is called before a creation to fail it.
	createErr func(*v1.Event) error
	// block, if set, is received from before each call returns.
	block chan struct{}
	// entered, if set, is sent to on each call.
	entered chan struct{}
}

type sinkCall struct {
	op    string
	event v1.Event
	patch []byte
	err   error
}

func newFakeSink() *fakeSink {
	return &fakeSink{store: map[string]*v1.Event{}, markers: map[string]bool{}}
}

func (s *fakeSink) wait(ctx context.Context) error {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ctxSink is a fakeSink as a Sink.
type ctxSink struct{ *fakeSink }

func (s ctxSink) Create(ctx context.Context, e *v1.Event) (*v1.Event, error) { return s.create(ctx, e) }

func (s ctxSink) Patch(ctx context.Context, e *v1.Event, data []byte) (*v1.Event, error) {
	return s.patch(ctx, e, data)
}

func (s *fakeSink) Create(e *v1.Event) (*v1.Event, error) { return s.create(context.Background(), e) }

func (s *fakeSink) Patch(e *v1.Event, data []byte) (*v1.Event, error) {
	return s.patch(context.Background(), e, data)
}

func (s *fakeSink) create(ctx context.Context, e *v1.Event) (*v1.Event, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.InvolvedObject.Kind == "Marker" {
		s.markers[e.InvolvedObject.Name] = true
		return e.DeepCopy(), nil
	}
	c := sinkCall{op: "create", event: *e.DeepCopy()}
	key := e.Namespace + "/" + e.Name
	switch {
	case s.createErr != nil && s.createErr(e) != nil:
		c.err = s.createErr(e)
	case s.store[key] != nil:
		c.err = apierrors.NewAlreadyExists(v1.Resource("events"), e.Name)
	}
	s.calls = append(s.calls, c)
	if c.err != nil {
		return nil, c.err
	}
	s.rv++
	out := e.DeepCopy()
	out.ResourceVersion = fmt.Sprint(s.rv)
	s.store[key] = out
	return out.DeepCopy(), nil
}

func (s *fakeSink) Update(e *v1.Event) (*v1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, sinkCall{op: "update", event: *e.DeepCopy()})
	return e.DeepCopy(), nil
}

func (s *fakeSink) patch(ctx context.Context, e *v1.Event, data []byte) (*v1.Event, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := sinkCall{op: "patch", event: *e.DeepCopy(), patch: data}
	stored := s.store[e.Namespace+"/"+e.Name]
	if stored == nil {
		c.err = apierrors.NewNotFound(v1.Resource("events"), e.Name)
		s.calls = append(s.calls, c)
		return nil, c.err
	}
	s.calls = append(s.calls, c)
	var p struct {
		Count         *int32       `json:"count"`
		LastTimestamp *metav1.Time `json:"lastTimestamp"`
		Message       *string      `json:"message"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if p.Count != nil {
		stored.Count = *p.Count
	}
	if p.LastTimestamp != nil {
		stored.LastTimestamp = *p.LastTimestamp
	}
	if p.Message != nil {
		stored.Message = *p.Message
	}
	s.rv++
	stored.ResourceVersion = fmt.Sprint(s.rv)
	return stored.DeepCopy(), nil
}

// expire forgets the stored events about the object called name, as the
// server's event TTL does.
func (s *fakeSink) expire(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.store {
		if e.InvolvedObject.Name == name {
			delete(s.store, k)
		}
	}
}

// waitMarker waits until the bubble's goroutines are blocked and fails the
// test unless the marker event name was written by then.
func (s *fakeSink) waitMarker(t *testing.T, name string) {
	t.Helper()
	synctest.Wait()
	s.mu.Lock()
	ok := s.markers[name]
	s.mu.Unlock()
	if !ok {
		t.Fatalf("marker %s not written", name)
	}
}

// normCall is a sink call without what differs between the two recorders by
// design: names and timestamps.
type normCall struct {
	Op, Namespace                          string
	ID                                     int // the event name's order of first appearance
	Reason, Message, Type                  string
	Count                                  int32
	InvolvedObject                         v1.ObjectReference
	Source                                 v1.EventSource
	ReportingController, ReportingInstance string
	Annotations                            map[string]string
	Patch                                  string
	Err                                    string
}

func (s *fakeSink) normalized(t *testing.T) []normCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := map[string]int{}
	var out []normCall
	for _, c := range s.calls {
		e := c.event
		id, ok := ids[e.Name]
		if !ok {
			id = len(ids)
			ids[e.Name] = id
		}
		n := normCall{Op: c.op, Namespace: e.Namespace, ID: id, Reason: e.Reason, Message: e.Message, Type: e.Type,
			Count: e.Count, InvolvedObject: e.InvolvedObject, Source: e.Source, ReportingController: e.ReportingController,
			ReportingInstance: e.ReportingInstance, Annotations: e.Annotations}
		if c.patch != nil {
			var p map[string]any
			if err := json.Unmarshal(c.patch, &p); err != nil {
				t.Fatalf("patch %s: %v", c.patch, err)
			}
			if _, ok := p["lastTimestamp"]; ok {
				p["lastTimestamp"] = "set"
			}
			b, _ := json.Marshal(p)
			n.Patch = string(b)
		}
		if c.err != nil {
			n.Err = string(apierrors.ReasonForError(c.err)) // its text names the event
		}
		out = append(out, n)
	}
	return out
}

// eventRecorder is what both recorders offer.
type eventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

type limits struct {
	qps   float32
	burst int
}

type starter func(*fakeSink, limits) (eventRecorder, func())

func startClientGo(s *fakeSink, l limits) (eventRecorder, func()) {
	opts := record.CorrelatorOptions{QPS: l.qps, BurstSize: l.burst}
	if l.qps == 0 { // as the daemon configured it: no limit
		opts.QPS, opts.BurstSize = 1e6, 1e6
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(opts))
	b.StartRecordingToSink(s)
	return b.NewRecorder(testScheme, testSource), b.Shutdown
}

func startOurs(s *fakeSink, l limits) (eventRecorder, func()) {
	return startRecorder(ctxSink{s}, Options{Source: testSource, Scheme: testScheme, QPS: l.qps, Burst: l.burst})
}

// step is one event, or a move of the clock, or the expiry of the stored
// events about an object.
type step struct {
	obj         runtime.Object
	typ, reason string
	msg         string
	ann         map[string]string
	advance     time.Duration
	expire      string
}

// run takes the steps through the recorder start makes, in a synctest bubble
// of its own, and returns the sink's calls.
func run(t *testing.T, start starter, l limits, steps []step) []normCall {
	t.Helper()
	var calls []normCall
	synctest.Test(t, func(t *testing.T) {
		calls = runSteps(t, start, l, steps)
	})
	return calls
}

func runSteps(t *testing.T, start starter, l limits, steps []step) []normCall {
	t.Helper()
	s := newFakeSink()
	rec, stop := start(s, l)
	defer stop()
	for i, st := range steps {
		switch {
		case st.advance > 0:
			time.Sleep(st.advance)
			continue
		case st.expire != "":
			s.expire(st.expire)
			continue
		case st.ann != nil:
			rec.AnnotatedEventf(st.obj, st.ann, st.typ, st.reason, "%s", st.msg)
		default:
			rec.Event(st.obj, st.typ, st.reason, st.msg)
		}
		marker := fmt.Sprintf("m%d", i)
		rec.Event(&v1.ObjectReference{Kind: "Marker", Namespace: "markers", Name: marker}, v1.EventTypeNormal, "Marker", "-")
		s.waitMarker(t, marker)
		time.Sleep(time.Millisecond) // distinct event names
	}
	return s.normalized(t)
}

var (
	pod1 = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", UID: "u1"}}
	pod2 = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p2", UID: "u2"}}
	ctr1 = &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "a", Name: "p1", UID: "u1",
		FieldPath: "spec.containers{c}"}
	node1 = &v1.ObjectReference{Kind: "Node", Name: "n1", UID: "n1"}
)

func ev(obj runtime.Object, typ, reason, msg string) step {
	return step{obj: obj, typ: typ, reason: reason, msg: msg}
}

func scenarios() map[string][]step {
	sc := map[string][]step{}
	var s []step
	for range 5 {
		s = append(s, ev(pod1, v1.EventTypeNormal, "Pulled", "image pulled"))
	}
	sc["repeats"] = s

	s = nil
	for i := range 17 {
		s = append(s, ev(pod1, v1.EventTypeWarning, "Failed", fmt.Sprintf("failure %d", i)))
	}
	sc["aggregation"] = s

	s = nil
	for i := range 9 {
		s = append(s, ev(node1, v1.EventTypeWarning, "Pressure", fmt.Sprintf("a %d", i)))
	}
	s = append(s, step{advance: 11 * time.Minute})
	for i := range 11 {
		s = append(s, ev(node1, v1.EventTypeWarning, "Pressure", fmt.Sprintf("b %d", i)))
		s = append(s, step{advance: 9 * time.Minute}) // the window slides
	}
	sc["aggregation window"] = s

	s = nil
	for i := range 30 {
		s = append(s, ev(node1, v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m"))
	}
	for range 3 { // over the limit, but counted
		s = append(s, ev(node1, v1.EventTypeNormal, "R0", "m"))
	}
	s = append(s, step{advance: 300 * time.Second}, ev(node1, v1.EventTypeNormal, "R0", "m"),
		ev(node1, v1.EventTypeNormal, "R1", "m"), ev(node1, v1.EventTypeWarning, "R1", "m"))
	sc["spam"] = s

	sc["not found"] = []step{ev(pod2, v1.EventTypeNormal, "Started", "started"),
		ev(pod2, v1.EventTypeNormal, "Started", "started"), {expire: "p2"},
		ev(pod2, v1.EventTypeNormal, "Started", "started"), ev(pod2, v1.EventTypeNormal, "Started", "started")}

	sc["kinds"] = []step{
		{obj: pod1, typ: v1.EventTypeNormal, reason: "Scheduled", msg: "x", ann: map[string]string{"k": "v"}},
		ev(ctr1, v1.EventTypeWarning, "BackOff", "back-off"),
		ev(node1, v1.EventTypeNormal, "NodeReady", "ready"),
		ev(node1, "Bogus", "NodeReady", "ready"),
		ev(pod2, v1.EventTypeWarning, "", ""),
		ev(pod2, v1.EventTypeWarning, "", ""),
	}
	return sc
}

// randomSteps draws n steps: events about four objects, with repeated
// messages, and messages never repeated for reason "Varied" (so that
// aggregation is deterministic: client-go forgets an arbitrary message of a
// full group), clock moves and expiries.
func randomSteps(seed uint64, n int) []step {
	r := rand.New(rand.NewPCG(seed, 1))
	objs := []runtime.Object{pod1, pod2, ctr1, node1}
	names := []string{"p1", "p2", "p1", "n1"}
	reasons := []string{"Pulled", "BackOff", "Varied", "Varied"}
	types := []string{v1.EventTypeNormal, v1.EventTypeWarning}
	advances := []time.Duration{time.Second, 30 * time.Second, 5 * time.Minute, 11 * time.Minute}
	var s []step
	unique := 0
	for range n {
		switch x := r.IntN(100); {
		case x < 8:
			s = append(s, step{advance: advances[r.IntN(len(advances))]})
		case x < 12:
			s = append(s, step{expire: names[r.IntN(len(names))]})
		default:
			reason := reasons[r.IntN(len(reasons))]
			msg := fmt.Sprintf("message %d", r.IntN(3))
			if reason == "Varied" {
				unique++
				msg = fmt.Sprintf("varied %d", unique)
			}
			typ := types[r.IntN(len(types))]
			if reason == "Varied" { // one group per object: fuller groups
				typ = v1.EventTypeWarning
			}
			st := ev(objs[r.IntN(len(objs))], typ, reason, msg)
			if r.IntN(10) == 0 {
				st.ann = map[string]string{"a": msg}
			}
			s = append(s, st)
		}
	}
	return s
}

var limitSets = map[string]limits{
	"client-go default": {qps: ClientGoQPS, burst: DefaultBurst},
	"kubelet default":   {qps: 50, burst: 100},
	"no limit":          {qps: 0},
	"tight":             {qps: 0.5, burst: 5},
}

func compare(t *testing.T, l limits, steps []step) {
	t.Helper()
	want := run(t, startClientGo, l, steps)
	got := run(t, startOurs, l, steps)
	if reflect.DeepEqual(got, want) {
		return
	}
	for i := range max(len(got), len(want)) {
		var g, w any = "none", "none"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("sink call %d (of %d, client-go %d):\n got  %+v\n want %+v", i, len(got), len(want), g, w)
		}
	}
}

func TestDifferentialScenarios(t *testing.T) {
	for ln, l := range limitSets {
		for sn, steps := range scenarios() {
			t.Run(ln+"/"+sn, func(t *testing.T) { compare(t, l, steps) })
		}
	}
}

func TestDifferentialRandom(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for ln, l := range limitSets {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", ln, seed), func(t *testing.T) {
				compare(t, l, randomSteps(uint64(seed), 150))
			})
		}
	}
}

// TestDifferentialCoverage: the scenarios exercise what they are named for.
func TestDifferentialCoverage(t *testing.T) {
	calls := run(t, startOurs, limitSets["client-go default"], scenarios()["spam"])
	// 25 creations, then the 300 s allow one more: R0's patch, count 5;
	// the Warning event has a bucket of its own.
	if len(calls) != 27 || calls[25].Op != "patch" || calls[25].Count != 5 {
		t.Errorf("spam: %d calls, last %+v", len(calls), calls[len(calls)-1])
	}
	calls = run(t, startOurs, limitSets["kubelet default"], scenarios()["not found"])
	ops := []string{}
	for _, c := range calls {
		ops = append(ops, fmt.Sprintf("%s%d/%d", c.Op, c.ID, c.Count))
	}
	if got := strings.Join(ops, " "); got != "create0/1 patch0/2 patch0/3 create0/3 patch0/4" {
		t.Errorf("not found: %s", got)
	}
	calls = run(t, startOurs, limitSets["kubelet default"], scenarios()["aggregation"])
	combined := 0
	for _, c := range calls {
		if strings.HasPrefix(c.Message, combinedPrefix) {
			combined++
		}
	}
	if len(calls) != 17 || combined != 8 || calls[16].Op != "patch" || calls[16].Count != 8 {
		t.Errorf("aggregation: %d calls, %d combined, last %+v", len(calls), combined, calls[len(calls)-1])
	}
}
