package devicemanager

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// AllocatedResourcesStatus returns, per container name of the pod, the
// health of each device assigned to it, as the pod status's
// containerStatuses[].allocatedResourcesStatus shows it (KEP-4680): one entry
// per device resource, sorted by name, each listing the assigned devices
// sorted by ID. A device is Healthy or Unhealthy as its plugin's latest
// ListAndWatch message says (every device of a plugin whose stream ended is
// Unhealthy until it registers again, as for Capacity), and Unknown when the
// plugin no longer lists it or its resource was removed (or not yet
// re-registered after a restart). It returns nil when the pod holds no
// devices. The result is the caller's; safe for concurrent use.
func (m *Manager) AllocatedResourcesStatus(podUID string) map[string][]v1.ResourceStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctrs := m.pods[podUID]
	if len(ctrs) == 0 {
		return nil
	}
	out := make(map[string][]v1.ResourceStatus, len(ctrs))
	for ctr, byRes := range ctrs {
		st := make([]v1.ResourceStatus, 0, len(byRes))
		for _, res := range sortedKeys(byRes) {
			rs := m.resources[res]
			health := make([]v1.ResourceHealth, 0, len(byRes[res].ids))
			for _, id := range byRes[res].ids { // sorted
				health = append(health, v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: rs.health(id)})
			}
			st = append(st, v1.ResourceStatus{Name: v1.ResourceName(res), Resources: health})
		}
		out[ctr] = st
	}
	return out
}

// health is the device's health in the pod status's terms; r may be nil (a
// resource the Manager does not know).
func (r *resourceState) health(id string) v1.ResourceHealthStatus {
	switch {
	case r == nil:
		return v1.ResourceHealthStatusUnknown
	case r.healthy.Has(id):
		return v1.ResourceHealthStatusHealthy
	case r.unhealthy.Has(id):
		return v1.ResourceHealthStatusUnhealthy
	default:
		return v1.ResourceHealthStatusUnknown
	}
}

// HealthChanges delivers, while Run runs, the UIDs (sorted) of the pods
// whose containers hold a device whose health (see AllocatedResourcesStatus)
// changed: a ListAndWatch update, a plugin's stream ending, its resource
// being removed. Changes made while no one reads coalesce into the next
// value, so a reader never misses a pod, but one value may name a pod for
// several changes. Meant for a single reader, which should re-derive those
// pods' statuses.
func (m *Manager) HealthChanges() <-chan []string { return m.healthOut }

// inUseHealth returns the health of the resource's devices that some
// container holds. Call with m.mu held.
func (m *Manager) inUseHealth(res string) map[string]v1.ResourceHealthStatus {
	used := m.used[res]
	if len(used) == 0 {
		return nil
	}
	rs := m.resources[res]
	out := make(map[string]v1.ResourceHealthStatus, len(used))
	for id := range used {
		out[id] = rs.health(id)
	}
	return out
}

// noteHealth records, for HealthChanges, the pods holding a device of res
// whose health now differs from before (inUseHealth's earlier answer), and
// reports whether there was one. Call with m.mu held, then signalHealth
// after unlocking when it reports true.
func (m *Manager) noteHealth(res string, before map[string]v1.ResourceHealthStatus) bool {
	if len(before) == 0 {
		return false
	}
	rs := m.resources[res]
	changed := sets.New[string]()
	for id, h := range before {
		if rs.health(id) != h {
			changed.Insert(id)
		}
	}
	if changed.Len() == 0 {
		return false
	}
	noted := false
	for pod, ctrs := range m.pods {
		for _, byRes := range ctrs {
			if a := byRes[res]; a != nil && slices.ContainsFunc(a.ids, changed.Has) {
				m.healthPending.Insert(pod)
				noted = true
				break
			}
		}
	}
	return noted
}

// signalHealth wakes the HealthChanges sender; it never blocks.
func (m *Manager) signalHealth() {
	select {
	case m.healthC <- struct{}{}:
	default: // one is pending
	}
}

// sendHealth hands the pending pods to the HealthChanges reader until ctx
// ends; the pods noted while a value waits for its reader go in the next.
func (m *Manager) sendHealth(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.healthC:
		}
		m.mu.Lock()
		pods := sets.List(m.healthPending)
		m.healthPending = sets.New[string]()
		m.mu.Unlock()
		if len(pods) == 0 {
			continue
		}
		select {
		case m.healthOut <- pods:
		case <-ctx.Done():
			return
		}
	}
}
