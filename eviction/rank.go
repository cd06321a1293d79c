package eviction

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/quantity"
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
	seed := maphash.MakeSeed()
	uidHash := func(uid string) uint64 { return maphash.String(seed, uid) }
	nameHash := func(namespace, name string) uint64 {
		return maphash.String(seed, name) ^ bits.RotateLeft64(maphash.String(seed, namespace), 32)
	}
	byUID := newPodIndex(len(pods))
	for i := range pods {
		if uid := pods[i].PodRef.UID; uid != "" {
			byUID.add(uidHash(uid), i, func(j int) bool { return pods[j].PodRef.UID == uid })
		}
	}
	// The name index is built on first need, once, so that the returned
	// function stays safe for concurrent use.
	byName := sync.OnceValue(func() podIndex {
		x := newPodIndex(len(pods))
		for i := range pods {
			ns, name := pods[i].PodRef.Namespace, pods[i].PodRef.Name
			x.add(nameHash(ns, name), i, func(j int) bool { return isPod(&pods[j].PodRef, ns, name) })
		}
		return x
	})
	return func(pod *v1.Pod) (*statsapi.PodStats, bool) {
		if uid := string(pod.UID); uid != "" {
			if i, ok := byUID.find(uidHash(uid), func(j int) bool { return pods[j].PodRef.UID == uid }); ok {
				return &pods[i], true
			}
		}
		ns, name := pod.Namespace, pod.Name
		i, ok := byName().find(nameHash(ns, name), func(j int) bool { return isPod(&pods[j].PodRef, ns, name) })
		if !ok {
			return nil, false
		}
		return &pods[i], true
	}
}

// isPod reports whether ref names the pod namespace/name.
func isPod(ref *statsapi.PodReference, namespace, name string) bool {
	return ref.Name == name && ref.Namespace == namespace
}

// podIndex finds a position in a Summary's pod list by a key's hash. It stands in
// for a map[string]*PodStats, which for 10,000 pods takes a quarter to a half
// longer to build and query and nearly five times the bytes: an open-addressing
// table with linear probing in one pointer-free slice (nothing for the GC to
// scan), whose slots keep 32 bits of the hash so that a probe reads the Summary
// only when those bits match. Keys are compared by the caller's eq, which reports
// whether the key at a position is the one sought.
type podIndex struct {
	slots []indexSlot // len is a power of two; at most two thirds are used
}

type indexSlot struct {
	tag uint32 // the high half of the key's hash
	pos int32  // position in the pod list plus one; zero marks an empty slot
}

func newPodIndex(n int) podIndex {
	size := 8
	for size < n+n/2 {
		size <<= 1
	}
	return podIndex{slots: make([]indexSlot, size)}
}

// slot returns the slot that holds the key with hash h, or the empty slot where
// it goes.
func (x podIndex) slot(h uint64, eq func(pos int) bool) *indexSlot {
	mask := uint64(len(x.slots) - 1)
	tag := uint32(h >> 32)
	for j := h & mask; ; j = (j + 1) & mask {
		s := &x.slots[j]
		if s.pos == 0 || (s.tag == tag && eq(int(s.pos-1))) {
			return s
		}
	}
}

// add records pos for the key with hash h, replacing the position of an equal key.
func (x podIndex) add(h uint64, pos int, eq func(pos int) bool) {
	*x.slot(h, eq) = indexSlot{tag: uint32(h >> 32), pos: int32(pos + 1)}
}

