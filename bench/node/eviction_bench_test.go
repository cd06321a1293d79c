package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/apiservertest"
	"github.com/nodekeeper/nodekeeper/internal/ocibuild"
)

// The eviction benchmark's memory: the pods may use podsMiB before the hard
// threshold thresholdMiB of allocatableMemory.available is crossed (at
// podsMiB - thresholdMiB of the pods' usage); the hog allocates hogMiB.
const (
	podsMiB      = 900
	thresholdMiB = 300
	hogMiB       = 650
)

// BenchmarkEviction measures (5), with each agent joined to a real
// kube-apiserver: the time from the pods' memory usage crossing the hard
// eviction threshold's mark (an eventfd of the benchmark's own on the
// kubepods memory cgroup: agent-neutral) to the agent's eviction decision
// (its "Eviction manager: attempting to reclaim" log line) and to the memory
// being released (the same eventfd, as usage falls back below the mark: the
// container died). The node's memory is made small with kubeReserved, so
// other processes of the machine do not matter: allocatable memory is
// podsMiB with a thresholdMiB memory.available threshold. Each sample is a
// Burstable API pod allocating hogMiB; the kubelet cannot evict static pods
// (they are critical), so the pods come from the API server.
func BenchmarkEviction(b *testing.B) {
	e := setup(b)
	samples := 5
	if *quick {
		samples = 2
	}
	api := apiservertest.Start(b, apiservertest.Options{})
	api.Namespace(b, clusterNS)
	guard := snapshotCgroups(b)
	memTotal := memTotalMiB(b)
	cfg := fmt.Sprintf(`kubeReserved:
  memory: %dMi
evictionHard:
  memory.available: %dMi
evictionPressureTransitionPeriod: 1s
`, memTotal-podsMiB-thresholdMiB, thresholdMiB)
	type result struct{ decision, death []time.Duration }
	res := map[string]result{}
	for _, name := range agentNames {
		if err := e.clearPods(); err != nil {
			b.Fatal(err)
		}
		removeCgroups(b, e.cgroup)
		a := e.start(b, name, cfg, "--kubeconfig", api.NodeKubeconfig(b, nodeName), "--node-ip", api.AdvertiseAddress().String())
		c := &clusterRun{b: b, a: a, admin: api.Admin()}
		kubepods := filepath.Join("/sys/fs/cgroup/memory", e.cgroup, "kubepods")
		waitDir(b, a, kubepods, time.Minute)
		var r result
		for i := range samples {
			efd, closeFD := usageThreshold(b, kubepods, (podsMiB-thresholdMiB)<<20)
			pod := "hog" + strconv.Itoa(i)
			c.create(hogPod(pod))
			crossed := awaitFD(b, a, efd, 3*time.Minute)
			buf := make([]byte, 8)
			_, _ = unix.Read(efd, buf)
			released := awaitFD(b, a, efd, 2*time.Minute)
			closeFD()
			decided := a.decisionAfter(b, crossed, time.Minute)
			r.decision = append(r.decision, decided.Sub(crossed))
			r.death = append(r.death, released.Sub(crossed))
			c.deletePods()
		}
		a.stop(b)
		c.forgetNode()
		guard.check(b, name)
		res[name] = r
		b.Logf("%s: crossing → decision %v; → memory released %v", name, r.decision, r.death)
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

// waitDir polls until dir exists (the agent made it).
func waitDir(b *testing.B, a *agent, dir string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(dir); err == nil {
			return
		} else if !errors.Is(err, fs.ErrNotExist) {
			b.Fatal(err)
		}
		a.alive(b)
		if time.Now().After(deadline) {
			b.Fatalf("%s: no %s after %v\nlog (tail):\n%s", a.name, dir, timeout, a.tail(30))
		}
		time.Sleep(100 * time.Millisecond) // polling for the agent's work
	}
}

// usageThreshold registers an eventfd on the cgroup v1 memory cgroup dir at
// usage bytes: it becomes readable when the usage crosses the mark, either
// way.
func usageThreshold(b *testing.B, dir string, usage int64) (efd int, closeFn func()) {
	b.Helper()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	ufd, err := unix.Open(filepath.Join(dir, "memory.usage_in_bytes"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), fmt.Appendf(nil, "%d %d %d", efd, ufd, usage), 0); err != nil {
		b.Fatal(err)
	}
	return efd, func() { unix.Close(efd); unix.Close(ufd) }
}

// awaitFD waits up to d for fd to be readable and returns when it was.
func awaitFD(b *testing.B, a *agent, fd int, d time.Duration) time.Time {
	b.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(p, int(d/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		at := time.Now()
		if err != nil || n != 1 {
			b.Fatalf("%s: the pods' usage did not cross the mark within %v (%d, %v)\nlog (tail):\n%s", a.name, d, n, err, a.tail(30))
		}
		return at
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
