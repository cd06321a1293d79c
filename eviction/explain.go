package eviction

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
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
	// Target is the threshold the pass would reclaim, when any is met and no
	// local-storage violator is evicted instead.
	Target *Threshold
	// Reclaim is the node-level reclaim that would run before any pod is evicted.
	Reclaim  Steps
	Rankings []Ranking
	// Evictions are the pods the pass would evict: every non-critical
	// local-storage violator, else at most one pod for Target, should node-level
	// reclaim not free enough. Each gives the pod's KillRequest.
	Evictions []Evicted
}

// Decide replays one eviction pass on a snapshot: the decision the Manager's
// pass makes, with every threshold met taken as past its grace period and no
// earlier pass (so no minimum-reclaim hysteresis and no stale stats). The pods
// are ranked for every met signal, then for each of rankSignals not among them
// ("who goes next"). localStorage enables the local-storage limit checks.
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

	p := planPass(passInput{layout: layout, pods: snap.Pods, stats: stats, obs: d.Observations,
		actionable: d.ThresholdsMet, localStorage: localStorage, maxPodGrace: cfg.MaxPodGracePeriod})
	d.Violations, d.Target, d.Evictions = p.Violations, p.Target, p.Evictions
	if p.Target != nil {
		d.Reclaim = ReclaimSteps(p.Target.Signal, layout)
	}

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
		ranked := p.Ranked
		if p.Target == nil || s != p.Target.Signal {
			ranked = Rank(s, layout, snap.Pods, stats)
		}
		d.Rankings = append(d.Rankings, Ranking{Signal: s, Pods: ranked})
	}
	return d
}
