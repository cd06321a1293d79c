package eviction

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// benchNode builds n realistic pods and a Summary for them: two containers each
// (app and sidecar) with memory and ephemeral-storage requests in a QoS mix,
// priorities spread over a few classes, an emptyDir and a configMap volume, and
// stats for 95% of the pods (working set, rootfs, logs, volumes, processes).
// The generator is seeded, so every run ranks the same node.
func benchNode(n int) ([]*v1.Pod, *statsapi.Summary) {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	priorities := []int32{-100, 0, 0, 0, 1000, 10000, 100000}
	mebi := func(v int) string { return fmt.Sprintf("%dMi", v) }
	pods := make([]*v1.Pod, n)
	b := newSummary().memory("200Mi", "60Gi").nodeFs(fsInfo("500Gi", "20Gi", 30000000, 1000000))
	for i := range n {
		name := fmt.Sprintf("pod-%05d", i)
		var app, sidecar podOpt
		switch i % 4 {
		case 0: // BestEffort
			app, sidecar = withContainer("app", nil, nil), withContainer("sidecar", nil, nil)
		case 1: // Guaranteed
			r := resources("cpu", "250m", "memory", mebi(256+rng.IntN(2048)), "ephemeral-storage", mebi(512+rng.IntN(4096)))
			s := resources("cpu", "50m", "memory", "64Mi", "ephemeral-storage", "128Mi")
			app, sidecar = withContainer("app", r, r), withContainer("sidecar", s, s)
		default: // Burstable
			app = withContainer("app", resources("memory", mebi(128+rng.IntN(1024)), "ephemeral-storage", mebi(256+rng.IntN(2048))),
				resources("memory", mebi(2048+rng.IntN(2048))))
			sidecar = withContainer("sidecar", resources("memory", "32Mi"), nil)
		}
		pod := newTestPod(name, app, sidecar,
			withPriority(priorities[rng.IntN(len(priorities))]),
			withEmptyDir("scratch", v1.StorageMediumDefault, ""),
			withVolume("config", srcConfigMap))
		pods[i] = pod
		if rng.IntN(20) == 0 {
			continue // no stats yet, as for a pod that just started
		}
		appWS, sideWS := 64+rng.IntN(3000), 8+rng.IntN(100)
		b.pods(newPodStats(pod,
			podWorkingSet(mebi(appWS+sideWS)),
			ctrWorkingSet("app", mebi(appWS)), ctrWorkingSet("sidecar", mebi(sideWS)),
			ctrRootfs("app", mebi(rng.IntN(3000)), uint64(rng.IntN(50000))),
			ctrLogs("app", mebi(rng.IntN(500)), uint64(rng.IntN(100))),
			ctrRootfs("sidecar", mebi(rng.IntN(100)), uint64(rng.IntN(1000))),
			ctrLogs("sidecar", mebi(rng.IntN(50)), uint64(rng.IntN(10))),
			volumeUsage("scratch", mebi(rng.IntN(2000)), uint64(rng.IntN(10000))),
			volumeUsage("config", "4Ki", 3),
			processes(uint64(1+rng.IntN(200))),
		))
	}
	return pods, b.build()
}

// benchRank reports two figures: "pass" builds the StatsFunc from the Summary and
// ranks, as each eviction pass does; "rank" ranks with a StatsFunc built once.
func benchRank(b *testing.B, s Signal, n int) {
	pods, summary := benchNode(n)
	b.Run("pass", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			ranked := Rank(s, NoImageFs, pods, PodStatsFunc(summary.Pods))
			if len(ranked) != n {
				b.Fatalf("ranked %d pods, want %d", len(ranked), n)
			}
		}
	})
	b.Run("rank", func(b *testing.B) {
		stats := PodStatsFunc(summary.Pods)
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			ranked := Rank(s, NoImageFs, pods, stats)
			if len(ranked) != n {
				b.Fatalf("ranked %d pods, want %d", len(ranked), n)
			}
		}
	})
}

// reportCPU, deferred, reports cpu-ns/op: the process's CPU time (user and
// system, GC workers included) per iteration. On a shared machine time/op also
// counts the time other processes hold the CPU; cpu-ns/op does not.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The sizes: the kubelet's default maxPods (110), a dense node (1,000) and, for
// reference, 10,000.
func BenchmarkRankMemory110(b *testing.B) { benchRank(b, SignalMemoryAvailable, 110) }
func BenchmarkRankMemory1k(b *testing.B)  { benchRank(b, SignalMemoryAvailable, 1_000) }
func BenchmarkRankMemory10k(b *testing.B) { benchRank(b, SignalMemoryAvailable, 10_000) }
func BenchmarkRankNodeFs110(b *testing.B) { benchRank(b, SignalNodeFsAvailable, 110) }
func BenchmarkRankNodeFs1k(b *testing.B)  { benchRank(b, SignalNodeFsAvailable, 1_000) }
func BenchmarkRankNodeFs10k(b *testing.B) { benchRank(b, SignalNodeFsAvailable, 10_000) }

// BenchmarkPodStatsFunc10k is the stats part of a pass: it indexes the Summary and
// looks up every pod. The 5% of pods without stats make it build the
// namespace/name index as well.
func BenchmarkPodStatsFunc10k(b *testing.B) {
	pods, summary := benchNode(10_000)
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		stats := PodStatsFunc(summary.Pods)
		for _, p := range pods {
			stats(p)
		}
	}
}

// TestBenchNodeRanks guards the benchmark fixture: the pods rank without error,
// pods without stats come first, and the order is the same on every call.
func TestBenchNodeRanks(t *testing.T) {
	t.Parallel()
	pods, summary := benchNode(500)
	for _, s := range []Signal{SignalMemoryAvailable, SignalNodeFsAvailable} {
		first := names(Rank(s, NoImageFs, pods, PodStatsFunc(summary.Pods)))
		second := names(Rank(s, NoImageFs, pods, PodStatsFunc(summary.Pods)))
		if len(first) != len(pods) {
			t.Fatalf("%s: ranked %d pods, want %d", s, len(first), len(pods))
		}
		for i := range first {
			if first[i] != second[i] {
				t.Fatalf("%s: ranking differs between calls at %d: %s vs %s", s, i, first[i], second[i])
			}
		}
		ranked := Rank(s, NoImageFs, pods, PodStatsFunc(summary.Pods))
		seenStats := false
		for _, r := range ranked {
			if r.Usage.HasStats {
				seenStats = true
			} else if seenStats {
				t.Fatalf("%s: pod %s without stats ranked after a pod with stats", s, r.Pod.Name)
			}
		}
		if want := len(pods) - len(summary.Pods); want == 0 {
			t.Fatalf("fixture has no pods without stats")
		}
	}
}
