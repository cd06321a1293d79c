package stats

import (
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// DefaultInterface is the interface a pod's NetworkStats gives inline (its
// own fields besides the Interfaces list), as the kubelet's: the one CNI
// plugins name in the pod's network namespace.
const DefaultInterface = "eth0"

// networkStats is the Summary's NetworkStats of the interfaces ifs, read at
// t: each in Interfaces (name, rx and tx bytes and errors), and the one named
// DefaultInterface also inline; nil when there are none.
func networkStats(ifs []InterfaceSample, t metav1.Time) *statsapi.NetworkStats {
	if len(ifs) == 0 {
		return nil
	}
	out := &statsapi.NetworkStats{Time: t}
	for _, s := range ifs {
		st := statsapi.InterfaceStats{Name: s.Name, RxBytes: u64(s.RxBytes), RxErrors: u64(s.RxErrors), TxBytes: u64(s.TxBytes), TxErrors: u64(s.TxErrors)}
		if s.Name == DefaultInterface {
			out.InterfaceStats = st
		}
		out.Interfaces = append(out.Interfaces, st)
	}
	return out
}

func u64(v uint64) *uint64 { return &v }

// nodeNetwork reads the node's interfaces, those of the network namespace
// the agent runs in (<proc>/net/dev), leaving out those cadvisor leaves out
// of the root container (lo, veth*, ...); nil when the file is absent.
func (p *Provider) nodeNetwork(s *summary) (*statsapi.NetworkStats, error) {
	ifs, err := optional(readNetDev(filepath.Join(p.cfg.ProcRoot, "net", "dev")))
	if err != nil {
		return nil, err
	}
	return networkStats(ifs, s.now), nil
}

// sandboxNetwork reads the interfaces of the network namespace of the pod
// sandbox whose cgroup is cg (its first process's, as Containers does for
// /metrics/cadvisor); nil for a sandbox in the node's namespace (a
// hostNetwork pod).
func (p *Provider) sandboxNetwork(env *sampleEnv, cg string, s *summary) (*statsapi.NetworkStats, error) {
	pids, err := p.cg.procs(cg)
	if err != nil {
		return nil, err
	}
	first := env.firstProcess(pids)
	if first <= 0 {
		return nil, nil
	}
	ifs, err := env.network(first)
	if err != nil {
		return nil, err
	}
	return networkStats(ifs, s.now), nil
}
