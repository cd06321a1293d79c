// Package eviction implements the kubelet's node-pressure eviction: signals observed
// from a stats Summary, hard and soft thresholds with grace periods and minimum
// reclaim, node conditions with a pressure-transition period, node-level reclaim,
// pod ranking per signal, local-storage limit violations, admission under pressure,
// and the Manager loop that evicts at most one pod per pass.
//
// Decision code is pure: it takes data and the current time and returns data.
// One pass's decision (local-storage violators, the threshold to reclaim, the
// ranking, the pod to evict with its message and grace period) is one function
// that both the Manager's pass and Decide (nodekeeper explain) run. The Manager's
// Step takes the time and returns when it is due again; Run is a thin loop that
// calls it on real time (nodekeeper simulate calls it on virtual time). It
// reaches the outside world through the small interfaces declared in
// manager.go and nodeapi's PodKiller and Recorder.
package eviction
