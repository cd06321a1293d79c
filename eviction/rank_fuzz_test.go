package eviction

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// referenceOrder is the ranking's documented order as a plain comparator over
// what the ranking saw (Usage), kept apart from Rank's own comparators: what
// Rank must reproduce.
func referenceOrder(s Signal, a, b Usage) int {
	hasStats := func(u Usage) int { return map[bool]int{false: 0, true: 1}[u.HasStats] }
	if s == SignalPIDAvailable {
		return cmp.Or(
			cmp.Compare(a.Priority, b.Priority),
			cmp.Compare(hasStats(a), hasStats(b)),
			cmp.Compare(b.Usage, a.Usage),
		)
	}
	exceeds := func(u Usage) int { return map[bool]int{true: 0, false: 1}[u.ExceedsRequest] }
	return cmp.Or(
		cmp.Compare(hasStats(a), hasStats(b)),
		cmp.Compare(exceeds(a), exceeds(b)),
		cmp.Compare(a.Priority, b.Priority),
		cmp.Compare(b.Usage-b.Request, a.Usage-a.Request),
	)
}

// FuzzRank builds up to 64 pods from the input (priority, request, usage,
// whether there are stats, drawn from small sets with extremes so that ties are
// common) and checks Rank against a stable sort with referenceOrder.
func FuzzRank(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte("ties everywhere ties everywhere ties everywhere"))
	f.Add(binary.LittleEndian.AppendUint64(nil, math.MaxUint64))
	mixed := make([]byte, 256) // 64 varied pods
	x := uint32(2463534242)
	for i := range mixed {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		mixed[i] = byte(x >> 24)
	}
	f.Add(mixed)
	priorities := []int32{math.MinInt32, -1, 0, 1, 1000, 2_000_000_000, math.MaxInt32}
	amounts := []int64{0, 1, 100 << 20, 1 << 30, 1<<30 + 1, 1 << 40, math.MaxInt64 / 4}
	f.Fuzz(func(t *testing.T, data []byte) {
		var pods []*v1.Pod
		var stats []statsapi.PodStats
		for i := 0; i+4 <= len(data) && len(pods) < 64; i += 4 {
			prio, req, use, flags := data[i], data[i+1], data[i+2], data[i+3]
			p := newTestPod(fmt.Sprintf("p%02d", len(pods)), withPriority(priorities[int(prio)%len(priorities)]), bestEffort())
			request := amounts[int(req)%len(amounts)]
			if flags&1 != 0 {
				p.Spec.Containers[0].Resources.Requests = v1.ResourceList{
					v1.ResourceMemory:           *resource.NewQuantity(request, resource.BinarySI),
					v1.ResourceEphemeralStorage: *resource.NewQuantity(request, resource.BinarySI),
				}
			}
			pods = append(pods, p)
			if flags&2 != 0 {
				continue // no stats
			}
			usage := uint64(amounts[int(use)%len(amounts)])
			stats = append(stats, newPodStats(p,
				func(ps *statsapi.PodStats) { ps.Memory = &statsapi.MemoryStats{WorkingSetBytes: u64p(usage)} },
				func(ps *statsapi.PodStats) {
					containerStats(ps, "c").Rootfs = &statsapi.FsStats{UsedBytes: u64p(usage), InodesUsed: u64p(usage)}
				},
				processes(usage)))
		}
		statsFn := PodStatsFunc(stats)
		for _, s := range []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalPIDAvailable} {
			got := Rank(s, NoImageFs, pods, statsFn)
			want := slices.Clone(got)
			slices.SortStableFunc(want, func(a, b Ranked) int { return cmp.Compare(indexOf(pods, a.Pod), indexOf(pods, b.Pod)) })
			slices.SortStableFunc(want, func(a, b Ranked) int { return referenceOrder(s, a.Usage, b.Usage) })
			if !slices.Equal(names(got), names(want)) {
				t.Fatalf("Rank(%s) = %v, want %v", s, names(got), names(want))
			}
		}
	})
}

func indexOf(pods []*v1.Pod, p *v1.Pod) int { return slices.Index(pods, p) }

// Requests that each fit an int64 but not their sum saturate instead of
// wrapping negative (which would rank the pod as far over its request).
func TestPodRequestSaturates(t *testing.T) {
	t.Parallel()
	p := newTestPod("huge", withContainer("a", resources("memory", "5Ei"), nil), withContainer("b", resources("memory", "5Ei"), nil))
	if got := podRequest(p, v1.ResourceMemory); got != math.MaxInt64 {
		t.Errorf("podRequest = %d, want math.MaxInt64", got)
	}
}
