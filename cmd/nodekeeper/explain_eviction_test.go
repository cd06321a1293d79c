package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// runCLI runs the command line and returns exit code, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func explainEvictionJSON(t *testing.T, args ...string) evictionDoc {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"explain", "eviction", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc evictionDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return doc
}

func rankedNames(r rankingJSON) []string {
	var names []string
	for _, p := range r.Pods {
		names = append(names, p.Name)
	}
	return names
}

// The seed's disk table: nodefs usage A 800M, B 1.3G, C 1.2G, D 700M, E 500M, F 1G.
func TestExplainEvictionSeedDiskExample(t *testing.T) {
	t.Parallel()
	doc := explainEvictionJSON(t, "--pods", "../../examples/eviction/disk/pods.json", "--summary", "../../examples/eviction/disk/summary.json")
	if diff := cmp.Diff([]string{"DiskPressure"}, doc.Conditions); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if len(doc.Rankings) == 0 || doc.Rankings[0].Signal != "nodefs.available" {
		t.Fatalf("rankings = %+v, want nodefs.available first", doc.Rankings)
	}
	if diff := cmp.Diff([]string{"pod-b", "pod-c", "pod-f", "pod-a", "pod-d", "pod-e"}, rankedNames(doc.Rankings[0])); diff != "" {
		t.Errorf("nodefs ranking (-want +got):\n%s", diff)
	}
	if doc.Evict == nil || doc.Evict.Name != "pod-b" || doc.Evict.Signal != "nodefs.available" {
		t.Fatalf("evict = %+v, want pod-b for nodefs.available", doc.Evict)
	}
	// 10% of 100Gi is computed as the kubelet does, with the percentage as a float32:
	// 10737418400 bytes, not 10Gi.
	if want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, available: 8Gi. "; !strings.HasPrefix(doc.Evict.Message, want) {
		t.Errorf("message = %q, want prefix %q", doc.Evict.Message, want)
	}
	if got := doc.Observations["nodefs.available"]; got != (observationJSON{Available: "8Gi", Capacity: "100Gi"}) {
		t.Errorf("nodefs observation = %+v", got)
	}
}

// The seed's memory table ranks C, A, E, B, D, F.
func TestExplainEvictionSeedMemoryExample(t *testing.T) {
	t.Parallel()
	doc := explainEvictionJSON(t, "--pods", "../../examples/eviction/memory/pods.json", "--summary", "../../examples/eviction/memory/summary.json")
	if diff := cmp.Diff([]string{"MemoryPressure"}, doc.Conditions); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	want := []thresholdJSON{{Signal: "memory.available", Operator: "LessThan", Value: "100Mi", GracePeriod: "0s"}}
	if diff := cmp.Diff(want, doc.ThresholdsMet); diff != "" {
		t.Errorf("thresholds met (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pod-c", "pod-a", "pod-e", "pod-b", "pod-d", "pod-f"}, rankedNames(doc.Rankings[0])); diff != "" {
		t.Errorf("memory ranking (-want +got):\n%s", diff)
	}
	c := doc.Rankings[0].Pods[0]
	if c.QOS != "Burstable" || c.Request != "1Gi" || !c.ExceedsRequest {
		t.Errorf("pod-c = %+v", c)
	}
	wantMsg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. Container app was using 1800000000, request is 1Gi, has larger consumption of memory. "
	if doc.Evict == nil || doc.Evict.Message != wantMsg {
		t.Errorf("evict = %+v\nwant message %q", doc.Evict, wantMsg)
	}
}

// --signal ranks pods for a signal that is not under pressure: who goes next.
func TestExplainEvictionWhoGoesNext(t *testing.T) {
	t.Parallel()
	doc := explainEvictionJSON(t, "--pods", "../../examples/eviction/disk/pods.json", "--summary", "../../examples/eviction/disk/summary.json",
		"--signal", "memory.available")
	// The met signals are ranked first, then the one asked for.
	var signals []string
	for _, r := range doc.Rankings {
		signals = append(signals, r.Signal)
	}
	want := []string{"nodefs.available", "imagefs.available", "containerfs.available", "memory.available"}
	if diff := cmp.Diff(want, signals); diff != "" {
		t.Fatalf("ranked signals (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pod-a", "pod-e", "pod-c", "pod-d", "pod-b", "pod-f"}, rankedNames(doc.Rankings[3])); diff != "" {
		t.Errorf("memory ranking (-want +got):\n%s", diff)
	}
	if doc.Evict == nil || doc.Evict.Signal != "nodefs.available" {
		t.Errorf("evict = %+v: the nodefs threshold is still met", doc.Evict)
	}
}

