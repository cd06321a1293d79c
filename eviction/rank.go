package eviction

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// StatsFunc returns a pod's stats; ok is false when the Summary has none for it.
type StatsFunc func(pod *v1.Pod) (stats *statsapi.PodStats, ok bool)

// PodStatsFunc indexes a Summary's pod stats by UID. A pod whose UID is not found
// (or that has none, as in hand-written snapshots) is looked up by namespace/name;
// that index is built on the first such miss. When the Summary lists a UID or a
// namespace/name twice, the later entry wins. The returned func is safe for
// concurrent use; pods must not be modified while it is in use.
func PodStatsFunc(pods []statsapi.PodStats) StatsFunc {
	return (&podStatsIndex{pods: pods}).lookup
}

// podStatsIndex is PodStatsFunc's lookup. Both indexes are built on first
// need, once, so that lookup stays safe for concurrent use and a pass that
// looks up no pod (no pressure, no local-storage limit) builds neither.
type podStatsIndex struct {
	pods     []statsapi.PodStats
	uidOnce  sync.Once
	byUID    map[string]*statsapi.PodStats // written once, under uidOnce
	nameOnce sync.Once
	byName   map[podName]*statsapi.PodStats // written once, under nameOnce
}

func (x *podStatsIndex) lookup(pod *v1.Pod) (*statsapi.PodStats, bool) {
	if uid := string(pod.UID); uid != "" {
		x.uidOnce.Do(func() {
			x.byUID = make(map[string]*statsapi.PodStats, len(x.pods))
			for i := range x.pods {
				if uid := x.pods[i].PodRef.UID; uid != "" {
					x.byUID[uid] = &x.pods[i]
				}
			}
		})
		if ps, ok := x.byUID[uid]; ok {
			return ps, true
		}
	}
	x.nameOnce.Do(func() {
		x.byName = make(map[podName]*statsapi.PodStats, len(x.pods))
		for i := range x.pods {
			x.byName[podName{x.pods[i].PodRef.Namespace, x.pods[i].PodRef.Name}] = &x.pods[i]
		}
	})
	ps, ok := x.byName[podName{pod.Namespace, pod.Name}]
	return ps, ok
}

// podName is a pod's namespace and name.
type podName struct{ namespace, name string }

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
//
// The fields are ordered by size, so that a Usage takes 24 bytes (a ranking of
// 10,000 pods is 320 KB, not 480 KB).
type Usage struct {
	// Usage is the pod's working set or disk bytes, or its inode or process count.
	Usage int64
	// Request is the pod's memory or ephemeral-storage request in bytes; zero for
	// inodes and PIDs.
	Request int64
	// Priority is the pod's spec.priority (0 when unset).
	Priority int32
	// HasStats is false when the Summary has no stats for the pod; such pods rank first.
	HasStats bool
	// ExceedsRequest reports Usage > Request.
	ExceedsRequest bool
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
	u := Usage{Priority: qos.Priority(pod)}
	ps, ok := stats(pod)
	if !ok || ps == nil {
		return u
	}
	u.HasStats = true
	r, _ := s.Resource()
	switch r {
	case v1.ResourceMemory:
		u.Usage = int64(workingSet(ps.Memory))
		u.Request = podRequest(pod, v1.ResourceMemory)
	case v1.ResourceEphemeralStorage:
		u.Usage = int64(podDiskUsage(ps, pod, fsStatsFor(s, l), false))
		u.Request = podRequest(pod, v1.ResourceEphemeralStorage)
	case ResourceInodes:
		u.Usage, u.Count = int64(podDiskUsage(ps, pod, fsStatsFor(s, l), true)), true
	case ResourcePIDs:
		if ps.ProcessStats != nil && ps.ProcessStats.ProcessCount != nil {
			u.Usage = int64(*ps.ProcessStats.ProcessCount)
		}
		u.Count = true
	}
	u.ExceedsRequest = u.Usage > u.Request
	return u
}

func workingSet(m *statsapi.MemoryStats) uint64 {
	if m == nil || m.WorkingSetBytes == nil {
		return 0
	}
	return *m.WorkingSetBytes
}

