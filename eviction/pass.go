package eviction

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// Evicted is a pod an eviction pass evicts, and why.
type Evicted struct {
	Pod *v1.Pod
	// Signal is the signal reclaimed, "" for a local-storage limit.
	Signal Signal
	// Limit is the local-storage limit the pod broke (LimitEmptyDir,
	// LimitPodEphemeral or LimitContainerEphemeral), "" for a threshold.
	Limit string
	// Message is the kubelet's eviction message: the pod's status message and
	// the Evicted event's.
	Message string
	// Annotations are the Evicted event's (offending containers and their usage,
	// starved resource); nil for a local-storage limit, as in the kubelet.
	Annotations map[string]string
	// GracePeriod is what the pod's containers get: HardEvictionGracePeriod for a
	// hard threshold or a local-storage limit, EvictionGracePeriod for a soft one.
	GracePeriod time.Duration
}

// KillRequest returns the request that stops the pod as the kubelet's eviction
// does: phase Failed, reason Evicted, the eviction message, a DisruptionTarget
// condition with the same message, and the grace period in whole seconds
// (truncated).
func (e Evicted) KillRequest() nodeapi.KillRequest {
	grace := int64(e.GracePeriod / time.Second)
	return nodeapi.KillRequest{
		Pod: e.Pod,
		Status: v1.PodStatus{
			Phase:      v1.PodFailed,
			Reason:     Reason,
			Message:    e.Message,
			Conditions: []v1.PodCondition{nodeapi.DisruptionTarget(e.Message)},
		},
		GracePeriodOverride: &grace,
	}
}

// metricLabel is the eviction_signal label of the kubelet_evictions counter:
// the signal, or the local-storage limit.
func (e Evicted) metricLabel() string {
	if e.Limit != "" {
		return e.Limit
	}
	return string(e.Signal)
}

// passInput is what one eviction pass decides on.
type passInput struct {
	layout DiskLayout
	pods   []*v1.Pod
	stats  StatsFunc
	obs    Observations
	// actionable are the thresholds the pass may act on: met, past their grace
	// period and observed on fresh stats.
	actionable   []Threshold
	localStorage bool          // check local-storage limits
	maxPodGrace  time.Duration // evictionMaxPodGracePeriod
}

// passPlan is what one eviction pass does, before any side effect.
type passPlan struct {
	// Violations are every local-storage limit breach, critical pods included.
	Violations []Violation
	// Target is the threshold to reclaim, nil when none is actionable or when the
	// pass evicts local-storage violators instead; Resource is its resource.
	Target   *Threshold
	Resource v1.ResourceName
	// Ranked is the ranking for Target's signal.
	Ranked []Ranked
	// Skipped are the critical pods passed over, in the order met.
	Skipped []*v1.Pod
	// Evictions are the pods to evict: every non-critical local-storage
	// violator, else at most one pod for Target (once node-level reclaim has
	// not freed enough).
	Evictions []Evicted
}

// planPass is the decision of one eviction pass, shared by Manager and Decide:
// local-storage violators first; otherwise the threshold to reclaim, the pods
// ranked for its signal, and the first non-critical one with its message and
// grace period.
func planPass(in passInput) passPlan {
	var p passPlan
	if in.localStorage {
		p.Violations = LocalStorageViolations(in.pods, in.stats, in.layout)
		for _, v := range p.Violations {
			if qos.IsCritical(v.Pod) {
				p.Skipped = append(p.Skipped, v.Pod)
				continue
			}
			p.Evictions = append(p.Evictions, Evicted{Pod: v.Pod, Limit: v.Limit, Message: v.Message, GracePeriod: HardEvictionGracePeriod})
		}
		if len(p.Evictions) > 0 {
			return p
		}
	}
	t, res, ok := ReclaimTarget(in.actionable)
	if !ok {
		return p
	}
	target := t // on the heap only when there is one
	p.Target, p.Resource = &target, res
	p.Ranked = Rank(target.Signal, in.layout, in.pods, in.stats)
	for _, r := range p.Ranked {
		if qos.IsCritical(r.Pod) {
			p.Skipped = append(p.Skipped, r.Pod)
			continue
		}
		msg, ann := Message(res, r.Pod, in.stats, in.actionable, in.obs)
		p.Evictions = append(p.Evictions, Evicted{
			Pod: r.Pod, Signal: target.Signal, Message: msg, Annotations: ann,
			GracePeriod: EvictionGracePeriod(target, r.Pod, in.maxPodGrace),
		})
		break
	}
	return p
}
