package node

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// densities are the running-pod counts BenchmarkDensity measures at, in
// increasing order.
var densities = flag.String("densities", "100,250,500", "BenchmarkDensity's pod counts, increasing")

// densityPoint is one agent at one pod count, idle.
type densityPoint struct {
	pods        int
	start       time.Duration // the pods added for this point: the first placed → the last started
	cpu, rss    float64       // % of a core, MiB
	relist      float64       // mean relist duration over the window, ms
	relists     float64       // relists over the window
	cpuPerPodUS float64       // the agent's CPU per pod per second, µs: cpu ÷ pods
}

// BenchmarkDensity runs each agent on the shared containerd with 100, 250
// and 500 running pods (-densities; maxPods raised to fit) and measures,
// idle at each count: the agent's CPU and RSS, and its mean relist time
// (kubelet_pleg_relist_duration_seconds, which both agents export: one
// turn of listing the runtime and updating the pods' state from it). The
// pods are added to reach each count, never restarted; the agents run one
// after the other, every pod sandbox removed between them.
func BenchmarkDensity(b *testing.B) {
	counts, err := parseCounts(*densities)
	if err != nil {
		b.Fatal(err)
	}
	w := workload()
	if *quick {
		counts = []int{5, 10}
	}
	e := setup(b)
	guard := snapshotCgroups(b)
	res := map[string][]densityPoint{}
	for _, name := range agentsToRun() {
		if err := e.clearPods(); err != nil {
			b.Fatal(err)
		}
		removeCgroups(b, e.cgroup)
		res[name] = e.density(b, name, counts, w)
		guard.check(b, name)
	}
	if len(res) < len(agentNames) {
		return // one agent: its figures are in the log
	}
	var figs []Figure
	for i, n := range counts {
		k, nk := res["kubelet"][i], res["nodekeeper"][i]
		figs = append(figs,
			Figure{fmt.Sprintf("density%d-start-s", n), k.start.Seconds(), nk.start.Seconds()},
			Figure{fmt.Sprintf("density%d-cpu-pct", n), k.cpu, nk.cpu},
			Figure{fmt.Sprintf("density%d-rss-mib", n), k.rss, nk.rss},
			Figure{fmt.Sprintf("density%d-cpu-per-pod-us", n), k.cpuPerPodUS, nk.cpuPerPodUS},
			Figure{fmt.Sprintf("density%d-relist-ms", n), k.relist, nk.relist},
		)
	}
	for _, f := range figs {
		for unit, v := range f.Metrics() {
			b.ReportMetric(v, unit)
		}
	}
	b.Logf("load average %s\n%s", loadAverage(), Table(figs))
}

// parseCounts reads "100,250,500": increasing positive counts.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("-densities %q: want increasing positive counts such as 100,250,500", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// density runs the agent name up through counts and measures it idle at
// each; then removes every pod and stops it.
func (e *env) density(b *testing.B, name string, counts []int, w sizes) []densityPoint {
	a := e.start(b, name, fmt.Sprintf("maxPods: %d\n", counts[len(counts)-1]+10))
	defer a.stop(b)
	var names []string
	var out []densityPoint
	for _, n := range counts {
		var added []string
		first := time.Now()
		for i := len(names); i < n; i++ {
			pod := fmt.Sprintf("d%d", i)
			a.place(b, pod+".yaml", manifest(pod, false))
			added = append(added, fullName(pod))
		}
		started, _ := e.waitStarted(b, a, added, 20*time.Minute)
		var last time.Time
		for _, t := range started {
			if t.After(last) {
				last = t
			}
		}
		names = append(names, added...)
		time.Sleep(w.settle) // the start's work settles: the steady state
		p := densityPoint{pods: n, start: last.Sub(first)}
		sum0, count0 := a.relistHistogram(b)
		p.cpu, p.rss = a.idle(b, w.window)
		sum1, count1 := a.relistHistogram(b)
		if p.relists = count1 - count0; p.relists > 0 {
			p.relist = 1000 * (sum1 - sum0) / p.relists
		}
		p.cpuPerPodUS = p.cpu / 100 / float64(n) * 1e6
		b.Logf("%s: %d pods (the last %d started in %v): idle %.2f%% CPU (%.1f µs per pod per second), %.1f MiB; %.0f relists, mean %.1f ms; load %s",
			name, n, len(added), p.start.Round(time.Millisecond), p.cpu, p.cpuPerPodUS, p.rss, p.relists, p.relist, loadAverage())
		out = append(out, p)
	}
	for i := range names {
		a.remove(b, fmt.Sprintf("d%d.yaml", i))
	}
	e.waitGone(b, a, names, 20*time.Minute)
	return out
}

// relistHistogram is the agent's kubelet_pleg_relist_duration_seconds sum
// and count, from nodekeeper's socket or the kubelet's API port.
func (a *agent) relistHistogram(b *testing.B) (sum, count float64) {
	b.Helper()
	text, err := a.metrics(b.Context())
	if err != nil {
		b.Fatalf("%s: /metrics: %v", a.name, err)
	}
	sum, okSum := metricValue(text, "kubelet_pleg_relist_duration_seconds_sum")
	count, okCount := metricValue(text, "kubelet_pleg_relist_duration_seconds_count")
	if !okSum || !okCount {
		b.Fatalf("%s: /metrics has no kubelet_pleg_relist_duration_seconds", a.name)
	}
	return sum, count
}

// metrics is the agent's /metrics text.
func (a *agent) metrics(ctx context.Context) (string, error) {
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", a.port)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // the kubelet's self-signed loopback cert
	if a.socket != "" {
		url, tr = "http://localhost/metrics", &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.socket)
		}}
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(raw), nil
}

// metricValue is the value of the unlabelled sample name in a Prometheus
// text exposition.
func metricValue(text, name string) (float64, bool) {
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		return v, err == nil
	}
	return 0, false
}
