package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// kubepodsThreshold registers an eventfd of its own on the agent's kubepods
// memory cgroup (cgroup v1) at usage bytes: an observer, independent of the
// agent, of when the pods' usage crosses the mark.
func kubepodsThreshold(b *testing.B, a *Agent, usage int64) (efd int, closeFn func()) {
	b.Helper()
	dir := filepath.Join("/sys/fs/cgroup/memory", a.CgroupRoot, "kubepods")
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	ufd, err := unix.Open(filepath.Join(dir, "memory.usage_in_bytes"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(fmt.Sprintf("%d %d %d", efd, ufd, usage)), 0); err != nil {
		b.Fatal(err)
	}
	return efd, func() { unix.Close(efd); unix.Close(ufd) }
}

// watchCrossing starts watching, independent of the agent, for the pods'
// memory crossing mark bytes: on cgroup v1 through an eventfd threshold of
// its own on the kubepods cgroup's usage (kubepodsThreshold); on v2, which
// has no usage threshold, by reading the kubepods cgroup's working set
// (memory.current less inactive_file) every 5ms, so that the crossing it
// reports is late by at most that. await waits up to d and returns when the
// crossing was seen.
func watchCrossing(b *testing.B, a *Agent, mark int64) (await func(d time.Duration) time.Time, closeFn func()) {
	b.Helper()
	if integration.CgroupVersion() != 2 {
		efd, closeFD := kubepodsThreshold(b, a, mark)
		return func(d time.Duration) time.Time { return awaitFD(b, efd, d) }, closeFD
	}
	dir := filepath.Join("/sys/fs/cgroup", a.CgroupRoot, "kubepods")
	return func(d time.Duration) time.Time {
		b.Helper()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		deadline := time.Now().Add(d)
		for now := range t.C {
			if ws, err := workingSet(dir); err == nil && ws >= mark {
				return time.Now()
			}
			if now.After(deadline) {
				break
			}
		}
		b.Fatalf("the pods' working set did not cross %d MiB within %v", mark>>20, d)
		return time.Time{}
	}, func() {}
}

// workingSet is the working set of the cgroup v2 cgroup dir: memory.current
// less inactive_file.
func workingSet(dir string) (int64, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, err
	}
	cur, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, err
	}
	raw, err = os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "inactive_file "); ok {
			inactive, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, err
			}
			return cur - inactive, nil
		}
	}
	return cur, nil
}

// awaitFD waits up to d for fd to be readable and returns when it was.
func awaitFD(b *testing.B, fd int, d time.Duration) time.Time {
	b.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, int(d/time.Millisecond))
	at := time.Now()
	if err != nil || n != 1 {
		b.Fatalf("the pods' usage did not cross the mark within %v (%d, %v)", d, n, err)
	}
	return at
}

// mechanisms matches the pressure notifier's start line's mechanisms.
var mechanisms = regexp.MustCompile(`mechanisms=(\S+)`)

// mechanismsOf returns the mechanisms the agent's notifier started with.
func mechanismsOf(log string) string {
	if m := mechanisms.FindStringSubmatch(log); m != nil {
		return m[1]
	}
	return "(not logged)"
}

var passLine = regexp.MustCompile(`(?m)^time=(\S+) level=WARN msg="Eviction manager: attempting to reclaim" .*signal=allocatableMemory.available`)

// decisionAfter returns the time of the first eviction decision the agent
// logged at or after t (log times have millisecond precision).
func decisionAfter(log string, t time.Time) (time.Time, bool) {
	for _, m := range passLine.FindAllStringSubmatch(log, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err == nil && !at.Before(t.Truncate(time.Millisecond)) {
			return at, true
		}
	}
	return time.Time{}, false
}

