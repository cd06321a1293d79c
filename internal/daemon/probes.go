package daemon

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/agent"
	"github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/prober"
)

// lateProbes is the prober for the pod runtime and the agent, which are built
// before the node-level managers (the prober reads the agent's pod statuses):
// it forwards to (*n).Probes, set by then, since neither calls it before the
// agent runs.
type lateProbes struct{ n **node.Node }

func (l lateProbes) m() *prober.Manager { return (*l.n).Probes }

func (l lateProbes) UpdatePodStatus(pod *v1.Pod, st *v1.PodStatus) { l.m().UpdatePodStatus(pod, st) }
func (l lateProbes) Unhealthy(uid types.UID, name, id string) (prober.ProbeType, *int64, bool) {
	return l.m().Unhealthy(uid, name, id)
}
func (l lateProbes) AddPod(pod *v1.Pod) error           { return l.m().AddPod(pod) }
func (l lateProbes) StopLivenessAndStartup(pod *v1.Pod) { l.m().StopLivenessAndStartup(pod) }
func (l lateProbes) RemovePod(pod *v1.Pod)              { l.m().RemovePod(pod) }
func (l lateProbes) Updates() []<-chan prober.Update    { return l.m().Updates() }

var (
	_ podruntime.Probes = lateProbes{}
	_ agent.Prober      = lateProbes{}
)
