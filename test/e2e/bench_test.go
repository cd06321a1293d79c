package e2e

// The agent's performance figures (docs/benchmarks.md, "Agent (nodekeeper
// run)"): how long a static pod takes from its manifest to a running
// container, how fast 100 pods start at once, and what the agent costs while
// 100 pods run. Run them with
//
//	go test -run '^$' -bench . -benchtime 1x ./test/e2e
//
// Each benchmark does its fixed amount of work once, whatever b.N is, and
// reports what it measured with b.ReportMetric; ns/op is the wall time of the
// whole run, setup included, and means nothing by itself.

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

// onePodSamples is how many times BenchmarkManifestToRunning starts a pod.
const onePodSamples = 20

// sleepManifest is a small pod whose container sleeps until stopped.
func sleepManifest(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: %s, args: ["sleep"]}
`, name, testbox)
}

// placeManifest writes a manifest aside and renames it into the manifest
// directory, returning the time just before the rename: the moment the
// manifest appears to the agent.
func placeManifest(b *testing.B, a *Agent, file, content string) time.Time {
	b.Helper()
	tmp := filepath.Join(a.Dir, file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := os.Rename(tmp, filepath.Join(a.Manifests, file)); err != nil {
		b.Fatal(err)
	}
	return t0
}

// startedAt is when the runtime started the container (CRI's StartedAt).
func startedAt(b *testing.B, rt *cri.Client, containerID string) time.Time {
	b.Helper()
	st, err := rt.ContainerStatus(b.Context(), strings.TrimPrefix(containerID, "containerd://"), false)
	if err != nil {
		b.Fatalf("container status %s: %v", containerID, err)
	}
	at := st.GetStatus().GetStartedAt()
	if at == 0 {
		b.Fatalf("container %s has no start time", containerID)
	}
	return time.Unix(0, at)
}

// pollRunning polls /pods every period until the pods named in want are all
// running, and returns when it first saw each of them running and the pods
// as last listed.
func pollRunning(b *testing.B, a *Agent, want []string, period, timeout time.Duration) (map[string]time.Time, map[string]v1.Pod) {
	b.Helper()
	seen := make(map[string]time.Time, len(want))
	last := make(map[string]v1.Pod, len(want))
	deadline := time.Now().Add(timeout)
	for {
		pods, err := a.Pods()
		now := time.Now()
		if err == nil {
			for _, p := range pods {
				if _, ok := seen[p.Name]; !ok && running(&p) {
					seen[p.Name] = now
					last[p.Name] = p
				}
			}
		}
		if len(seen) == len(want) {
			return seen, last
		}
		if now.After(deadline) {
			b.Fatalf("after %v, %d of %d pods running (last error %v)\nagent log (tail):\n%s",
				timeout, len(seen), len(want), err, tail(a.Log(), 40))
		}
		time.Sleep(period) // polling the agent, an outside process
	}
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of samples.
func percentile(samples []time.Duration, p float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(p/100*float64(len(s)) + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAverage is the 1-minute load average, for reading the figures next to.
func loadAverage(b *testing.B) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	if err != nil {
		b.Fatalf("/proc/loadavg: %v", err)
	}
	return f
}

// startBenchAgent starts an agent with the kubelet's default
// fileCheckFrequency (20 s) instead of the harness's 2 s, which is there to
// test the rescan quickly and would be most of the idle agent's work: it
// starts the agent, stops it, drops the setting from its config and starts
// it again.
func startBenchAgent(b *testing.B) *Agent {
	b.Helper()
	a := StartAgent(b, Options{})
	a.Stop(syscall.SIGTERM)
	raw, err := os.ReadFile(a.ConfigPath)
	if err != nil {
		b.Fatal(err)
	}
	cfg := strings.Replace(string(raw), "fileCheckFrequency: 2s\n", "", 1)
	if cfg == string(raw) {
		b.Fatalf("%s: no fileCheckFrequency: 2s to drop:\n%s", a.ConfigPath, raw)
	}
	if err := os.WriteFile(a.ConfigPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	a.Start()
	return a
}

// BenchmarkManifestToRunning starts one pod at a time, onePodSamples times
// (after one warm-up pod that is not counted): the time from the manifest's
// rename into the manifest directory to the container's start (CRI
// StartedAt), and to /pods showing the pod Running (polled every 10 ms).
// Each pod is removed, and gone from /pods, before the next.
// Goal: p99 <= 1 s with a local image.
func BenchmarkManifestToRunning(b *testing.B) {
	a := startBenchAgent(b)
	rt := a.CRI()
	load0 := loadAverage(b)
	var toStart, toPods []time.Duration
	for i := range onePodSamples + 1 {
		name := fmt.Sprintf("one%d", i)
		file := name + ".yaml"
		t0 := placeManifest(b, a, file, sleepManifest(name))
		full := name + "-e2e"
		seen, pods := pollRunning(b, a, []string{full}, 10*time.Millisecond, 60*time.Second)
		started := startedAt(b, rt, pods[full].Status.ContainerStatuses[0].ContainerID)
		if i > 0 {
			toStart = append(toStart, started.Sub(t0))
			toPods = append(toPods, seen[full].Sub(t0))
		}
		a.RemoveManifest(file)
		a.WaitGone(full)
	}
	load1 := loadAverage(b)
	b.Logf("manifest→StartedAt: %v", toStart)
	b.Logf("manifest→/pods Running: %v", toPods)
	b.Logf("load average (1 min) %.1f at the start, %.1f at the end", load0, load1)
	b.ReportMetric(ms(percentile(toStart, 50)), "start-p50-ms")
	b.ReportMetric(ms(percentile(toStart, 99)), "start-p99-ms")
	b.ReportMetric(ms(percentile(toPods, 50)), "pods-p50-ms")
	b.ReportMetric(ms(percentile(toPods, 99)), "pods-p99-ms")
	b.ReportMetric((load0+load1)/2, "load1")
}

// hundred is the number of pods BenchmarkHundredPods runs.
const hundred = 100

// startHundred writes hundred manifests at once and waits until all the
// pods run (polling /pods every 100 ms); it returns when each manifest was
// renamed in, when /pods first showed each pod running, and the pods.
func startHundred(b *testing.B, a *Agent) (placed, seen map[string]time.Time, pods map[string]v1.Pod) {
	b.Helper()
	placed = make(map[string]time.Time, hundred)
	want := make([]string, 0, hundred)
	for i := range hundred {
		name := fmt.Sprintf("p%03d", i)
		placed[name+"-e2e"] = placeManifest(b, a, name+".yaml", sleepManifest(name))
		want = append(want, name+"-e2e")
	}
	seen, pods = pollRunning(b, a, want, 100*time.Millisecond, 5*time.Minute)
	return placed, seen, pods
}

// BenchmarkHundredPods starts 100 pods at once (Start), then measures the
// agent while they run (Idle).
func BenchmarkHundredPods(b *testing.B) {
	a := startBenchAgent(b)
	rt := a.CRI()
	started := false
	ensure := func(b *testing.B) {
		if !started {
			startHundred(b, a)
			started = true
		}
	}

	// Start: the time from the first manifest's rename until /pods shows all
	// 100 pods running, the pods started per second over it, and the per-pod
	// time from the manifest's rename to the container's StartedAt.
	b.Run("Start", func(b *testing.B) {
		if started {
			b.Skip("the pods already run (b.N > 1); the figures are from the first run")
		}
		load0 := loadAverage(b)
		placed, seen, pods := startHundred(b, a)
		started = true
		first := slices.MinFunc(slices.Collect(maps.Values(placed)), time.Time.Compare)
		last := slices.MaxFunc(slices.Collect(maps.Values(seen)), time.Time.Compare)
		var toStart []time.Duration
		var lastStart time.Time
		for name, p := range pods {
			at := startedAt(b, rt, p.Status.ContainerStatuses[0].ContainerID)
			toStart = append(toStart, at.Sub(placed[name]))
			if at.After(lastStart) {
				lastStart = at
			}
		}
		all := last.Sub(first)
		load1 := loadAverage(b)
		b.Logf("all %d running on /pods after %v; last container started after %v", hundred, all, lastStart.Sub(first))
		b.Logf("load average (1 min) %.1f at the start, %.1f at the end", load0, load1)
		b.ReportMetric(all.Seconds(), "all-running-s")
		b.ReportMetric(hundred/all.Seconds(), "pods/s")
		b.ReportMetric(ms(percentile(toStart, 50)), "start-p50-ms")
		b.ReportMetric(ms(percentile(toStart, 99)), "start-p99-ms")
		b.ReportMetric((load0+load1)/2, "load1")
	})

	// Idle: with the 100 pods running and nothing asking the agent anything,
	// after 10 s to settle, the agent's resident memory (VmRSS) and its CPU
	// over 30 s (utime+stime over wall time, in percent of one core); the
	// same for its containerd, for context.
	b.Run("Idle", func(b *testing.B) {
		ensure(b)
		time.Sleep(10 * time.Second) // let the start's work end: an outside process's state
		agentPID, ctrdPID := a.PID(), containerdPIDOrZero(a)
		if agentPID == 0 || ctrdPID == 0 {
			b.Fatalf("agent pid %d, containerd pid %d", agentPID, ctrdPID)
		}
		load0 := loadAverage(b)
		m0 := agentMetrics(b, a) // read outside the interval: it costs the agent
		a0, c0, t0 := procCPU(b, agentPID), procCPU(b, ctrdPID), time.Now()
		time.Sleep(30 * time.Second) // the measured idle interval
		a1, c1, t1 := procCPU(b, agentPID), procCPU(b, ctrdPID), time.Now()
		m1 := agentMetrics(b, a)
		load1 := loadAverage(b)
		wall := t1.Sub(t0)
		agentMem, ctrdMem := procRSS(b, agentPID), procRSS(b, ctrdPID)
		b.Logf("agent: RSS %.1f MB (anonymous %.1f, file-backed %.1f), CPU %v over %v; containerd: RSS %.1f MB, CPU %v",
			agentMem.rss, agentMem.anon, agentMem.file, a1-a0, wall.Round(time.Millisecond), ctrdMem.rss, c1-c0)
		b.Logf("agent's Go runtime (/metrics, read after the interval): %s", goMemstats(m1))
		relists, ops := "kubelet_pleg_relist_duration_seconds_count", "kubelet_pod_worker_duration_seconds_count"
		b.Logf("during the interval: %.0f relists, %.0f pod worker operations (a resync every syncFrequency, 1 min, syncs every pod)",
			m1[relists]-m0[relists], m1[ops]-m0[ops])
		b.Logf("load average (1 min) %.1f at the start, %.1f at the end", load0, load1)
		b.ReportMetric(agentMem.rss, "agent-rss-MB")
		b.ReportMetric(agentMem.anon, "agent-anon-MB")
		b.ReportMetric(100*(a1-a0).Seconds()/wall.Seconds(), "agent-cpu-%")
		b.ReportMetric(ctrdMem.rss, "containerd-rss-MB")
		b.ReportMetric(100*(c1-c0).Seconds()/wall.Seconds(), "containerd-cpu-%")
		b.ReportMetric((load0+load1)/2, "load1")
		if path := os.Getenv(profileEnv); path != "" {
			cpuProfile(b, a, path)
		}
	})
}

// profileEnv names a file: when set, BenchmarkHundredPods/Idle, after its
// measurement, writes a CPU profile of the idle agent over profileSeconds
// there (from /debug/pprof/profile; read it with `go tool pprof`).
const (
	profileEnv     = "NODEKEEPER_BENCH_CPUPROFILE"
	profileSeconds = 60
)

// cpuProfile writes a profileSeconds CPU profile of the agent to path.
func cpuProfile(b *testing.B, a *Agent, path string) {
	b.Helper()
	resp, err := a.Client().Get(fmt.Sprintf("http://localhost/debug/pprof/profile?seconds=%d", profileSeconds))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("CPU profile: %d %v %.200q", resp.StatusCode, err, raw)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("CPU profile of %d s of idle written to %s", profileSeconds, path)
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// procCPU is the CPU time (user + system) process pid has used.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which ends at the last ')': state is
	// field 3, utime 14 and stime 15.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		b.Fatalf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// memory is a process's resident set, in MB (2^20 bytes).
type memory struct{ rss, anon, file float64 }

// procRSS is process pid's resident set: VmRSS, RssAnon and RssFile.
func procRSS(b *testing.B, pid int) memory {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	var m memory
	fields := map[string]*float64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file}
	found := 0
	for line := range strings.Lines(string(raw)) {
		for name, dst := range fields {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			f := strings.Fields(rest) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				b.Fatalf("/proc/%d/status: %s %q", pid, name, rest)
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				b.Fatalf("/proc/%d/status: %s %q", pid, name, rest)
			}
			*dst = kb / 1024
			found++
		}
	}
	if found != len(fields) {
		b.Fatalf("/proc/%d/status lacks VmRSS, RssAnon or RssFile", pid)
	}
	return m
}

// agentMetrics reads the agent's /metrics: each sample's value by metric
// name, summed over the labels.
func agentMetrics(b *testing.B, a *Agent) map[string]float64 {
	b.Helper()
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// goMemstats is a line of the agent's Go memory figures from its metrics.
func goMemstats(m map[string]float64) string {
	var out []string
	for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes",
		"go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes"} {
		out = append(out, fmt.Sprintf("%s %.1f MB", strings.TrimSuffix(strings.TrimPrefix(name, "go_memstats_"), "_bytes"), m[name]/(1<<20)))
	}
	return strings.Join(append(out, fmt.Sprintf("goroutines %.0f", m["go_goroutines"])), ", ")
}
