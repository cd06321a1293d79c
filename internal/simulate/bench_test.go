package simulate

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// largeScenario builds the benchmark scenario as a scenario file would
// hold it: 1,000 pods, 100 steps spread over 24 h of virtual time, every step a
// new Summary (memory drifting into and out of soft and hard pressure), every
// tenth step a new pod set and image list, loops on.
func largeScenario(pods, steps int, span time.Duration) []byte {
	type m = map[string]any
	podList := func(gen int) []m {
		out := make([]m, pods)
		for i := range out {
			ctr := m{"name": "app", "image": fmt.Sprintf("registry.example/app-%d:%d", i%50, gen)}
			switch i % 4 {
			case 0: // BestEffort
			case 1, 2:
				ctr["resources"] = m{"requests": m{"cpu": "100m", "memory": "256Mi"}}
			case 3:
				ctr["resources"] = m{"requests": m{"cpu": "100m", "memory": "256Mi"}, "limits": m{"cpu": "100m", "memory": "256Mi"}}
			}
			out[i] = m{
				"metadata": m{"name": fmt.Sprintf("pod-%04d", i), "namespace": "bench", "uid": fmt.Sprintf("uid-%d-%04d", gen, i)},
				"spec":     m{"priority": i % 3 * 100, "containers": []m{ctr}},
			}
		}
		return out
	}
	summary := func(gen, step int) m {
		var ps []m
		var used uint64
		for i := range pods {
			ws := uint64(64+(i*7+step*13)%300) << 20
			used += ws
			ps = append(ps, m{
				"podRef": m{"name": fmt.Sprintf("pod-%04d", i), "namespace": "bench", "uid": fmt.Sprintf("uid-%d-%04d", gen, i)},
				"memory": m{"workingSetBytes": ws},
				"containers": []m{{"name": "app", "memory": m{"workingSetBytes": ws},
					"rootfs": m{"usedBytes": 10 << 20, "inodesUsed": 100}, "logs": m{"usedBytes": 1 << 20, "inodesUsed": 2}}},
			})
		}
		capacity := used + 2<<30
		avail := capacity - used
		if step%7 == 3 { // pressure now and then
			avail = 300 << 20
		}
		return m{
			"node": m{"nodeName": "bench",
				"memory": m{"availableBytes": avail, "workingSetBytes": capacity - avail},
				"fs":     m{"availableBytes": 400 << 30, "capacityBytes": 1 << 40, "inodesFree": 50_000_000, "inodes": 60_000_000},
				"rlimit": m{"maxpid": 4_194_304, "curproc": 5000}},
			"pods": ps,
		}
	}
	images := func(gen int) []m {
		var out []m
		for i := range 50 {
			out = append(out, m{"id": fmt.Sprintf("sha256:%04d%04d", gen, i), "repoTags": []string{fmt.Sprintf("registry.example/app-%d:%d", i, gen)}, "size": "100000000"})
		}
		return out
	}
	var st []m
	for s := range steps {
		at := time.Duration(int64(span) * int64(s) / int64(steps))
		step := m{"at": at.String()}
		gen := s / 10
		if s%10 == 0 {
			step["pods"] = podList(gen)
			step["images"] = images(gen)
			step["imageFs"] = m{"capacityBytes": 100 << 30, "availableBytes": 20 << 30}
		}
		step["summary"] = summary(gen, s)
		st = append(st, step)
	}
	doc := m{
		"config": m{
			"evictionHard":            m{"memory.available": "100Mi"},
			"evictionSoft":            m{"memory.available": "500Mi"},
			"evictionSoftGracePeriod": m{"memory.available": "1m"},
		},
		"node":  m{"capacity": m{"cpu": "64", "memory": "512Gi", "pods": "1100"}},
		"loops": true,
		"steps": st,
		"until": span.String(),
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkScenario1000Pods24h is the performance target: a scenario with
// 1,000 pods and 100 steps over 24 h of virtual time, parsed and played, in under
// 10 s.
func BenchmarkScenario1000Pods24h(b *testing.B) {
	data := largeScenario(1000, 100, 24*time.Hour)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var events int
	for b.Loop() {
		sc, err := Parse("bench.json", data)
		if err != nil {
			b.Fatal(err)
		}
		ev, err := Run(b.Context(), sc, nil)
		if err != nil {
			b.Fatal(err)
		}
		events = len(ev)
	}
	b.ReportMetric(float64(events), "events")
}

// The benchmark scenario is valid and produces decisions (a smaller version, so
// the test stays quick).
func TestLargeScenarioPlays(t *testing.T) {
	t.Parallel()
	sc, err := Parse("bench.json", largeScenario(100, 20, 4*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var evicted int
	for _, e := range events {
		if e.Event == EventEvicted {
			evicted++
		}
	}
	if evicted == 0 {
		t.Errorf("no eviction in %d events", len(events))
	}
}
