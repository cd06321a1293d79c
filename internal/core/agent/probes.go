package agent

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/prober"
)

// Prober is the part of *prober.Manager the agent drives. The loop calls
// AddPod when a pod becomes active (and again with a changed pod object),
// StopLivenessAndStartup when it starts stopping (readiness keeps probing, as
// the kubelet's), and RemovePod once it is terminated or left the table: the
// pod's probes stop then.
//
// The prober's results come back on the channels Updates returns (called
// once, when the loop starts), which the loop drains:
// any update makes it recompute the pod's status (podstatus.Derive reads
// started and ready from the prober the runtime's StatusNode names, hence
// the Ready and ContainersReady conditions), and a liveness or startup Failure of an active pod makes it
// sync the pod, in which the pod runtime restarts that container; so does a
// startup Success (containers waiting for a sidecar to start can start).
type Prober interface {
	AddPod(pod *v1.Pod) error
	StopLivenessAndStartup(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
	Updates() []<-chan prober.Update
}

var _ Prober = (*prober.Manager)(nil)

// probedPod is a pod the prober was told of: the pod object it was given,
// and whether its liveness and startup probes were stopped.
type probedPod struct {
	pod      *v1.Pod
	stopping bool
}

// forwardProbeUpdates copies every probe result channel into l.probeC from
// a goroutine each, until the loop ends.
func (l *loop) forwardProbeUpdates() {
	if l.a.probes == nil {
		return
	}
	for _, ch := range l.a.probes.Updates() {
		l.wg.Go(func() {
			for {
				select {
				case u := <-ch:
					select {
					case l.probeC <- u:
					case <-l.ctx.Done():
						return
					}
				case <-l.ctx.Done():
					return
				}
			}
		})
	}
}

// syncProbes tells the prober of the pods that became active, started
// stopping, terminated or left the table since the last call.
func (l *loop) syncProbes() {
	if l.a.probes == nil {
		return
	}
	for uid, p := range l.probed {
		e := l.pods[uid]
		if e == nil || e.pod == nil || e.phase == phaseTerminated {
			l.a.probes.RemovePod(p.pod)
			delete(l.probed, uid)
		}
	}
	for uid, e := range l.pods {
		if e.pod == nil || e.rejected {
			continue
		}
		p := l.probed[uid]
		switch {
		case e.phase == phaseActive && (p == nil || p.pod != e.pod):
			if err := l.a.probes.AddPod(e.pod); err != nil {
				l.a.log.Error("Some probes of the pod are invalid and do not run", "pod", nodeapi.PodName(e.pod), "podUID", uid, "err", err)
			}
			l.probed[uid] = &probedPod{pod: e.pod}
			e.dirty = true
		case e.phase == phaseTerminating && p != nil && !p.stopping:
			l.a.probes.StopLivenessAndStartup(p.pod)
			p.stopping = true
		}
	}
}
