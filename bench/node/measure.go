// Package node holds the side-by-side benchmarks of the real kubelet and
// nodekeeper (issue 16; docs/benchmarks.md, "Against the kubelet"): both
// agents run one after the other on one containerd, with the same
// configuration file and the same workloads, and every figure is reported
// for each agent and as the ratio kubelet ÷ nodekeeper (above 1: nodekeeper
// is ahead, as every figure is lower-is-better). Run them, as root, with
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./bench/node
//
// This file holds the pure measuring helpers; the harness is in the tests.
package node

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's utime and
// stime: 100 on every Linux architecture Go supports.
const clockTicks = 100

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of samples;
// 0 for none.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(p/100*float64(len(s)) + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
}

// StatCPU is the CPU time (utime + stime, all threads) in a /proc/PID/stat
// line.
func StatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no ')' ending the command name", stat)
	}
	// After the name: state is field 3, utime 14 and stime 15.
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: utime/stime %q: %v", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// StatusRSS is VmRSS in bytes from a /proc/PID/status text.
func StatusRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: VmRSS %q: want \"N kB\"", strings.TrimSpace(rest))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: VmRSS %q: %v", f[0], err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("status: no VmRSS line")
}

// Figure is one row of the comparison: the same measurement of both agents.
type Figure struct {
	// Name is the metric's stem, e.g. "static1-p50-ms".
	Name                string
	Kubelet, Nodekeeper float64
}

// Ratio is kubelet ÷ nodekeeper: how many times lower (better) nodekeeper's
// figure is. It is 0 when nodekeeper's figure is not above 0 (a ratio that
// would be infinite or meaningless).
func (f Figure) Ratio() float64 {
	if f.Nodekeeper <= 0 {
		return 0
	}
	return f.Kubelet / f.Nodekeeper
}

// Metrics are the figure's benchmark metrics: "kubelet-NAME",
// "nodekeeper-NAME" and "ratio-NAME", with NAME its Name.
func (f Figure) Metrics() map[string]float64 {
	return map[string]float64{
		"kubelet-" + f.Name:    f.Kubelet,
		"nodekeeper-" + f.Name: f.Nodekeeper,
		"ratio-" + f.Name:      f.Ratio(),
	}
}

// Table formats figures as a markdown table, one row each, in order.
func Table(figs []Figure) string {
	var b strings.Builder
	b.WriteString("| figure | kubelet | nodekeeper | kubelet ÷ nodekeeper |\n|---|---|---|---|\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "| %s | %.4g | %.4g | %.3g |\n", f.Name, f.Kubelet, f.Nodekeeper, f.Ratio())
	}
	return b.String()
}

// reclaimKlog is the kubelet's eviction decision in its klog text log
// ("I1124 09:26:51.663981   28401 eviction_manager.go:NNN] ..."), local time
// without a year.
var reclaimKlog = regexp.MustCompile(`(?m)^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ \S+\] "Eviction manager: attempting to reclaim"`)

// reclaimSlog is nodekeeper's, in its slog text log.
var reclaimSlog = regexp.MustCompile(`(?m)^time=(\S+) level=\w+ msg="Eviction manager: attempting to reclaim"`)

// Decisions are the instants of the eviction decisions ("attempting to
// reclaim") in an agent's log, the kubelet's klog format or nodekeeper's
// slog one, in log order. A klog line has no year: it is year's, in loc.
func Decisions(log string, year int, loc *time.Location) []time.Time {
	var out []time.Time
	for _, m := range reclaimKlog.FindAllStringSubmatch(log, -1) {
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], loc)
		if err == nil {
			out = append(out, at.AddDate(year, 0, 0))
		}
	}
	for _, m := range reclaimSlog.FindAllStringSubmatch(log, -1) {
		if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			out = append(out, at)
		}
	}
	return out
}

// FirstAtOrAfter is the first of times at or after t, at the logs'
// millisecond precision (a log line may be stamped up to 1 ms before t).
func FirstAtOrAfter(times []time.Time, t time.Time) (time.Time, bool) {
	for _, at := range times {
		if !at.Before(t.Truncate(time.Millisecond)) {
			return at, true
		}
	}
	return time.Time{}, false
}
