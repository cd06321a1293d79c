// Package events records core/v1 Events about objects and writes them to the
// API server the way the kubelet's event recorder does (client-go's
// record.EventBroadcaster with its correlator and sink writer), without
// client-go's record package and the strategic-merge-patch machinery it links.
//
// An event is built on the caller's goroutine and queued; the caller never
// blocks (a full queue drops the event with a log line). [Recorder.Run] takes
// the queue in order and, for each event:
//
//   - aggregates it: when more than [AggregateMaxEvents]-1 events with the
//     same source, object, type and reason but different messages arrive
//     within [AggregateInterval] of each other, the next ones are replaced by
//     one event whose message is prefixed "(combined from similar events): ";
//   - counts it: an event already written (same key, message included) is
//     written again as a patch of the earlier one with its count incremented,
//     its last timestamp and message;
//   - filters it: a token bucket per source and object drops events over
//     the rate (Options.QPS, Options.Burst);
//   - writes it to the [Sink], retrying failures that are not the server's
//     answer up to [MaxTries] times, [RetryInterval] apart.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/lru"
)

// The defaults of client-go's event recorder, which the kubelet uses.
const (
	// CacheSize is the number of entries of each of the correlator's LRU
	// caches (aggregation groups, written events, rate limiters).
	CacheSize = 4096
	// AggregateMaxEvents is the number of distinct messages in a group at
	// which the group's events are combined.
	AggregateMaxEvents = 10
	// AggregateInterval is the time without events after which a group
	// starts afresh.
	AggregateInterval = 10 * time.Minute
	// DefaultBurst is the spam filter's bucket size when Options.Burst is 0.
	DefaultBurst = 25
	// ClientGoQPS is client-go's default refill rate of the spam filter (one
	// event per 5 minutes); Options.QPS 0 means no limit instead.
	ClientGoQPS = 1. / 300.
	// QueueSize is the default capacity of the queue between the callers and
	// the writer.
	QueueSize = 1000
	// MaxTries is the number of attempts at writing an event.
	MaxTries = 12
	// RetryInterval is the time between two attempts (the first wait is a
	// random fraction of it).
	RetryInterval = 10 * time.Second
	// FlushTimeout bounds the time Run spends, once its context is done,
	// writing the queued events.
	FlushTimeout = 5 * time.Second
)

// combinedPrefix starts the message of an aggregated event.
const combinedPrefix = "(combined from similar events): "

// Sink writes events to the API server: Create creates e in its namespace,
// Patch applies a strategic merge patch to the event named e.Name there. The
// context is cancelled when the flush after Run's context is done takes longer
// than the flush timeout.
type Sink interface {
	Create(ctx context.Context, e *v1.Event) (*v1.Event, error)
	Patch(ctx context.Context, e *v1.Event, data []byte) (*v1.Event, error)
}

// Options configure a Recorder. The zero value of a field is its default.
type Options struct {
	// Source is the component and host that report the events; they are
	// also the events' reportingController and reportingInstance.
	Source v1.EventSource
	// Scheme resolves the kind of objects whose type meta is empty.
	Scheme *runtime.Scheme
	// QPS is the refill rate, in events per second, of the token bucket of
	// each source and object; 0 means no limit (the kubelet's
	// eventRecordQPS 0).
	QPS float32
	// Burst is the size of that bucket: DefaultBurst if 0.
	Burst int
	// Logger receives the dropped and failed events: none if nil.
	Logger *slog.Logger
	// QueueSize is the capacity of the queue: QueueSize if 0.
	QueueSize int
	// RetryInterval is the time between attempts: RetryInterval if 0.
	RetryInterval time.Duration
	// MaxTries is the number of attempts at writing an event: MaxTries if 0.
	MaxTries int
	// FlushTimeout bounds the writing of the queued events when Run's
	// context is done: FlushTimeout if 0.
	FlushTimeout time.Duration
}