// podRequest is the pod's request of r as the kubelet's eviction code computes it:
// the larger of the sum over regular containers and the largest init container
// (neither pod overhead nor pod-level resources count here), each amount as
// nodeapi.Amount reads it.
func podRequest(pod *v1.Pod, r v1.ResourceName) int64 {
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		if q, ok := pod.Spec.Containers[i].Resources.Requests[r]; ok {
			sum = quantity.AddSat(sum, nodeapi.Amount(r, q))
		}
	}
	for i := range pod.Spec.InitContainers {
		if q, ok := pod.Spec.InitContainers[i].Resources.Requests[r]; ok {
			initMax = max(initMax, nodeapi.Amount(r, q))
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

// Reason explains the pod's place in a ranking for signal s, for people:
// "usage exceeds request", "no stats: ranked first", "by priority, then process
// count" and the like, after "critical: never evicted; " for a critical pod.
func (r Ranked) Reason(s Signal) string {
	var parts []string
	if qos.IsCritical(r.Pod) {
		parts = append(parts, "critical: never evicted")
	}
	if !r.Usage.HasStats {
		return strings.Join(append(parts, "no stats: ranked first"), "; ")
	}
	switch res, _ := s.Resource(); res {
	case v1.ResourceMemory, v1.ResourceEphemeralStorage:
		if r.Usage.ExceedsRequest {
			parts = append(parts, "usage exceeds request")
		} else {
			parts = append(parts, "usage within request")
		}
	case ResourcePIDs:
		parts = append(parts, "by priority, then process count")
	default:
		parts = append(parts, "by priority, then inode usage")
	}
	return strings.Join(parts, "; ")
}

// Rank orders pods for eviction under signal s on layout l, first to evict first:
//
//   - memory: pods without stats; usage above request before usage within it;
//     lower priority first; larger (working set − request) first.
//   - disk (bytes and inodes): the same with the layout's filesystem usage and the
//     ephemeral-storage request (zero for inodes).
//   - pid: lower priority first; pods without stats; more processes first.
//
// The sort is stable, so pods that tie keep their input order. pods is not
// modified.
func Rank(s Signal, l DiskLayout, pods []*v1.Pod, stats StatsFunc) []Ranked {
	// Sorting positions rather than Ranked values moves 8 pointer-free bytes
	// per swap instead of 32 with a pointer.
	usages := make([]Usage, len(pods))
	order := make([]int, len(pods))
	for i, p := range pods {
		usages[i], order[i] = PodUsage(s, l, p, stats), i
	}
	if s == SignalPIDAvailable {
		slices.SortStableFunc(order, func(i, j int) int { return byPriority(&usages[i], &usages[j]) })
	} else {
		slices.SortStableFunc(order, func(i, j int) int { return byRequests(&usages[i], &usages[j]) })
	}
	out := make([]Ranked, len(pods))
	for k, i := range order {
		out[k] = Ranked{Pod: pods[i], Usage: usages[i]}
	}
	return out
}

// byRequests is the memory and disk order: pods without stats, then usage
// above request, then lower priority, then larger usage over request.
func byRequests(a, b *Usage) int {
	if a.HasStats != b.HasStats {
		return trueFirst(!a.HasStats)
	}
	if a.ExceedsRequest != b.ExceedsRequest {
		return trueFirst(a.ExceedsRequest)
	}
	if a.Priority != b.Priority {
		return cmp.Compare(a.Priority, b.Priority)
	}
	return cmp.Compare(b.Usage-b.Request, a.Usage-a.Request)
}

// byPriority is the PID order: lower priority, then pods without stats, then
// more processes.
func byPriority(a, b *Usage) int {
	if a.Priority != b.Priority {
		return cmp.Compare(a.Priority, b.Priority)
	}
	if a.HasStats != b.HasStats {
		return trueFirst(!a.HasStats)
	}
	return cmp.Compare(b.Usage, a.Usage)
}

// trueFirst orders two different booleans: -1 when the first is true.
func trueFirst(first bool) int {
	if first {
		return -1
	}
	return 1
}