// BenchmarkMemoryPressureReaction measures, on a live agent, the time from
// the pods' memory usage crossing the hard threshold's mark (seen by an
// eventfd of the benchmark's own on the kubepods cgroup on cgroup v1, by a
// 5ms poll of its working set on v2: watchCrossing) to the eviction
// manager's decision (its "attempting to reclaim" log line). The pods' cgroup
// is limited to 900Mi with a 300Mi threshold; each run starts a static pod
// allocating 700Mi and removes it. Run it as
//
//	go test ./test/e2e -run '^$' -bench MemoryPressureReaction -benchtime 10x
//
// Static pods are critical, so the decision is "cannot evict"; see
// BenchmarkMemoryPressureEviction for an evictable pod and its death.
func BenchmarkMemoryPressureReaction(b *testing.B) {
	const podsMiB, thresholdMiB = 900, 300
	a := StartAgent(b, Options{Config: smallPodsConfig(b, podsMiB, thresholdMiB, "1s")})
	mark := int64(podsMiB-thresholdMiB) << 20
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		await, closeFD := watchCrossing(b, a, mark)
		name := "hog" + strconv.Itoa(i)
		a.WriteManifest(name+".yaml", allocManifest(name, 700))
		crossed := await(90 * time.Second)
		closeFD()
		var decided time.Time
		a.Eventually("the eviction decision", 30*time.Second, func() (bool, string) {
			var ok bool
			decided, ok = decisionAfter(a.Log(), crossed)
			return ok, "not logged"
		})
		lat = append(lat, decided.Sub(crossed))
		a.RemoveManifest(name + ".yaml")
		a.WaitGone(name + "-e2e")
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	var s []string
	for _, d := range lat {
		s = append(s, d.Round(time.Millisecond).String())
	}
	b.Logf("crossing to decision, sorted: %s (cgroup v%d; mechanisms: %s)", strings.Join(s, " "), integration.CgroupVersion(), mechanismsOf(a.Log()))
	b.ReportMetric(float64(pct(0.5).Milliseconds()), "ms-median")
	b.ReportMetric(float64(pct(0.9).Milliseconds()), "ms-p90")
}

// BenchmarkIdleCPU measures the agent's CPU time while idle (no pods) with
// the pressure notifier on, over 20s per run:
//
//	go test ./test/e2e -run '^$' -bench IdleCPU -benchtime 1x
func BenchmarkIdleCPU(b *testing.B) {
	a := StartAgent(b, Options{})
	a.mu.Lock()
	pid := a.cmd.Process.Pid
	a.mu.Unlock()
	for b.Loop() {
		before := cpuTicks(b, pid)
		start := time.Now()
		time.Sleep(20 * time.Second) // the measurement window, not a wait for a goroutine
		used := time.Duration(cpuTicks(b, pid)-before) * 10 * time.Millisecond
		b.ReportMetric(100*used.Seconds()/time.Since(start).Seconds(), "%cpu")
	}
}

// cpuTicks returns the user and system clock ticks (100 Hz) of process pid.
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return u + s
}

// evictLine matches the eviction manager's "evicting pod" line for a pod.
func evictedAt(log, pod string, t time.Time) (time.Time, bool) {
	re := regexp.MustCompile(`(?m)^time=(\S+) level=INFO msg="Eviction manager: evicting pod" .*pod=default/` + regexp.QuoteMeta(pod) + ` `)
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err == nil && !at.Before(t.Truncate(time.Millisecond)) {
			return at, true
		}
	}
	return time.Time{}, false
}

// BenchmarkMemoryPressureEviction is BenchmarkMemoryPressureReaction with an
// ordinary (evictable) Burstable pod allocating 650Mi: it measures the time
// from the crossing to the decision to evict that pod (its "evicting pod"
// log line) and to its memory being released (the pods' usage crossing back
// below the mark, seen by the same eventfd: the container is dead and its
// memory freed).
//
//	go test ./test/e2e -run '^$' -bench MemoryPressureEviction -benchtime 10x
func BenchmarkMemoryPressureEviction(b *testing.B) {
	const podsMiB, thresholdMiB = 900, 300
	a := StartAgent(b, Options{Config: smallPodsConfig(b, podsMiB, thresholdMiB, "1s")})
	mark := int64(podsMiB-thresholdMiB) << 20
	var toDecision, toDeath []time.Duration
	buf := make([]byte, 8)
	for i := 0; b.Loop(); i++ {
		efd, closeFD := kubepodsThreshold(b, a, mark)
		name := "hog" + strconv.Itoa(i)
		a.applyLocal(localPod(name, "Burstable", `["alloc", "650"]`, ""))
		crossed := awaitFD(b, efd, 90*time.Second)
		_, _ = unix.Read(efd, buf)
		released := awaitFD(b, efd, 90*time.Second)
		closeFD()
		var decided time.Time
		a.Eventually("the eviction", 30*time.Second, func() (bool, string) {
			var ok bool
			decided, ok = evictedAt(a.Log(), name, crossed)
			return ok, "not logged"
		})
		toDecision = append(toDecision, decided.Sub(crossed))
		toDeath = append(toDeath, released.Sub(crossed))
		a.WaitPod(name, "evicted", evicted)
		a.deleteLocal(name)
		a.WaitGone(name)
	}
	report := func(what, unit string, lat []time.Duration) {
		slices.Sort(lat)
		var s []string
		for _, d := range lat {
			s = append(s, d.Round(time.Millisecond).String())
		}
		b.Logf("%s, sorted: %s", what, strings.Join(s, " "))
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), unit+"-median")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*9/10)].Milliseconds()), unit+"-p90")
	}
	report("crossing to the eviction decision", "ms-decision", toDecision)
	report("crossing to the memory released", "ms-death", toDeath)
}
