package node

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
)

// sizes are a run's workload: the full one, or a quick one with -short.
type sizes struct {
	singles int           // pods started one at a time (after one warm-up)
	pods    int           // pods started at once
	window  time.Duration // an idle measurement's length
	settle  time.Duration // the wait after pods start, before measuring
}

// quick selects the quick workload, to try the harness out (-short cannot:
// the API server harness skips under -short).
var quick = flag.Bool("quick", false, "a quick run with few pods and short windows, to try the harness")

// profileDir, when set, receives nodekeeper's CPU profiles over the idle
// window with the pods (nodekeeper-idle.pprof) and over the probed window
// (nodekeeper-probed.pprof), and its heap profile after the idle window
// (nodekeeper-idle.heap; its smaps_rollup goes to the log).
var profileDir = flag.String("profile", "", "write nodekeeper's heap and CPU profiles into this directory")

func workload() sizes {
	if *quick {
		return sizes{singles: 3, pods: 10, window: 10 * time.Second, settle: 5 * time.Second}
	}
	return sizes{singles: 10, pods: 100, window: 60 * time.Second, settle: 20 * time.Second}
}

// manifest is a static pod whose container serves testbox's HTTP endpoints
// on port 8080; with probes it has an HTTP liveness, readiness and startup
// probe every second.
func manifest(name string, probes bool) string {
	var p string
	if probes {
		p = `
    livenessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1}
    startupProbe: {httpGet: {path: /startupz, port: 8080}, periodSeconds: 1}`
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    args: ["serve"]%s
`, name, ocibuild.TestboxRef, p)
}

// fullName is the name an agent gives the static pod of manifest name.
func fullName(name string) string { return name + "-" + nodeName }

// agentResult is what one agent measured.
type agentResult struct {
	single, many                 []time.Duration // manifest → container started
	cpu0, rss0, cpu100, rss100   float64         // % of a core, MiB
	cpuProbed, rssProbed, probes float64         // probes: probes run in the window
	restarted                    int             // probed containers restarted in the window
}

// BenchmarkAgents runs each agent on the shared containerd and measures, in
// order: (1) static pod manifest → its container running (CRI StartedAt),
// one pod at a time and then 100 written at once; (2) idle CPU and RSS with
// 0 pods and with 100 running pods (no probes); (4) the same 100 pods with
// an HTTP liveness, readiness and startup probe each at periodSeconds 1: the
// agent's CPU over the window minus its CPU with the probe-less pods, per
// probe run. The agents run one after the other; every pod sandbox is
// removed between them.
func BenchmarkAgents(b *testing.B) {
	e := setup(b)
	w := workload()
	guard := snapshotCgroups(b)
	res := map[string]agentResult{}
	for _, name := range agentsToRun() {
		if err := e.clearPods(); err != nil {
			b.Fatal(err)
		}
		removeCgroups(b, e.cgroup)
		res[name] = e.measure(b, name, w)
		guard.check(b, name)
		b.Logf("%s: %+v", name, res[name])
	}
	if len(res) < len(agentNames) {
		return // one agent: its figures are in the log above
	}
	k, n := res["kubelet"], res["nodekeeper"]
	figs := []Figure{
		{"static1-p50-ms", ms(Percentile(k.single, 50)), ms(Percentile(n.single, 50))},
		{"static1-p99-ms", ms(Percentile(k.single, 99)), ms(Percentile(n.single, 99))},
		{fmt.Sprintf("static%d-p50-ms", w.pods), ms(Percentile(k.many, 50)), ms(Percentile(n.many, 50))},
		{fmt.Sprintf("static%d-p99-ms", w.pods), ms(Percentile(k.many, 99)), ms(Percentile(n.many, 99))},
		{"idle0-cpu-pct", k.cpu0, n.cpu0},
		{"idle0-rss-mib", k.rss0, n.rss0},
		{fmt.Sprintf("idle%d-cpu-pct", w.pods), k.cpu100, n.cpu100},
		{fmt.Sprintf("idle%d-rss-mib", w.pods), k.rss100, n.rss100},
		{"probe-cpu-us", perProbe(k, w), perProbe(n, w)},
		{fmt.Sprintf("probed%d-rss-mib", w.pods), k.rssProbed, n.rssProbed},
	}
	for _, f := range figs {
		for unit, v := range f.Metrics() {
			b.ReportMetric(v, unit)
		}
	}
	b.Logf("load average %s\n%s", loadAverage(), Table(figs))
}

// perProbe is the agent's CPU per HTTP probe in microseconds: its CPU with
// the probed pods minus its CPU with the same pods unprobed, over the probes
// run.
func perProbe(r agentResult, w sizes) float64 {
	if r.probes == 0 {
		return 0
	}
	extra := (r.cpuProbed - r.cpu100) / 100 * w.window.Seconds() // CPU seconds
	return extra / r.probes * 1e6
}

// measure runs the agent name through the workload and stops it.
func (e *env) measure(b *testing.B, name string, w sizes) agentResult {
	var r agentResult
	var extra string
	profiling := *profileDir != "" && name == "nodekeeper"
	if profiling {
		extra = "enableProfilingHandler: true\n" // served on the socket
	}
	a := e.start(b, name, extra)
	defer a.stop(b)

	// One pod at a time; the first, a warm-up, also waits out the start.
	for i := range w.singles + 1 {
		pod := fmt.Sprintf("one%d", i)
		t0 := a.place(b, pod+".yaml", manifest(pod, false))
		started, _ := e.waitStarted(b, a, []string{fullName(pod)}, 2*time.Minute)
		if i > 0 {
			r.single = append(r.single, started[fullName(pod)].Sub(t0))
		}
		a.remove(b, pod+".yaml")
		e.waitGone(b, a, []string{fullName(pod)}, 2*time.Minute)
	}
	time.Sleep(w.settle) // the removals settle
	r.cpu0, r.rss0 = a.idle(b, w.window)
	b.Logf("%s: manifest→started one at a time %v; idle with 0 pods: %.2f%% CPU, %.1f MiB", name, r.single, r.cpu0, r.rss0)

	// Many at once.
	placed := map[string]time.Time{}
	var names []string
	for i := range w.pods {
		pod := fmt.Sprintf("many%d", i)
		placed[fullName(pod)] = a.place(b, pod+".yaml", manifest(pod, false))
		names = append(names, fullName(pod))
	}
	started, _ := e.waitStarted(b, a, names, 10*time.Minute)
	for n, t := range started {
		r.many = append(r.many, t.Sub(placed[n]))
	}
	time.Sleep(w.settle) // the start's work settles: the steady state
	if profiling {
		go a.fetch(b, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(w.window.Seconds())), filepath.Join(*profileDir, name+"-idle.pprof"))
	}
	r.cpu100, r.rss100 = a.idle(b, w.window)
	if profiling {
		a.fetch(b, "/debug/pprof/heap", filepath.Join(*profileDir, name+"-idle.heap"))
		if raw, err := readFile(fmt.Sprintf("/proc/%d/smaps_rollup", a.pid())); err == nil {
			b.Logf("%s: idle with %d pods, /proc/PID/smaps_rollup:\n%s", name, w.pods, raw)
		}
	}
	b.Logf("%s: %d at once p50 %v p99 %v; idle with them: %.2f%% CPU, %.1f MiB", name, w.pods,
		Percentile(r.many, 50), Percentile(r.many, 99), r.cpu100, r.rss100)

	// The same number of pods, probed.
	for i := range w.pods {
		a.remove(b, fmt.Sprintf("many%d.yaml", i))
	}
	e.waitGone(b, a, names, 10*time.Minute)
	time.Sleep(w.settle) // the removals finish
	names = names[:0]
	for i := range w.pods {
		pod := fmt.Sprintf("probed%d", i)
		a.place(b, pod+".yaml", manifest(pod, true))
		names = append(names, fullName(pod))
	}
	_, ctrs := e.waitStarted(b, a, names, 10*time.Minute)
	time.Sleep(w.settle) // the startup probes succeed; the start's work settles
	if profiling {
		go a.fetch(b, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(w.window.Seconds())), filepath.Join(*profileDir, name+"-probed.pprof"))
	}
	r.cpuProbed, r.rssProbed = a.idle(b, w.window)
	// After startup, liveness and readiness run once a second each.
	r.probes = float64(w.pods) * 2 * w.window.Seconds()
	// A failing liveness probe restarts a container (on a loaded machine a
	// probe can time out): counted, for reading the figure next to.
	now := e.running(b)
	for _, n := range names {
		if c, ok := now[n]; !ok || c.Id != ctrs[n].Id {
			r.restarted++
		}
	}
	b.Logf("%s: %d probed pods: %.2f%% CPU, %.1f MiB; %d containers restarted or stopped under their probes",
		name, w.pods, r.cpuProbed, r.rssProbed, r.restarted)
	for i := range w.pods {
		a.remove(b, fmt.Sprintf("probed%d.yaml", i))
	}
	e.waitGone(b, a, names, 10*time.Minute)
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAverage is /proc/loadavg's first three fields, to read the figures
// next to.
func loadAverage() string {
	raw, err := readFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(raw)[:3], " ")
}
