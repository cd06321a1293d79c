package snapshot

import (
	"fmt"
	"math"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// summaryDoc is a statsapi.Summary as decoded: Node is nil when the document has
// no node stats (absent or null), which decoding into a Summary would not tell
// from empty ones. TestSummaryDocMatchesSummary keeps the fields in step.
type summaryDoc struct {
	Node *statsapi.NodeStats `json:"node"`
	Pods []statsapi.PodStats `json:"pods"`
}

// jsonKind names the kind of a valid JSON value by its first byte.
func jsonKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// gauge is one uint64 Summary value and its field name.
type gauge struct {
	name string
	v    *uint64
}

// tooLarge returns the first gauge above math.MaxInt64. Byte, inode and count
// gauges become int64s (resource.Quantity) downstream, where such a value wraps
// negative: a node with 2^64-1 bytes available would be under memory pressure.
func tooLarge(gs ...gauge) (gauge, bool) {
	for _, g := range gs {
		if g.v != nil && *g.v > math.MaxInt64 {
			return g, true
		}
	}
	return gauge{}, false
}

func memoryGauge(m *statsapi.MemoryStats) (gauge, bool) {
	if m == nil {
		return gauge{}, false
	}
	return tooLarge(gauge{"availableBytes", m.AvailableBytes}, gauge{"usageBytes", m.UsageBytes},
		gauge{"workingSetBytes", m.WorkingSetBytes}, gauge{"rssBytes", m.RSSBytes})
}

func fsGauge(fs *statsapi.FsStats) (gauge, bool) {
	if fs == nil {
		return gauge{}, false
	}
	return tooLarge(gauge{"availableBytes", fs.AvailableBytes}, gauge{"capacityBytes", fs.CapacityBytes},
		gauge{"usedBytes", fs.UsedBytes}, gauge{"inodesFree", fs.InodesFree}, gauge{"inodes", fs.Inodes},
		gauge{"inodesUsed", fs.InodesUsed})
}

func cpuGauge(c *statsapi.CPUStats) (gauge, bool) {
	if c == nil {
		return gauge{}, false
	}
	return tooLarge(gauge{"usageNanoCores", c.UsageNanoCores})
}

func swapGauge(s *statsapi.SwapStats) (gauge, bool) {
	if s == nil {
		return gauge{}, false
	}
	return tooLarge(gauge{"swapAvailableBytes", s.SwapAvailableBytes}, gauge{"swapUsageBytes", s.SwapUsageBytes})
}

// under names g's field below parent.
func (g gauge) under(parent string) gauge {
	g.name = parent + "." + g.name
	return g
}

// containerGauge checks one container's (or system container's) gauges.
func containerGauge(c *statsapi.ContainerStats) (gauge, bool) {
	if g, bad := memoryGauge(c.Memory); bad {
		return g.under("memory"), true
	}
	if g, bad := cpuGauge(c.CPU); bad {
		return g.under("cpu"), true
	}
	if g, bad := fsGauge(c.Rootfs); bad {
		return g.under("rootfs"), true
	}
	if g, bad := fsGauge(c.Logs); bad {
		return g.under("logs"), true
	}
	if g, bad := swapGauge(c.Swap); bad {
		return g.under("swap"), true
	}
	for k := range c.Accelerators {
		a := &c.Accelerators[k]
		if g, bad := tooLarge(gauge{"memoryTotal", &a.MemoryTotal}, gauge{"memoryUsed", &a.MemoryUsed}); bad {
			return g.under(fmt.Sprintf("accelerators[%d]", k)), true
		}
	}
	return gauge{}, false
}

func podGauge(p *statsapi.PodStats) (gauge, bool) {
	if g, bad := memoryGauge(p.Memory); bad {
		return g.under("memory"), true
	}
	if g, bad := cpuGauge(p.CPU); bad {
		return g.under("cpu"), true
	}
	if g, bad := fsGauge(p.EphemeralStorage); bad {
		return g.under("ephemeral-storage"), true
	}
	if g, bad := swapGauge(p.Swap); bad {
		return g.under("swap"), true
	}
	if ps := p.ProcessStats; ps != nil {
		if g, bad := tooLarge(gauge{"process_count", ps.ProcessCount}); bad {
			return g.under("process_stats"), true
		}
	}
	for j := range p.Containers {
		if g, bad := containerGauge(&p.Containers[j]); bad {
			return g.under(fmt.Sprintf("containers[%d]", j)), true
		}
	}
	for j := range p.VolumeStats {
		if g, bad := fsGauge(&p.VolumeStats[j].FsStats); bad {
			return g.under(fmt.Sprintf("volume[%d]", j)), true
		}
	}
	return gauge{}, false
}

// nodeGauge checks the node's gauges.
func nodeGauge(n *statsapi.NodeStats) (gauge, bool) {
	if g, bad := memoryGauge(n.Memory); bad {
		return g.under("memory"), true
	}
	if g, bad := cpuGauge(n.CPU); bad {
		return g.under("cpu"), true
	}
	if g, bad := fsGauge(n.Fs); bad {
		return g.under("fs"), true
	}
	if rt := n.Runtime; rt != nil {
		if g, bad := fsGauge(rt.ImageFs); bad {
			return g.under("runtime.imageFs"), true
		}
		if g, bad := fsGauge(rt.ContainerFs); bad {
			return g.under("runtime.containerFs"), true
		}
	}
	if g, bad := swapGauge(n.Swap); bad {
		return g.under("swap"), true
	}
	for i := range n.SystemContainers {
		if g, bad := containerGauge(&n.SystemContainers[i]); bad {
			return g.under(fmt.Sprintf("systemContainers[%d]", i)), true
		}
	}
	return gauge{}, false
}

// checkGauges rejects a Summary whose byte, inode or count gauges do not fit an
// int64, or whose rlimit is negative, naming the field by its JSON path:
// "node.memory.availableBytes: 18446744073709551615: too large". Cumulative
// counters (CPU core-seconds, network bytes, page faults, PSI totals) are not
// checked: nothing converts them, and they may legitimately grow that large. It
// reads each value once and allocates only for the error, so it costs little next
// to decoding, even for a Summary with thousands of pods.
func checkGauges(s *statsapi.Summary) error {
	if g, bad := nodeGauge(&s.Node); bad {
		return fmt.Errorf("node.%s: %d: too large", g.name, *g.v)
	}
	if r := s.Node.Rlimit; r != nil {
		if r.MaxPID != nil && *r.MaxPID < 0 {
			return fmt.Errorf("node.rlimit.maxpid: %d: must not be negative", *r.MaxPID)
		}
		if r.NumOfRunningProcesses != nil && *r.NumOfRunningProcesses < 0 {
			return fmt.Errorf("node.rlimit.curproc: %d: must not be negative", *r.NumOfRunningProcesses)
		}
	}
	for i := range s.Pods {
		if g, bad := podGauge(&s.Pods[i]); bad {
			return fmt.Errorf("pods[%d].%s: %d: too large", i, g.name, *g.v)
		}
	}
	return nil
}