// Recorder records events (its methods are nodeapi.Recorder's and client-go's
// record.EventRecorder's) and queues them; Run writes them to its sink.
type Recorder struct {
	o       Options
	sink    Sink
	log     *slog.Logger
	corr    *correlator // Run's
	running atomic.Bool // Run was called

	mu     sync.Mutex // guards closed and the sends on queue
	closed bool
	queue  chan *v1.Event
}

// New returns a recorder that queues the events for sink until Run writes
// them.
func New(sink Sink, o Options) *Recorder {
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.QueueSize == 0 {
		o.QueueSize = QueueSize
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = RetryInterval
	}
	if o.MaxTries == 0 {
		o.MaxTries = MaxTries
	}
	if o.FlushTimeout == 0 {
		o.FlushTimeout = FlushTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{
		o: o, sink: sink, log: log,
		corr:  newCorrelator(o.QPS, o.Burst),
		queue: make(chan *v1.Event, o.QueueSize),
	}
}

// Event records an event of eventtype with reason and message about object.
func (r *Recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.generate(object, nil, eventtype, reason, message)
}

// Eventf is Event with a message built by fmt.Sprintf.
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.generate(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the event.
func (r *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.generate(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *Recorder) generate(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference.GetReference(r.o.Scheme, object)
	if err != nil {
		r.log.Error("event dropped: no reference to its object", "err", err, "type", eventtype, "reason", reason, "message", message)
		return
	}
	if eventtype != v1.EventTypeNormal && eventtype != v1.EventTypeWarning {
		r.log.Error("event dropped: unsupported type", "type", eventtype, "reason", reason, "message", message)
		return
	}
	now := metav1.NewTime(time.Now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	e := &v1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, now.Time), Namespace: ns, Annotations: annotations},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		Source:              r.o.Source,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		ReportingController: r.o.Source.Component,
		ReportingInstance:   r.o.Source.Host,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.log.Error("event dropped: the recorder is stopped", eventAttrs(e)...)
		return
	}
	select {
	case r.queue <- e:
	default:
		r.log.Error("event dropped: too many queued events", eventAttrs(e)...)
	}
}

// Run writes the queued events in order until ctx is done. Then it takes no
// more events (later ones are dropped with a log line), writes those still
// queued, one try each, and returns when they all were written or after the
// flush timeout, dropping those left. Run may be called once.
func (r *Recorder) Run(ctx context.Context) error {
	if r.running.Swap(true) {
		return errors.New("events: Recorder.Run called twice")
	}
	// Writes outlive ctx, so that the last events get out: they are
	// cancelled when the flush timeout has passed since ctx was done.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	flushed, timerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(timerDone)
		select {
		case <-ctx.Done():
		case <-flushed:
			return
		}
		select {
		case <-flushed:
		case <-time.After(r.o.FlushTimeout):
			cancel()
		}
	}()
	dropped := 0
	take := func(e *v1.Event) {
		if wctx.Err() != nil {
			dropped++
			return
		}
		r.write(wctx, ctx.Done(), e)
	}
	for taking := true; taking; {
		select {
		case e := <-r.queue:
			take(e)
		case <-ctx.Done():
			taking = false
		}
	}

	r.mu.Lock()
	r.closed = true
	close(r.queue)
	r.mu.Unlock()
	for e := range r.queue {
		take(e)
	}
	close(flushed)
	<-timerDone
	if dropped > 0 {
		r.log.Error("events dropped: stopping took too long", "count", dropped)
	}
	return nil
}

// write correlates e and writes the result with ctx, retrying until
// stopping is closed.
func (r *Recorder) write(ctx context.Context, stopping <-chan struct{}, e *v1.Event) {
	e, patch, skip := r.corr.correlate(e)
	if skip {
		return
	}
	for tries := 1; ; tries++ {
		if r.writeOnce(ctx, e, patch) {
			return
		}
		if tries >= r.o.MaxTries {
			r.log.Error("event dropped: retry limit exceeded", eventAttrs(e)...)
			return
		}
		delay := r.o.RetryInterval
		if tries == 1 { // spread the first retries of many agents
			delay = time.Duration(float64(delay) * mathrand.Float64())
		}
		select {
		case <-stopping:
			if ctx.Err() == nil {
				r.log.Error("event dropped: the recorder is stopped", eventAttrs(e)...)
			}
			return
		case <-time.After(delay):
		}
	}
}

