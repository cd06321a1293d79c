package agent

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// snapshot is the pod table as the loop last published it. It and everything
// it points to are immutable once stored.
type snapshot struct {
	// pods is every pod from a source with its status, sorted by namespace
	// and name (then UID).
	pods []*v1.Pod
	// active are the admitted pods not yet terminated, in pods' order.
	active []*v1.Pod
	// byUID holds every pod of pods.
	byUID map[types.UID]*podView
	// sourcesReady is true once every source delivered its first set.
	sourcesReady bool
}

// podView is what readers may know of one pod.
type podView struct {
	pod *v1.Pod
	// deleted: no source wants the pod any more (it may still be stopping).
	deleted bool
	// terminated: the pod's containers stopped and will not be restarted
	// (rejected, killed, or finished under its restartPolicy).
	terminated bool
	// cleanedUp: terminated and the last relist saw nothing of it running.
	cleanedUp bool
}

// Pods returns every pod the sources gave, with its current status, sorted by
// namespace and name: admitted, rejected, terminating and terminated ones
// (for /pods). The pods are shared: callers must not modify them.
func (t *Table) Pods() []*v1.Pod { return t.snap.Load().pods }

// ActivePods returns the pods admitted and not yet terminated, with their
// current status (pods being killed included until they stopped, unless no
// source wants them any more). The pods are shared: callers must not modify
// them.
func (t *Table) ActivePods() []*v1.Pod { return t.snap.Load().active }

// IsPodDeleted reports whether the pod is gone: no source wants it any more,
// or, once every source has delivered its first set, no source ever gave it.
// Before that, an unknown pod is not deleted (it may be adopted).
func (t *Table) IsPodDeleted(uid string) bool {
	s := t.snap.Load()
	v, ok := s.byUID[types.UID(uid)]
	if !ok {
		return s.sourcesReady
	}
	return v.deleted
}

// IsPodTerminated reports whether the pod's containers have all stopped and
// will not be restarted; an unknown pod is terminated once every source has
// delivered its first set.
func (t *Table) IsPodTerminated(uid string) bool {
	s := t.snap.Load()
	v, ok := s.byUID[types.UID(uid)]
	if !ok {
		return s.sourcesReady
	}
	return v.terminated
}

// PodCleanedUp reports whether pod is terminated and nothing of it runs any
// more (the last relist saw no running container and no ready sandbox), or
// the table no longer holds it: the eviction manager waits for it before its
// next pass.
func (t *Table) PodCleanedUp(pod *v1.Pod) bool {
	v, ok := t.snap.Load().byUID[pod.UID]
	if !ok {
		return true
	}
	return v.terminated && v.cleanedUp
}

// GetPodStatus returns the pod's current status (prober.PodStatusGetter).
func (t *Table) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	v, ok := t.snap.Load().byUID[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return v.pod.Status, true
}
