package podruntime

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's back-off for crashing containers and failed image pulls.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
	// backoffReset: an entry whose last event is older than this when the next
	// one comes (the container ran that long) starts over at backoffInitial.
	backoffReset = 2 * backoffMax
)

// backoffKey names one back-off: a pod's container (by name) or image.
type backoffKey struct {
	uid  types.UID
	name string
}

// backoffEntry is one back-off: after an event (a container exit, a failed
// pull) at last, nothing is retried before last+delay.
type backoffEntry struct {
	delay time.Duration
	last  time.Time
	// spec is the container's hash (containerHash) a crash back-off was
	// counted for: a container whose spec changed (a new image) starts over,
	// as the kubelet keys its back-off by the container's hash.
	spec string
}

// inBackoff reports whether an event at eventTime (a container's finish, a
// failed pull) is still within entry's back-off at now, and how long is left.
// With no entry, or an entry older than backoffReset at eventTime, there is
// no back-off.
func inBackoff(entry backoffEntry, ok bool, eventTime, now time.Time) (bool, time.Duration) {
	if !ok || eventTime.Sub(entry.last) > backoffReset {
		return false, 0
	}
	left := entry.delay - now.Sub(eventTime)
	if left <= 0 {
		return false, 0
	}
	return true, left
}

// nextBackoff is entry after a retry of an event at eventTime: the first (or
// the first after a reset) waits backoffInitial, each next one twice the last,
// at most backoffMax.
func nextBackoff(entry backoffEntry, ok bool, eventTime time.Time) backoffEntry {
	if !ok || eventTime.Sub(entry.last) > backoffReset {
		return backoffEntry{delay: backoffInitial, last: eventTime}
	}
	return backoffEntry{delay: min(2*entry.delay, backoffMax), last: eventTime}
}
