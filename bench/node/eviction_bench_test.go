package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// The eviction benchmark's memory: the hard memory.available threshold is
// set marginMiB below what is available when the agent starts, and the hog
// allocates hogMiB, well past it.
const (
	marginMiB = 500
	hogMiB    = 1000
)

// BenchmarkEviction measures (5), with each agent joined to a real
// kube-apiserver: the time from the node's memory crossing the hard
// memory.available threshold (polled by the benchmark every 10 ms from
// /proc/meminfo and the root memory cgroup: agent-neutral) to
// the agent's eviction decision (its "Eviction manager: attempting to
// reclaim" log line) and to the container's death (CRI FinishedAt). The
// threshold is
// marginMiB below the memory available when the agent starts (MemTotal less
// the root cgroup's working set, as both agents compute it);
// enforceNodeAllocatable is "none", so the pods' cgroup has no limit (the
// agents size it differently) and only the node signal counts. Each sample is
// a Burstable API pod allocating hogMiB; the kubelet cannot evict static pods
// (they are critical), so the pods come from the API server. Other processes
// of the machine move the mark: the figures are as noisy as the machine.
func BenchmarkEviction(b *testing.B) {
	e := setup(b)
	samples := 5
	if *quick {
		samples = 2
	}
	api := apiservertest.Start(b, apiservertest.Options{})
	api.Namespace(b, clusterNS)
	guard := snapshotCgroups(b)
	const root = "/sys/fs/cgroup/memory"
	type result struct{ decision, death []time.Duration }
	res := map[string]result{}
	for _, name := range agentsToRun() {
		if err := e.clearPods(); err != nil {
			b.Fatal(err)
		}
		removeCgroups(b, e.cgroup)
		m := readMemory(b, root)
		thresholdMiB := m.available()>>20 - marginMiB
		cfg := fmt.Sprintf(`enforceNodeAllocatable: ["none"]
evictionHard:
  memory.available: %dMi
evictionPressureTransitionPeriod: 1s
`, thresholdMiB)
		a := e.start(b, name, cfg, "--kubeconfig", api.NodeKubeconfig(b, nodeName), "--node-ip", api.AdvertiseAddress().String())
		c := &clusterRun{b: b, a: a, admin: api.Admin()}
		ctx, cancel := context.WithCancel(context.Background())
		seen := c.runningSeen(ctx)
		c.create(apiPod("warmup")) // the node registers; the first pod's costs
		c.wait(seen, "warmup", 3*time.Minute)
		cancel()
		c.deletePods()
		var r result
		for i := range samples {
			pod := "hog" + strconv.Itoa(i)
			c.create(hogPod(pod))
			crossed := awaitBelow(b, a, root, thresholdMiB<<20, 3*time.Minute) // the last poll above
			decided := a.decisionAfter(b, crossed, time.Minute)
			died := e.finishedAt(b, a, pod, 2*time.Minute)
			r.decision = append(r.decision, decided.Sub(crossed))
			r.death = append(r.death, died.Sub(crossed))
			c.deletePods()
		}
		a.stop(b)
		c.forgetNode()
		guard.check(b, name)
		res[name] = r
		b.Logf("%s: threshold %dMi; crossing → decision %v; → container death %v", name, thresholdMiB, r.decision, r.death)
	}
	if len(res) < len(agentNames) {
		return // one agent: its figures are in the log above
	}
	k, n := res["kubelet"], res["nodekeeper"]
	figs := []Figure{
		{"evict-decision-p50-ms", ms(Percentile(k.decision, 50)), ms(Percentile(n.decision, 50))},
		{"evict-decision-p99-ms", ms(Percentile(k.decision, 99)), ms(Percentile(n.decision, 99))},
		{"evict-death-p50-ms", ms(Percentile(k.death, 50)), ms(Percentile(n.death, 50))},
		{"evict-death-p99-ms", ms(Percentile(k.death, 99)), ms(Percentile(n.death, 99))},
	}
	for _, f := range figs {
		for unit, v := range f.Metrics() {
			b.ReportMetric(v, unit)
		}
	}
	b.Logf("load average %s\n%s", loadAverage(), Table(figs))
}