func TestExplainEvictionTable(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "explain", "eviction", "--pods", "../../examples/eviction/memory/pods.json",
		"--summary", "../../examples/eviction/memory/summary.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Node conditions: [MemoryPressure]", "Ranking for memory.available:", "Would evict default/pod-c"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Rank 1 is pod-c, rank 6 pod-f.
	if !regexpLine(out, `^1\s+default/pod-c\s+Burstable`) || !regexpLine(out, `^6\s+default/pod-f\s+Guaranteed`) {
		t.Errorf("ranking table wrong:\n%s", out)
	}
}

func TestExplainEvictionBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pods := "../../examples/eviction/memory/pods.json"
	summary := "../../examples/eviction/memory/summary.json"
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"missing pods flag", []string{"--summary", summary}, "--pods and --summary are required"},
		{"missing file", []string{"--pods", filepath.Join(dir, "nope.json"), "--summary", summary}, "nope.json"},
		{"malformed pods", []string{"--pods", write("bad.json", `{"kind": "List", "items": [`), "--summary", summary}, "bad.json"},
		{"pod without name", []string{"--pods", write("noname.json", `{"kind":"Pod","metadata":{}}`), "--summary", summary}, "no metadata.name"},
		{"summary without node", []string{"--pods", pods, "--summary", write("s.json", `{"pods": []}`)}, "no node stats"},
		{"unknown signal", []string{"--pods", pods, "--summary", summary, "--signal", "memory.free"}, `unknown eviction signal "memory.free"`},
		{"bad output", []string{"--pods", pods, "--summary", summary, "-o", "yaml"}, `unknown format "yaml"`},
		{"bad config", []string{"--pods", pods, "--summary", summary, "--config",
			write("k.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: abc\n")}, "memory.available"},
		{"unknown flag", []string{"--podz", pods}, "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, append([]string{"explain", "eviction"}, tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q lacks %q", errOut, tc.want)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 || strings.Contains(errOut, "goroutine") {
				t.Errorf("want one line, got %q", errOut)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    int64
		want string
	}{
		{0, "0"},
		{512, "0.5Ki"},
		{1024, "1.0Ki"},
		{80 << 20, "80.0Mi"},
		{8459072307, "7.9Gi"},
		{1800000000, "1.7Gi"},
		{1000000000, "953.7Mi"},
		{-247483648, "-236.0Mi"},
		{100 << 30, "100.0Gi"},
		{1<<30 - 1<<10, "1.0Gi"}, // 1023.999Mi rounds up to the next unit
		{math.MaxInt64, "8.0Ei"},
		{math.MinInt64, "-8.0Ei"},
	} {
		if got := humanBytes(tc.v); got != tc.want {
			t.Errorf("humanBytes(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// The observation table prints bytes in binary units with one decimal and counts
// as integers: no raw byte count beside a binary quantity.
func TestExplainEvictionTableUnits(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "explain", "eviction", "--pods", "../../examples/eviction/memory/pods.json",
		"--summary", "../../examples/eviction/memory/summary.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, re := range []string{
		`^memory\.available\s+80\.0Mi\s+7\.9Gi\s+<100Mi \(hard\) MET$`,
		`^nodefs\.available\s+60\.0Gi\s+100\.0Gi\s`,
		`^nodefs\.inodesFree\s+5000000\s+6553600\s`,
		`^pid\.available\s+4193692\s+4194304\s*$`,
		`^1\s+default/pod-c\s+Burstable\s+0\s+1\.7Gi\s+1\.0Gi\s+692\.6Mi\s+usage exceeds request$`,
		`^6\s+default/pod-f\s+Guaranteed\s+0\s+953\.7Mi\s+2\.0Gi\s+-1\.1Gi\s+usage within request$`,
	} {
		if !regexpLine(out, re) {
			t.Errorf("no line matches %s:\n%s", re, out)
		}
	}
}

// On a node without an image filesystem, nodefs, imagefs and containerfs are one
// filesystem and rank the pods identically: the ranking is printed once, under
// the three signals. A different ranking (memory) stays on its own.
func TestExplainEvictionTableSharedRanking(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "explain", "eviction", "--pods", "../../examples/eviction/disk/pods.json",
		"--summary", "../../examples/eviction/disk/summary.json", "--signal", "memory.available")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var headings []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "Ranking for ") {
			headings = append(headings, line)
		}
	}
	want := []string{"Ranking for nodefs.available, imagefs.available, containerfs.available:", "Ranking for memory.available:"}
	if diff := cmp.Diff(want, headings); diff != "" {
		t.Errorf("ranking headings (-want +got):\n%s\n%s", diff, out)
	}
	if n := len(regexp.MustCompile(`(?m)^\d+\s+default/pod-b\s`).FindAllString(out, -1)); n != 2 {
		t.Errorf("pod-b listed %d times, want 2 (one disk ranking, one memory ranking):\n%s", n, out)
	}
}