// find returns the position recorded for the key with hash h, if there is one.
func (x podIndex) find(h uint64, eq func(pos int) bool) (int, bool) {
	s := x.slot(h, eq)
	return int(s.pos) - 1, s.pos != 0
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
			sum = quantity.AddSat(sum, max(q.Value(), 0))
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
// modified. Rank panics if pods holds 2^30 (about a billion) pods or more.
func Rank(s Signal, l DiskLayout, pods []*v1.Pod, stats StatsFunc) []Ranked {
	if len(pods) > maxRanked {
		panic(fmt.Sprintf("eviction: ranking %d pods, more than %d", len(pods), maxRanked))
	}
	out := make([]Ranked, len(pods))
	keys := make([]rankKey, 2*len(pods)) // the keys, then the radix sort's buffer
	for i, p := range pods {
		m := measure(s, l, p, stats)
		out[i] = Ranked{Pod: p, Usage: m.toUsage()}
		keys[i] = m.key(s == SignalPIDAvailable, i)
	}
	permute(out, sortKeys(keys[:len(pods)], keys[len(pods):]))
	return out
}

// rankKey is a pod's ranking criteria, packed into 98 bits that sort ascending,
// first to evict first, and the pod's index in the input:
//
//	hi: bits 0–33 the leading criteria, bits 34–63 the index
//	lo: the last criterion
//
// Sixteen bytes rather than 24 with a separate index field: the radix sort moves
// every key about ten times.
type rankKey struct {
	hi, lo uint64
}

const (
	criteriaBits = 34 // in hi, below the index
	criteriaMask = 1<<criteriaBits - 1
	maxRanked    = 1<<(64-criteriaBits) - 1 // indexes are below maxRanked
	placed       = math.MaxUint64           // hi of a key that permute has used; its index is maxRanked
)

func (k rankKey) index() int { return int(k.hi >> criteriaBits) }

// key builds the rank key of m, the i-th pod in the input.
//
//	requests first (memory, disk): criteria = [has stats][within request][priority], lo = −(usage − request)
//	priority first (pid):          criteria = [priority][has stats],                lo = −process count
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
	criteria := stats<<33 | within<<32 | prio
	if priorityFirst {
		criteria = prio<<1 | stats
	}
	return rankKey{hi: uint64(i)<<criteriaBits | criteria, lo: lo}
}

// sortKeys sorts keys ascending by (criteria, lo), keeping the input order of
// equal keys, and returns the sorted slice: keys or buf, which must be as long.
// It leaves the indexes intact but not the criteria.
//
// It is a least-significant-digit radix sort: one stable counting pass per byte,
// lo's bytes first, then the criteria's. It never compares two keys, so it has
// none of the unpredictable branches that made slices.SortFunc the largest single
// cost of ranking 10,000 pods. The criteria and lo are first offset by their
// minimums, which keeps the order and clears the high bytes (pods' usages differ by
// far less than 2^64), and a byte that is zero in every key needs no pass: about
// 10 passes instead of 13.
func sortKeys(keys, buf []rankKey) []rankKey {
	if len(keys) < 2 {
		return keys
	}
	least := rankKey{hi: keys[0].hi & criteriaMask, lo: keys[0].lo}
	for _, k := range keys[1:] {
		least.hi, least.lo = min(least.hi, k.hi&criteriaMask), min(least.lo, k.lo)
	}
	var used rankKey // the bits set in any key, the index left out
	for i := range keys {
		keys[i].hi -= least.hi // the criteria are at least least.hi: no borrow from the index
		keys[i].lo -= least.lo
		used.hi |= keys[i].hi & criteriaMask
		used.lo |= keys[i].lo
	}
	for d := range 8 + (criteriaBits+7)/8 {
		if used.byteAt(d) == 0 {
			continue
		}
		var next [256]int32 // next[b]: where the next key with byte b goes
		for _, k := range keys {
			next[k.byteAt(d)]++
		}
		var sum int32
		for b, n := range next {
			next[b], sum = sum, sum+n
		}
		for _, k := range keys {
			b := k.byteAt(d)
			buf[next[b]] = k
			next[b]++
		}
		keys, buf = buf, keys
	}
	return keys
}

// byteAt returns byte d of the key, the index left out: lo's bytes from the least
// significant, then the criteria's.
func (k rankKey) byteAt(d int) byte {
	if d < 8 {
		return byte(k.lo >> (8 * d))
	}
	return byte((k.hi & criteriaMask) >> (8 * (d - 8)))
}

// permute reorders out in place so that out[j] becomes the element that was at
// keys[j].index(), following each cycle of the permutation once. It consumes keys.
func permute(out []Ranked, keys []rankKey) {
	for j := range keys {
		if keys[j].hi == placed {
			continue // placed as part of an earlier cycle
		}
		held := out[j]
		k := j
		for {
			from := keys[k].index()
			keys[k].hi = placed
			if from == j {
				out[k] = held
				break
			}
			out[k] = out[from]
			k = from
		}
	}
}