// writeOnce makes one attempt at writing e (a patch of the existing event if
// its count is above 1, a creation if that event is gone or it is new). It
// reports whether the event is done with: written or rejected by the server.
func (r *Recorder) writeOnce(ctx context.Context, e *v1.Event, patch []byte) bool {
	var (
		out *v1.Event
		err error
	)
	update := e.Count > 1
	if update {
		out, err = r.sink.Patch(ctx, e, patch)
	}
	if !update || isNotFound(err) {
		e.ResourceVersion = ""
		out, err = r.sink.Create(ctx, e)
	}
	if err == nil {
		if out != nil {
			r.corr.written(out)
		}
		return true
	}
	var status *apierrors.StatusError
	var construction *rest.RequestConstructionError
	switch {
	case errors.As(err, &construction):
		r.log.Error("event dropped: cannot build the request", append(eventAttrs(e), "err", err)...)
	case errors.As(err, &status):
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause) {
			r.log.Debug("event rejected by the server", append(eventAttrs(e), "err", err)...)
		} else {
			r.log.Error("event rejected by the server", append(eventAttrs(e), "err", err)...)
		}
	case ctx.Err() != nil:
		r.log.Error("event dropped: stopping took too long", eventAttrs(e)...)
	default:
		r.log.Warn("cannot write event, will retry", append(eventAttrs(e), "err", err)...)
		return false
	}
	return true
}

// isNotFound is the sink's answer that the patched event does not exist.
func isNotFound(err error) bool {
	var status *apierrors.StatusError
	return errors.As(err, &status) && status.Status().Code == http.StatusNotFound
}

func eventAttrs(e *v1.Event) []any {
	o := e.InvolvedObject
	return []any{"object", strings.TrimPrefix(o.Namespace+"/"+o.Name, "/"), "kind", o.Kind, "type", e.Type,
		"reason", e.Reason, "message", e.Message, "count", e.Count}
}

// eventName names an event about the object called name at t: the name and
// the time's nanoseconds in hex, or a random UUID if that is not a valid
// name.
func eventName(name string, t time.Time) string {
	s := fmt.Sprintf("%s.%x", name, t.UnixNano())
	if len(validation.IsDNS1123Subdomain(s)) == 0 {
		return s
	}
	return uuid.NewString()
}

// correlator holds the writer's state: aggregation groups, the events written
// (their names and counts), the rate limiters. Only the writer goroutine uses
// it.
type correlator struct {
	qps      float32
	burst    int
	groups   *lru.Cache // aggregation key → *group
	seen     *lru.Cache // event key → seen
	limiters *lru.Cache // spam key → flowcontrol.PassiveRateLimiter
}

// group is the distinct messages of an aggregation group and its last event.
type group struct {
	messages map[string]struct{}
	last     time.Time
}

// seen is what is known of an event written (or about to be).
type seen struct {
	count int32
	first metav1.Time
	name  string
	rv    string
}

func newCorrelator(qps float32, burst int) *correlator {
	return &correlator{qps: qps, burst: burst,
		groups: lru.New(CacheSize), seen: lru.New(CacheSize), limiters: lru.New(CacheSize)}
}

// The keys join the fields with NUL, which names do not contain.
func join(s ...string) string { return strings.Join(s, "\x00") }

// objectKey identifies the source and object of e, and its type.
func objectKey(e *v1.Event) string {
	o := e.InvolvedObject
	return join(e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, e.Type)
}

// eventKey identifies identical events: those counted as one.
func eventKey(e *v1.Event) string {
	return join(objectKey(e), e.InvolvedObject.FieldPath, e.Reason, e.Message)
}

