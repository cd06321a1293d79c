package podruntime

import (
	"context"
	"fmt"
	"time"
)

// pullGate bounds how many image pulls run at once, node-wide, as the
// kubelet's image pullers do: one slot serializes the pulls
// (serializeImagePulls, the kubelet's default), n slots let n run
// (maxParallelImagePulls), and no slots set no bound. Pulls waiting for a
// slot get it in the order they asked (a channel's senders queue in order),
// as the kubelet's serial puller takes them from its queue. It is safe for
// concurrent use; it holds no state but the slots taken.
type pullGate struct {
	// slots holds one token per pull running; nil: no bound.
	slots chan struct{}
}

// newPullGate returns a gate with n slots; n <= 0 sets no bound.
func newPullGate(n int) *pullGate {
	if n <= 0 {
		return &pullGate{}
	}
	return &pullGate{slots: make(chan struct{}, n)}
}

// acquire waits for a free slot, or for ctx to end (then it returns ctx's
// error and takes nothing). The caller calls release exactly once, after
// its pull.
func (g *pullGate) acquire(ctx context.Context) (release func(), err error) {
	if g.slots == nil {
		return func() {}, nil
	}
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pulledMessage is the Pulled event's message after a pull, in the
// kubelet's words, which the upstream node e2e specs parse: pull is the
// runtime's pull itself (with the size lookup), total the time from the
// Pulling event on, the wait for a pull slot included, both cut to the
// millisecond; size is the image's size in bytes (0 when not known).
func pulledMessage(image string, pull, total time.Duration, size uint64) string {
	return fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes.",
		image, pull.Truncate(time.Millisecond), total.Truncate(time.Millisecond), size)
}
