package plan

import (
	"time"
)

// The kubelet's back-off numbers (v1.36): a crashing container waits 10s,
// then twice as long each time, at most 5m (kubelet.go initialCrashLoopBackOff,
// MaxCrashLoopBackOff); with the ReduceDefaultCrashLoopBackOffDecay gate 1s
// and at most 60s. A failed image pull waits 10s doubling to 5m. Either starts
// over once 10m passed between the last retry and the next event (the crash
// back-off's HasExpiredFunc, 600s; the pull back-off's default, 2x its 5m).
const (
	crashLoopInitial        = 10 * time.Second
	crashLoopMax            = 5 * time.Minute
	reducedCrashLoopInitial = time.Second
	reducedCrashLoopMax     = time.Minute
	pullInitial             = 10 * time.Second
	pullMax                 = 5 * time.Minute
	backoffReset            = 10 * time.Minute
)

// Policy is how a back-off grows: the first delay, the cap of the doubling,
// and the time since the last retry after which the next event starts over.
// The zero value is PullPolicy's numbers.
type Policy struct {
	Initial, Max, Reset time.Duration
}

// PullPolicy is the image pull back-off: 10s doubling to 5m, reset after 10m.
func PullPolicy() Policy {
	return Policy{Initial: pullInitial, Max: pullMax, Reset: backoffReset}
}

// CrashLoopPolicy is the crash-loop back-off of a node as the kubelet
// configures it (newCrashLoopBackOff): 10s doubling to 5m; 1s to 60s when
// reduced (the ReduceDefaultCrashLoopBackOffDecay gate); a maxRestartPeriod
// above zero (crashLoopBackOff.maxContainerRestartPeriod with the
// KubeletCrashLoopBackOffMax gate) replaces the cap whatever reduced says,
// and lowers the first delay to it if less. The reset is 10m in every case.
func CrashLoopPolicy(reduced bool, maxRestartPeriod time.Duration) Policy {
	p := Policy{Initial: crashLoopInitial, Max: crashLoopMax, Reset: backoffReset}
	if reduced {
		p.Initial, p.Max = reducedCrashLoopInitial, reducedCrashLoopMax
	}
	if maxRestartPeriod > 0 {
		p.Max = maxRestartPeriod
		p.Initial = min(p.Initial, p.Max)
	}
	return p
}

// orDefault is p, or PullPolicy's numbers for the zero value.
func (p Policy) orDefault() Policy {
	if p == (Policy{}) {
		return PullPolicy()
	}
	return p
}

// Backoff is one back-off: after an event (a container exit, a failed
// pull) at or after Last, nothing is retried before the event plus Delay.
// It is a value: SyncPod returns new ones in its Result's State, never
// changing old ones.
type Backoff struct {
	Delay time.Duration
	// Last is when the back-off was last advanced: the restart of the
	// container (the kubelet's lastUpdate), the failed pull.
	Last time.Time
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

// InBackoff reports whether an event at eventTime (a container's finish, a
// failed pull) is still within entry's back-off at now, and how long is left.
// With no entry, or an entry advanced more than p.Reset before eventTime (the
// container ran that long), there is no back-off.
func InBackoff(p Policy, entry Backoff, ok bool, eventTime, now time.Time) (bool, time.Duration) {
	p = p.orDefault()
	if !ok || eventTime.Sub(entry.Last) > p.Reset {
		return false, 0
	}
	left := entry.Delay - now.Sub(eventTime)
	if left <= 0 {
		return false, 0
	}
	return true, left
}

// NextBackoff is entry after a retry at now of an event at eventTime: the
// first (or the first after a reset, see InBackoff) waits p.Initial, each
// next one twice the last, at most p.Max.
func NextBackoff(p Policy, entry Backoff, ok bool, eventTime, now time.Time) Backoff {
	p = p.orDefault()
	if !ok || eventTime.Sub(entry.Last) > p.Reset {
		return Backoff{Delay: p.Initial, Last: now}
	}
	return Backoff{Delay: min(2*entry.Delay, p.Max), Last: now}
}
