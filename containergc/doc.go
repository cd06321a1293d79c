// Package containergc removes dead containers and their sandboxes the way the
// kubelet's container GC does.
//
// A container is evictable when it is not running and was created at least
// MinAge ago. Evictable containers are grouped by (pod UID, container name);
// all of a deleted pod's go, and so do those of a terminated pod when the
// eviction manager asks (DeleteAllUnusedContainers). Each group then keeps its
// MaxPerPodContainer newest; if more than MaxContainers remain overall, each
// group is cut to MaxContainers / groups (at least 1), then the oldest go
// until MaxContainers remain. Afterwards, sandboxes that are not ready and hold
// no containers are removed, except the newest one of a pod that still exists.
// Last, the log directories of deleted pods and dangling legacy log symlinks
// go (LogDirs).
//
// Plan is the pure decision; Collector runs it against a CRI runtime every
// minute (Run) and on demand.
package containergc