// memory is the machine's memory as the agents read it for memory.available.
type memory struct {
	total, usage, inactiveFile int64 // bytes: MemTotal; the root cgroup's usage and total_inactive_file
}

// available is memory.available: MemTotal less the root cgroup's working set.
func (m memory) available() int64 { return m.total - (m.usage - m.inactiveFile) }

// readMemory reads MemTotal and the root memory cgroup (cgroup v1 at root).
func readMemory(b *testing.B, root string) memory {
	b.Helper()
	var m memory
	m.total = memTotalMiB(b) << 20
	raw, err := os.ReadFile(filepath.Join(root, "memory.usage_in_bytes"))
	if err != nil {
		b.Fatal(err)
	}
	if m.usage, err = strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err != nil {
		b.Fatalf("memory.usage_in_bytes: %v", err)
	}
	raw, err = os.ReadFile(filepath.Join(root, "memory.stat"))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_inactive_file "); ok {
			if m.inactiveFile, err = strconv.ParseInt(v, 10, 64); err != nil {
				b.Fatalf("memory.stat: total_inactive_file %q: %v", v, err)
			}
		}
	}
	return m
}

// hogPod is a Burstable API pod bound to the node that allocates hogMiB
// and holds it.
func hogPod(name string) *v1.Pod {
	p := apiPod(name)
	p.Spec.Containers[0].Args = []string{"alloc", strconv.Itoa(hogMiB)}
	p.Spec.Containers[0].Image = ocibuild.TestboxRef
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	return p
}

// memTotalMiB is the machine's memory (MemTotal), in MiB.
func memTotalMiB(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				b.Fatalf("/proc/meminfo: MemTotal %q: %v", rest, err)
			}
			return kb >> 10
		}
	}
	b.Fatal("/proc/meminfo: no MemTotal")
	return 0
}

// awaitBelow polls the node's memory.available (every 10 ms) until it is
// below threshold bytes, and returns when it last saw it at or above: the
// crossing happened after that poll and by the next, and an agent woken by
// the kernel can decide in between, before a poll sees the crossing. Times
// measured from this onset are upper bounds, by at most one poll interval.
func awaitBelow(b *testing.B, a *agent, root string, threshold int64, d time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(d)
	above := time.Now()
	for {
		at := time.Now()
		if readMemory(b, root).available() < threshold {
			return above
		}
		above = at
		if at.After(deadline) {
			b.Fatalf("%s: memory.available not below %d within %v\nlog (tail):\n%s", a.name, threshold, d, a.tail(30))
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel's counters
	}
}

// finishedAt polls the runtime until the container of the API pod named
// has exited and returns its CRI FinishedAt.
func (e *env) finishedAt(b *testing.B, a *agent, pod string, timeout time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cs, err := e.rt.ListContainers(b.Context(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
			labelPodName: pod, "io.kubernetes.pod.namespace": clusterNS}})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cs {
			if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
			st, err := e.rt.ContainerStatus(b.Context(), c.Id, false)
			if err == nil && st.GetStatus().GetFinishedAt() != 0 {
				return time.Unix(0, st.GetStatus().GetFinishedAt())
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: pod %s's container not exited after %v\nlog (tail):\n%s", a.name, pod, timeout, a.tail(30))
		}
		time.Sleep(50 * time.Millisecond) // polling the runtime, an outside process
	}
}

// decisionAfter polls the agent's log for its first eviction decision at or
// after t.
func (a *agent) decisionAfter(b *testing.B, t time.Time, timeout time.Duration) time.Time {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		raw, err := os.ReadFile(a.logPath)
		if err != nil {
			b.Fatal(err)
		}
		if at, ok := FirstAtOrAfter(Decisions(string(raw), time.Now().Year(), time.Local), t); ok {
			return at
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s: no eviction decision logged %v after the crossing at %v\nlog (tail):\n%s", a.name, timeout, t, a.tail(30))
		case <-time.After(200 * time.Millisecond): // polling the agent's log
		}
	}
}
