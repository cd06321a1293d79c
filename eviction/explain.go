package eviction

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// Snapshot is one moment of a node: its pods and their stats.
type Snapshot struct {
	Pods    []*v1.Pod
	Summary *statsapi.Summary
	// Layout overrides the disk layout detected from the Summary when non-nil.
	Layout *DiskLayout
}

// Ranking is the eviction order of the pods for one signal.
type Ranking struct {
	Signal Signal
	Pods   []Ranked
}

// Decision is what one eviction pass would do on a snapshot, assuming every grace
// period has elapsed and no earlier pass has run (a snapshot has no history).
type Decision struct {
	Layout        DiskLayout
	Thresholds    []Threshold // configured, with containerfs derived for the layout
	Observations  Observations
	ThresholdsMet []Threshold
	Conditions    []v1.NodeConditionType
	// Violations are local-storage limit breaches; the pass evicts them first.
	Violations []Violation
	// Target is the threshold the pass would reclaim, when any is met.
	Target *Threshold
	// Reclaim is the node-level reclaim that would run before any pod is evicted.
	Reclaim  Steps
	Rankings []Ranking
	// Evict is the pod the pass would evict, nil if none.
	Evict *Evicted
}

// Evicted is the pod a pass picks, with its eviction.
type Evicted struct {
	Pod *v1.Pod
	Eviction
}

// Decide replays one eviction pass on a snapshot. The pods are ranked for every
// met signal, then for each of rankSignals not among them ("who goes next").
// localStorage enables the local-storage limit checks.
func Decide(cfg Config, snap Snapshot, rankSignals []Signal, localStorage bool) Decision {
	cfg = cfg.withDefaults()
	layout := DetectLayout(snap.Summary)
	if snap.Layout != nil {
		layout = *snap.Layout
	}
	d := Decision{Layout: layout, Thresholds: WithContainerFsThresholds(cfg.Thresholds, layout)}
	d.Observations = Observe(snap.Summary)
	d.ThresholdsMet = ThresholdsMet(d.Thresholds, d.Observations, false)
	d.Conditions = Conditions(d.ThresholdsMet)
	var podStats []statsapi.PodStats
	if snap.Summary != nil {
		podStats = snap.Summary.Pods
	}
	stats := PodStatsFunc(podStats)

	var signals []Signal
	for _, t := range d.ThresholdsMet {
		if !slices.Contains(signals, t.Signal) {
			signals = append(signals, t.Signal)
		}
	}
	for _, s := range rankSignals {
		if !slices.Contains(signals, s) {
			signals = append(signals, s)
		}
	}
	for _, s := range signals {
		d.Rankings = append(d.Rankings, Ranking{Signal: s, Pods: Rank(s, layout, snap.Pods, stats)})
	}

	if localStorage {
		d.Violations = LocalStorageViolations(snap.Pods, stats, layout)
		for _, v := range d.Violations {
			if !qos.IsCritical(v.Pod) {
				d.Evict = &Evicted{Pod: v.Pod, Eviction: Eviction{Reason: Reason, Message: v.Message, GracePeriod: HardEvictionGracePeriod}}
				return d
			}
		}
	}
	target, res, ok := ReclaimTarget(d.ThresholdsMet)
	if !ok {
		return d
	}
	d.Target = &target
	d.Reclaim = ReclaimSteps(target.Signal, layout)
	var ranked []Ranked
	for _, r := range d.Rankings { // the target's signal is met, so already ranked
		if r.Signal == target.Signal {
			ranked = r.Pods
		}
	}
	for _, r := range ranked {
		if qos.IsCritical(r.Pod) {
			continue
		}
		msg, ann := Message(res, r.Pod, stats, d.ThresholdsMet, d.Observations)
		d.Evict = &Evicted{Pod: r.Pod, Eviction: Eviction{
			Signal: target.Signal, Reason: Reason, Message: msg, Annotations: ann,
			GracePeriod: EvictionGracePeriod(target, r.Pod, cfg.MaxPodGracePeriod),
		}}
		break
	}
	return d
}