// groupKey identifies the events that are aggregated when too varied.
func groupKey(e *v1.Event) string {
	return join(objectKey(e), e.Reason, e.ReportingController, e.ReportingInstance)
}

// correlate returns the event to write in place of e (with the patch to send
// if it updates an earlier one), or skip if it is over the rate.
func (c *correlator) correlate(e *v1.Event) (out *v1.Event, patch []byte, skip bool) {
	out, key := c.aggregate(e)
	out, patch = c.observe(out, key)
	return out, patch, !c.allow(out)
}

// aggregate adds e to its group and returns it with its event key, or, when
// the group has AggregateMaxEvents distinct messages, the combined event with
// the group's key (so that the later ones count as repeats of it).
func (c *correlator) aggregate(e *v1.Event) (*v1.Event, string) {
	now := time.Now()
	gk := groupKey(e)
	var g *group
	if v, ok := c.groups.Get(gk); ok {
		g = v.(*group)
	}
	if g == nil || now.Sub(g.last) > AggregateInterval {
		g = &group{messages: map[string]struct{}{}}
	}
	g.messages[e.Message] = struct{}{}
	g.last = now
	c.groups.Add(gk, g)
	if len(g.messages) < AggregateMaxEvents {
		return e, eventKey(e)
	}
	for m := range g.messages { // make room for one more: any message
		delete(g.messages, m)
		break
	}
	t := metav1.NewTime(now)
	return &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: eventName(e.InvolvedObject.Name, now), Namespace: e.Namespace},
		InvolvedObject: e.InvolvedObject,
		Reason:         e.Reason,
		Message:        combinedPrefix + e.Message,
		Source:         e.Source,
		FirstTimestamp: t,
		LastTimestamp:  t,
		Count:          1,
		Type:           e.Type,
	}, gk
}

// observe returns a copy of e; if an event of key was seen, the copy is that
// event with its count incremented, and patch its update. The copy is
// recorded as seen, written or not.
func (c *correlator) observe(e *v1.Event, key string) (*v1.Event, []byte) {
	cp := *e
	var patch []byte
	if v, ok := c.seen.Get(key); ok && v.(seen).count > 0 {
		s := v.(seen)
		cp.Name, cp.ResourceVersion, cp.FirstTimestamp, cp.Count = s.name, s.rv, s.first, s.count+1
		patch = countPatch(&cp)
	}
	c.seen.Add(key, seen{count: cp.Count, first: cp.FirstTimestamp, name: cp.Name, rv: cp.ResourceVersion})
	return &cp, patch
}

// written records the event the server returned.
func (c *correlator) written(e *v1.Event) {
	c.seen.Add(eventKey(e), seen{count: e.Count, first: e.FirstTimestamp, name: e.Name, rv: e.ResourceVersion})
}

// allow takes a token from the bucket of e's source and object.
func (c *correlator) allow(e *v1.Event) bool {
	if c.qps == 0 {
		return true
	}
	key := objectKey(e)
	var l flowcontrol.PassiveRateLimiter
	if v, ok := c.limiters.Get(key); ok {
		l = v.(flowcontrol.PassiveRateLimiter)
	} else {
		l = flowcontrol.NewTokenBucketPassiveRateLimiter(c.qps, c.burst)
	}
	c.limiters.Add(key, l)
	return l.TryAccept()
}

// epoch is the last timestamp the patch is computed against.
var epoch = metav1.NewTime(time.Unix(0, 0))

// countPatch is the strategic merge patch from e without count, message and
// with the epoch as last timestamp, to e: those of its fields that differ.
func countPatch(e *v1.Event) []byte {
	p := map[string]any{}
	if e.Count != 0 {
		p["count"] = e.Count
	}
	last, _ := json.Marshal(e.LastTimestamp)
	if old, _ := json.Marshal(epoch); string(last) != string(old) {
		p["lastTimestamp"] = json.RawMessage(last)
	}
	if e.Message != "" {
		p["message"] = e.Message
	}
	b, _ := json.Marshal(p) // scalars: cannot fail
	return b
}
