package prober

import "k8s.io/apimachinery/pkg/types"

// Unhealthy reports whether the container containerID (as the pod status
// carries it) of pod uid, named name, has failed its liveness or its startup
// probe and must be restarted: which probe, and that probe's own
// terminationGracePeriodSeconds for the kill (nil: the pod's applies). The
// pod runtime asks it for each running container when it syncs a pod; the
// sync is prompted by the Failure update on Results(t).Updates(). Safe for
// concurrent use.
func (m *Manager) Unhealthy(uid types.UID, name, containerID string) (ProbeType, *int64, bool) {
	for _, t := range [...]ProbeType{Liveness, Startup} {
		if r, ok := m.results[t].Get(containerID); !ok || r != Failure {
			continue
		}
		var grace *int64
		m.mu.Lock()
		if p, ok := m.probes[probeKey{uid, name, t}]; ok {
			grace = p.spec.tgps
		}
		m.mu.Unlock()
		return t, grace, true
	}
	return 0, nil, false
}

// Updates returns the Updates channels of every probe type (Startup,
// Readiness, Liveness), for a consumer that drains them all.
func (m *Manager) Updates() []<-chan Update {
	out := make([]<-chan Update, 0, len(probeTypes))
	for _, t := range probeTypes {
		out = append(out, m.results[t].Updates())
	}
	return out
}
