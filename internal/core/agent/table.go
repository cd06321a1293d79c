package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Table is the agent's pod table as the rest of the node sees it: the sources
// hand it their pod sets (SetPods), the node-level managers read it (Pods,
// ActivePods, IsPodDeleted, IsPodTerminated, PodCleanedUp, GetPodStatus) and
// kill through it (KillPod). It is built before the managers, which the sync
// loop (Agent, built over the table after them) then uses: no forward
// pointers. Its methods may be called from any goroutine; the reads never
// wait, SetPods and KillPod wait for the loop (their ctx bounds the wait,
// also before the loop runs).
type Table struct {
	// sources names every pod source that may call SetPods; never changed.
	sources []string
	// Channels into the loop; only the loop (Agent.Run) receives from them.
	setC  chan sourceUpdate
	killC chan killMsg
	// snap is the table as last published by the loop; never nil.
	snap atomic.Pointer[snapshot]
	// changes gets a value (capacity 1, never blocking) after each publish.
	changes chan struct{}
	// owned is set by the one Agent built over the table.
	owned atomic.Bool
}

// NewTable returns an empty table for the pod sources named (for example
// "file"). Orphans are removed only once each has delivered its first set;
// no source at all means every runtime pod is an orphan.
func NewTable(sources []string) (*Table, error) {
	seen := map[string]bool{}
	for _, s := range sources {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("agent: sources: source %q is empty or repeated", s)
		}
		seen[s] = true
	}
	t := &Table{
		sources: slices.Clone(sources), setC: make(chan sourceUpdate), killC: make(chan killMsg),
		changes: make(chan struct{}, 1),
	}
	t.snap.Store(&snapshot{byUID: map[types.UID]*podView{}, sourcesReady: len(sources) == 0})
	return t, nil
}

// sourceUpdate is one SetPods call.
type sourceUpdate struct {
	source string
	pods   []*v1.Pod
	taken  chan struct{}
}

// killMsg is one KillPod call; done gets exactly one value.
type killMsg struct {
	req  nodeapi.KillRequest
	done chan error
}

// SetPods hands the complete current pod set of source to the loop: pods not
// in the table are admitted and run, changed pods are synced, and the pods of
// source no longer in the set are killed and removed. A pod with a
// deletionTimestamp (being deleted in the API server) is killed with its
// deletionGracePeriodSeconds (nil: its own grace period) and never started
// or restarted; it stays in the table, terminated, until its source drops
// it; once all its containers exited, its phase is terminal: Succeeded when
// they all exited 0, else Failed. Every pod needs a UID,
// unique in the set. The table keeps the pods and never modifies them; the
// caller must not modify them afterwards. It returns once the loop took the
// set and published the table with it (new pods admitted or rejected), or
// with ctx's error.
func (t *Table) SetPods(ctx context.Context, source string, pods []*v1.Pod) error {
	if !slices.Contains(t.sources, source) {
		return fmt.Errorf("%w %q", ErrUnknownSource, source)
	}
	uids := make(map[types.UID]bool, len(pods))
	for i, p := range pods {
		if p == nil || p.UID == "" {
			return fmt.Errorf("agent: source %q: pod %d has no UID", source, i)
		}
		if uids[p.UID] {
			return fmt.Errorf("agent: source %q: pod %s: UID %q repeated", source, nodeapi.PodName(p), p.UID)
		}
		uids[p.UID] = true
	}
	u := sourceUpdate{source: source, pods: slices.Clone(pods), taken: make(chan struct{})}
	select {
	case t.setC <- u:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-u.taken:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Changes returns a channel that receives a value after the loop published a
// new table, so that a reader of Pods (the API server's status writer) need
// not poll. Publishes coalesce: one pending value stands for any number of
// them, and the loop never waits for the receiver. The channel is shared: it
// is meant for one receiver, which reads the table after each value.
func (t *Table) Changes() <-chan struct{} { return t.changes }

// KillPod stops req.Pod's containers (nodeapi.PodKiller) and returns once they
// stopped, with the runtime's error if they could not be (the agent then keeps
// trying), or with ctx's error. req.Status becomes the pod's final status
// (phase, reason, message, conditions merged over the runtime's container
// statuses); the pod stays in the table, terminated and never restarted,
// until its source drops it. A pod the table does not hold, or holds as
// terminated already, returns nil at once and keeps its first final status.
func (t *Table) KillPod(ctx context.Context, req nodeapi.KillRequest) error {
	if req.Pod == nil || req.Pod.UID == "" {
		return errors.New("agent: kill request without a pod UID")
	}
	m := killMsg{req: req, done: make(chan error, 1)}
	select {
	case t.killC <- m:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-m.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
