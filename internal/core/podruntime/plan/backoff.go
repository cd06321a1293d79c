package plan

import (
	"time"
)

// The kubelet's back-off for crashing containers and failed image pulls.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
	// backoffReset: an entry whose last event is older than this when the next
	// one comes (the container ran that long) starts over at backoffInitial.
	backoffReset = 2 * backoffMax
)

// Backoff is one back-off: after an event (a container exit, a failed
// pull) at Last, nothing is retried before Last+Delay (Until). It is a value:
// SyncPod returns new ones in its Result's State, never changing old ones.
type Backoff struct {
	Delay time.Duration
	Last  time.Time
	// Spec is the container's hash (criconfig.Hash) a crash back-off was
	// counted for: a container whose spec changed (a new image) starts over,
	// as the kubelet keys its back-off by the container's hash. "" for a
	// pull back-off.
	Spec string
	// Err is a pull back-off's failed pull, as the waiting message of its
	// ErrImagePull said: the ImagePullBackOff message repeats it, as the
	// kubelet's. "" for a crash back-off.
	Err string
}

// Until is when the back-off ends: nothing is retried before it.
func (b Backoff) Until() time.Time { return b.Last.Add(b.Delay) }

// InBackoff reports whether an event at eventTime (a container's finish, a
// failed pull) is still within entry's back-off at now, and how long is left.
// With no entry, or an entry older than backoffReset at eventTime, there is
// no back-off.
func InBackoff(entry Backoff, ok bool, eventTime, now time.Time) (bool, time.Duration) {
	if !ok || eventTime.Sub(entry.Last) > backoffReset {
		return false, 0
	}
	left := entry.Delay - now.Sub(eventTime)
	if left <= 0 {
		return false, 0
	}
	return true, left
}

// NextBackoff is entry after a retry of an event at eventTime: the first (or
// the first after a reset) waits backoffInitial, each next one twice the last,
// at most backoffMax.
func NextBackoff(entry Backoff, ok bool, eventTime time.Time) Backoff {
	if !ok || eventTime.Sub(entry.Last) > backoffReset {
		return Backoff{Delay: backoffInitial, Last: eventTime}
	}
	return Backoff{Delay: min(2*entry.Delay, backoffMax), Last: eventTime}
}
