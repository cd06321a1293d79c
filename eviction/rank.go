package eviction

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// StatsFunc returns a pod's stats; ok is false when the Summary has none for it.
type StatsFunc func(pod *v1.Pod) (stats *statsapi.PodStats, ok bool)

// PodStatsFunc indexes a Summary's pod stats by UID. A pod whose UID is not found
// (or that has none, as in hand-written snapshots) is looked up by namespace/name;
// that index is built on the first such miss. The returned func is not safe for
// concurrent use.
func PodStatsFunc(pods []statsapi.PodStats) StatsFunc {
	byUID := make(map[string]*statsapi.PodStats, len(pods))
	for i := range pods {
		if uid := pods[i].PodRef.UID; uid != "" {
			byUID[uid] = &pods[i]
		}
	}
	// The name index is built on first need, once, so that the returned
	// function stays safe for concurrent use.
	byName := sync.OnceValue(func() map[[2]string]*statsapi.PodStats {
		m := make(map[[2]string]*statsapi.PodStats, len(pods))
		for i := range pods {
			m[[2]string{pods[i].PodRef.Namespace, pods[i].PodRef.Name}] = &pods[i]
		}
		return m
	})
	return func(pod *v1.Pod) (*statsapi.PodStats, bool) {
		if uid := string(pod.UID); uid != "" {
			if s, ok := byUID[uid]; ok {
				return s, true
			}
		}
		s, ok := byName()[[2]string{pod.Namespace, pod.Name}]
		return s, ok
	}
}

// fsStats names the filesystem usage that counts towards a disk signal.
type fsStats struct {
	rootfs, logs, localVolumes bool
	// hostPath counts hostPath volumes among the local volumes, as the kubelet's
	// ranking does; its pod ephemeral-storage accounting leaves them out.
	hostPath bool
}

// fsStatsFor returns which usage counts for signal s on a node with layout l
// (the kubelet's table; image layers are not attributed to pods).
func fsStatsFor(s Signal, l DiskLayout) fsStats {
	all := fsStats{rootfs: true, logs: true, localVolumes: true, hostPath: true}
	switch l {
	case DedicatedImageFs:
		switch s {
		case SignalNodeFsAvailable, SignalNodeFsInodesFree:
			return fsStats{logs: true, localVolumes: true, hostPath: true}
		case SignalImageFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree:
			return fsStats{rootfs: true}
		}
	case SplitImageFs:
		switch s {
		case SignalImageFsAvailable, SignalImageFsInodesFree:
			return fsStats{}
		}
	}
	return all
}

// Usage is what the ranking saw of one pod for one signal.
type Usage struct {
	// HasStats is false when the Summary has no stats for the pod; such pods rank first.
	HasStats bool
	// Usage is the pod's working set or disk bytes, or its inode or process count.
	Usage int64
	// Request is the pod's memory or ephemeral-storage request in bytes; zero for
	// inodes and PIDs.
	Request int64
	// ExceedsRequest reports Usage > Request.
	ExceedsRequest bool
	// Priority is the pod's spec.priority (0 when unset).
	Priority int32
	// Count is true when Usage counts inodes or processes rather than bytes.
	Count bool
}

// UsageQuantity returns Usage as a quantity: bytes in binary units, counts in decimal.
func (u Usage) UsageQuantity() resource.Quantity {
	if u.Count {
		return *resource.NewQuantity(u.Usage, resource.DecimalSI)
	}
	return *resource.NewQuantity(u.Usage, resource.BinarySI)
}

// RequestQuantity returns Request as a quantity.
func (u Usage) RequestQuantity() resource.Quantity {
	return *resource.NewQuantity(u.Request, resource.BinarySI)
}

// PodUsage measures pod for signal s on layout l.
func PodUsage(s Signal, l DiskLayout, pod *v1.Pod, stats StatsFunc) Usage {
	return measure(s, l, pod, stats).toUsage()
}

// measurement is a pod's usage and request for one signal.
type measurement struct {
	hasStats       bool
	count          bool
	usage, request int64
	priority       int32
}

func (m measurement) toUsage() Usage {
	return Usage{HasStats: m.hasStats, Usage: m.usage, Request: m.request,
		ExceedsRequest: m.hasStats && m.usage > m.request, Priority: m.priority, Count: m.count}
}

func measure(s Signal, l DiskLayout, pod *v1.Pod, stats StatsFunc) measurement {
	m := measurement{priority: qos.Priority(pod)}
	ps, ok := stats(pod)
	if !ok || ps == nil {
		return m
	}
	m.hasStats = true
	r, _ := s.Resource()
	switch r {
	case v1.ResourceMemory:
		m.usage = int64(workingSet(ps.Memory))
		m.request = podRequest(pod, v1.ResourceMemory)
	case v1.ResourceEphemeralStorage:
		b := podDiskUsage(ps, pod, fsStatsFor(s, l), false)
		m.usage = int64(b)
		m.request = podRequest(pod, v1.ResourceEphemeralStorage)
	case ResourceInodes:
		n := podDiskUsage(ps, pod, fsStatsFor(s, l), true)
		m.usage, m.count = int64(n), true
	case ResourcePIDs:
		if ps.ProcessStats != nil && ps.ProcessStats.ProcessCount != nil {
			m.usage = int64(*ps.ProcessStats.ProcessCount)
		}
		m.count = true
	}
	return m
}

