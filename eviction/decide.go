package eviction

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ThresholdsMet returns the thresholds whose signal's available amount is below the
// threshold quantity. With enforceMinReclaim, a threshold's minimum reclaim is added
// to its quantity: that is how a pressure episode persists until the extra amount is
// freed. Thresholds without an observation are never met.
func ThresholdsMet(ts []Threshold, obs Observations, enforceMinReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok || o.Available == nil {
			continue
		}
		q := t.Value.of(o.Capacity)
		if enforceMinReclaim && t.MinReclaim != nil {
			q.Add(t.MinReclaim.of(o.Capacity))
		}
		if q.Cmp(*o.Available) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// mergeThresholds returns the union of a and b, keeping a's order, then b's new ones.
func mergeThresholds(a, b []Threshold) []Threshold {
	out := append([]Threshold(nil), a...)
	for _, t := range b {
		if !ContainsThreshold(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// ContainsThreshold reports whether ts holds a threshold of t's signal and kind
// (hard, or soft with the same grace period): a configured threshold across passes.
func ContainsThreshold(ts []Threshold, t Threshold) bool {
	return slices.ContainsFunc(ts, func(x Threshold) bool {
		return x.Signal == t.Signal && x.GracePeriod == t.GracePeriod
	})
}

// thresholdKey identifies a configured threshold across passes: a signal has at
// most one hard and one soft threshold.
type thresholdKey struct {
	Signal Signal
	Soft   bool
}

func keyOf(t Threshold) thresholdKey { return thresholdKey{Signal: t.Signal, Soft: !t.Hard()} }

// firstObservedAt records when each met threshold was first seen met: thresholds
// seen before keep their time, new ones get now, and ones no longer met are dropped.
// It returns nil when nothing is met (a pass every 10 s on a quiet node then
// allocates nothing here).
func firstObservedAt(met []Threshold, last map[thresholdKey]time.Time, now time.Time) map[thresholdKey]time.Time {
	if len(met) == 0 {
		return nil
	}
	out := make(map[thresholdKey]time.Time, len(met))
	for _, t := range met {
		k := keyOf(t)
		if at, ok := last[k]; ok {
			out[k] = at
		} else {
			out[k] = now
		}
	}
	return out
}

// metGracePeriod returns the thresholds whose grace period has elapsed since they
// were first observed. Hard thresholds qualify at once.
func metGracePeriod(met []Threshold, firstSeen map[thresholdKey]time.Time, now time.Time) []Threshold {
	var out []Threshold
	for _, t := range met {
		at, ok := firstSeen[keyOf(t)]
		if !ok {
			continue
		}
		if now.Sub(at) >= t.GracePeriod {
			out = append(out, t)
		}
	}
	return out
}

// updatedStats keeps the thresholds whose observation is newer than the one acted on
// in the previous pass, so the loop never acts twice on the same stale sample.
func updatedStats(ts []Threshold, obs, last Observations) []Threshold {
	var out []Threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		l, seen := last[t.Signal]
		if !seen || o.Time.IsZero() || o.Time.After(l.Time) {
			out = append(out, t)
		}
	}
	return out
}

// Conditions returns the node conditions the thresholds drive, without duplicates,
// in the order of first appearance.
func Conditions(ts []Threshold) []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, t := range ts {
		c, ok := t.Signal.Condition()
		if !ok {
			continue
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// conditionsLastObservedAt sets now as the last observation time of each condition
// in conds, keeping the others from last. It never modifies last, and returns
// last itself when conds is empty (the common pass, which then allocates nothing).
func conditionsLastObservedAt(conds []v1.NodeConditionType, last map[v1.NodeConditionType]time.Time, now time.Time) map[v1.NodeConditionType]time.Time {
	if len(conds) == 0 {
		return last
	}
	out := make(map[v1.NodeConditionType]time.Time, len(last)+len(conds))
	for c, at := range last {
		out[c] = at
	}
	for _, c := range conds {
		out[c] = now
	}
	return out
}

// conditionsObservedSince returns the conditions last observed less than period
// before now, in a fixed order (memory, disk, PID).
func conditionsObservedSince(observed map[v1.NodeConditionType]time.Time, period time.Duration, now time.Time) []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		at, ok := observed[c]
		if ok && now.Sub(at) < period {
			out = append(out, c)
		}
	}
	return out
}

// ReclaimTarget picks the threshold to act on: memory signals first, then the
// others in configuration order, as the kubelet's byEvictionPriority does. ok is
// false when ts is empty.
func ReclaimTarget(ts []Threshold) (t Threshold, r v1.ResourceName, ok bool) {
	for _, x := range ts {
		if x.Signal.isMemory() {
			r, _ = x.Signal.Resource()
			return x, r, true
		}
	}
	for _, x := range ts {
		if r, ok := x.Signal.Resource(); ok {
			return x, r, true
		}
	}
	return Threshold{}, "", false
}

// thresholdMetInfo returns the quantity and available amount of the first
// threshold whose signal reclaims r and has an observation, for the eviction
// message. Like the kubelet's getThresholdMetInfo it does not re-check that the
// threshold is met: one held only by its minimum reclaim is reported too.
func thresholdMetInfo(r v1.ResourceName, ts []Threshold, obs Observations) (q, avail *resource.Quantity) {
	for _, t := range ts {
		if sr, _ := t.Signal.Resource(); sr != r {
			continue
		}
		o, ok := obs[t.Signal]
		if !ok || o.Available == nil {
			continue
		}
		return t.Value.Of(o.Capacity), o.Available
	}
	return nil, nil
}

// EvictionGracePeriod is the grace period for a pod evicted for threshold t: 1s for
// a hard threshold; for a soft one, evictionMaxPodGracePeriod, or the pod's own
// terminationGracePeriodSeconds when that is smaller.
func EvictionGracePeriod(t Threshold, pod *v1.Pod, maxPodGrace time.Duration) time.Duration {
	if t.Hard() {
		return HardEvictionGracePeriod
	}
	g := maxPodGrace
	if tg := pod.Spec.TerminationGracePeriodSeconds; tg != nil && time.Duration(*tg)*time.Second < g {
		g = time.Duration(*tg) * time.Second
	}
	return g
}
