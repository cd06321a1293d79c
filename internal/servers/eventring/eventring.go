// Package eventring keeps the latest core/v1 Events a standalone node
// records, for its local API (GET /events) and `nodekeeper events`. A Ring
// is the [events.Sink] of the same recorder that, in a cluster, writes them
// to the API server, so the events kept are those that would be written:
// aggregated, counted and rate-limited the same way, a repeat stored as the
// earlier event with its count, last timestamp and message updated.
package eventring

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodekeeper/nodekeeper/internal/cluster/events"
)

// DefaultSize is the number of events a standalone node keeps.
const DefaultSize = 1000

// Ring holds the last Size events written to it, the oldest dropped first.
// Its methods are safe for concurrent use.
type Ring struct {
	size int

	mu     sync.Mutex  // guards events and rv
	events []*v1.Event // least recently written first; never modified once stored
	rv     int64       // the last resourceVersion given
}

var _ events.Sink = (*Ring)(nil)

// New returns an empty ring of size events; size must be positive.
func New(size int) (*Ring, error) {
	if size <= 0 {
		return nil, fmt.Errorf("eventring: size %d: want a positive number of events", size)
	}
	return &Ring{size: size}, nil
}

// Create stores a copy of e with a new resourceVersion, dropping the least
// recently written event when the ring is full, and returns the stored
// event's copy.
func (r *Ring) Create(_ context.Context, e *v1.Event) (*v1.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.store(-1, e), nil
}

// Patch replaces the event of e's namespace and name by a copy of e (the
// recorder's patch carries e's count, last timestamp and message, the rest
// being the earlier event's), which becomes the most recently written, and
// returns its copy. An event not (or no longer) held is a NotFound error,
// on which the recorder creates it again. data is not read.
func (r *Ring) Patch(_ context.Context, e *v1.Event, _ []byte) (*v1.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.events, func(o *v1.Event) bool { return o.Namespace == e.Namespace && o.Name == e.Name })
	if i < 0 {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, e.Name)
	}
	return r.store(i, e), nil
}

// store removes the event at i (none if i < 0), appends a copy of e and
// trims the ring to its size. Called with mu held.
func (r *Ring) store(i int, e *v1.Event) *v1.Event {
	if i >= 0 {
		r.events = slices.Delete(r.events, i, i+1)
	}
	r.rv++
	cp := e.DeepCopy()
	cp.ResourceVersion = strconv.FormatInt(r.rv, 10)
	r.events = append(r.events, cp)
	if over := len(r.events) - r.size; over > 0 {
		r.events = slices.Delete(r.events, 0, over)
	}
	return cp.DeepCopy()
}

// Events returns copies of the events held, least recently written first.
func (r *Ring) Events() []v1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]v1.Event, len(r.events))
	for i, e := range r.events {
		out[i] = *e.DeepCopy()
	}
	return out
}