func workingSet(m *statsapi.MemoryStats) uint64 {
	if m == nil || m.WorkingSetBytes == nil {
		return 0
	}
	return *m.WorkingSetBytes
}

// podRequest is the pod's request of r as the kubelet's eviction code computes it:
// the larger of the sum over regular containers and the largest init container.
func podRequest(pod *v1.Pod, r v1.ResourceName) int64 {
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		if q, ok := pod.Spec.Containers[i].Resources.Requests[r]; ok {
			sum += q.Value()
		}
	}
	for i := range pod.Spec.InitContainers {
		if q, ok := pod.Spec.InitContainers[i].Resources.Requests[r]; ok && q.Value() > initMax {
			initMax = q.Value()
		}
	}
	return max(sum, initMax)
}

// podDiskUsage sums the pod's bytes, or with inodes its inodes, on the measured
// filesystems. Only the counter asked for is read: every one is a pointer into the
// Summary, and for 10,000 pods the reads are most of a ranking's cost.
func podDiskUsage(ps *statsapi.PodStats, pod *v1.Pod, m fsStats, inodes bool) uint64 {
	var sum uint64
	add := func(fs *statsapi.FsStats) {
		if fs == nil {
			return
		}
		p := fs.UsedBytes
		if inodes {
			p = fs.InodesUsed
		}
		if p != nil {
			sum += *p
		}
	}
	for i := range ps.Containers {
		c := &ps.Containers[i]
		if m.rootfs {
			add(c.Rootfs)
		}
		if m.logs {
			add(c.Logs)
		}
	}
	if m.localVolumes && len(ps.VolumeStats) > 0 {
		for j := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[j]
			if !isLocalVolume(v, m.hostPath) {
				continue
			}
			for i := range ps.VolumeStats {
				if ps.VolumeStats[i].Name == v.Name {
					add(&ps.VolumeStats[i].FsStats)
				}
			}
		}
	}
	return sum
}

// isLocalVolume reports whether v is a local ephemeral volume as the kubelet's
// volumeutil.IsLocalEphemeralVolume defines them: gitRepo, configMap and emptyDir
// with the default medium (not Memory, not HugePages). With hostPath, hostPath
// volumes count too, as in the kubelet's eviction ranking (localVolumeNames).
func isLocalVolume(v *v1.Volume, hostPath bool) bool {
	return (hostPath && v.HostPath != nil) || v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault)
}

// Ranked is one pod in a ranking with what the ranking saw of it.
type Ranked struct {
	Pod   *v1.Pod
	Usage Usage
}

// Rank orders pods for eviction under signal s on layout l, first to evict first:
//
//   - memory: pods without stats; usage above request before usage within it;
//     lower priority first; larger (working set − request) first.
//   - disk (bytes and inodes): the same with the layout's filesystem usage and the
//     ephemeral-storage request (zero for inodes).
//   - pid: lower priority first; pods without stats; more processes first.
//
// The sort is stable, so pods that tie keep their input order. pods is not modified.
func Rank(s Signal, l DiskLayout, pods []*v1.Pod, stats StatsFunc) []Ranked {
	out := make([]Ranked, len(pods))
	keys := make([]rankKey, len(pods))
	for i, p := range pods {
		m := measure(s, l, p, stats)
		out[i] = Ranked{Pod: p, Usage: m.toUsage()}
		keys[i] = m.key(s == SignalPIDAvailable, i)
	}
	slices.SortFunc(keys, func(a, b rankKey) int {
		switch {
		case a.hi != b.hi:
			return cmpUint(a.hi, b.hi)
		case a.lo != b.lo:
			return cmpUint(a.lo, b.lo)
		}
		return int(a.i) - int(b.i) // the input index as last key makes the sort stable
	})
	permute(out, keys)
	return out
}

// permute reorders out in place so that out[j] becomes the element that was at
// keys[j].i, following each cycle of the permutation once. It consumes keys.
func permute(out []Ranked, keys []rankKey) {
	for j := range keys {
		if keys[j].i < 0 {
			continue // placed as part of an earlier cycle
		}
		held := out[j]
		k := j
		for {
			from := int(keys[k].i)
			keys[k].i = -1
			if from == j {
				out[k] = held
				break
			}
			out[k] = out[from]
			k = from
		}
	}
}

// rankKey packs a pod's ranking criteria into two words that sort ascending,
// first to evict first, so that sorting 10,000 pods compares integers only.
type rankKey struct {
	hi, lo uint64
	i      int32 // index in the input
}

func cmpUint(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// key builds the rank key of m.
//
//	requests first (memory, disk): hi = [has stats][within request][priority], lo = −(usage − request)
//	priority first (pid):          hi = [priority][has stats],                lo = −process count
//
// Booleans sort false first, priority ascending (sign bit flipped), and lo holds the
// negated amount so that larger amounts come first.
func (m measurement) key(priorityFirst bool, i int) rankKey {
	prio := uint64(uint32(m.priority) ^ 1<<31)
	var stats, within, over uint64
	if m.hasStats {
		stats = 1
		if m.usage <= m.request {
			within = 1
		}
		over = uint64(m.usage - m.request)
	}
	lo := ^(over ^ 1<<63) // descending by signed over
	if priorityFirst {
		return rankKey{hi: prio<<1 | stats, lo: lo, i: int32(i)}
	}
	return rankKey{hi: stats<<34 | within<<33 | prio, lo: lo, i: int32(i)}
}
