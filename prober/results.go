package prober

import (
	"context"
	"sync"
)

// Results holds the reported results of one probe type, by container ID,
// and publishes their changes. Safe for concurrent use.
type Results struct {
	updates chan Update

	mu sync.RWMutex
	// byID maps container ID to its current result; guarded by mu.
	byID map[string]Result
}

func newResults(buffer int) *Results {
	return &Results{updates: make(chan Update, buffer), byID: make(map[string]Result)}
}

// Get returns the current result for a container ID, and whether there is
// one. A container without a probe of this type has none.
func (r *Results) Get(containerID string) (Result, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	res, ok := r.byID[containerID]
	return res, ok
}

// Updates returns the channel on which every change of a result is sent,
// in order per container. The agent's sync loop must drain it: probes that
// have a change to report wait for room (or for the Manager's context to end).
func (r *Results) Updates() <-chan Update {
	return r.updates
}

// set records u and sends it on Updates if it changed the stored result. It
// reports whether it did. It never holds the lock while sending.
func (r *Results) set(ctx context.Context, u Update) bool {
	r.mu.Lock()
	prev, ok := r.byID[u.ContainerID]
	changed := !ok || prev != u.Result
	if changed {
		r.byID[u.ContainerID] = u.Result
	}
	r.mu.Unlock()
	if !changed {
		return false
	}
	select {
	case r.updates <- u:
	case <-ctx.Done():
	}
	return true
}

// remove forgets the result of a container ID.
func (r *Results) remove(containerID string) {
	if containerID == "" {
		return
	}
	r.mu.Lock()
	delete(r.byID, containerID)
	r.mu.Unlock()
}
