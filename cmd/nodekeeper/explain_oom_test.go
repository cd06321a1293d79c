package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// oomJSONRow mirrors the documented -o json schema of explain oom.
type oomJSONRow struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Container   string `json:"container"`
	QOS         string `json:"qos"`
	OOMScoreAdj int    `json:"oomScoreAdj"`
}

// runExplainOOM runs "nodekeeper explain oom args..." and returns the exit code,
// stdout and stderr.
func runExplainOOM(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), append([]string{"explain", "oom"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// explainOOMJSON runs explain oom with -o json, checks it succeeded, and decodes
// the output strictly: unknown fields fail the test.
func explainOOMJSON(t *testing.T, args ...string) []oomJSONRow {
	t.Helper()
	code, out, errOut := runExplainOOM(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var rows []oomJSONRow
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return rows
}

// writeOOMFile writes content to a file in a fresh temp dir and returns its path.
func writeOOMFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const oomExample = "../../examples/oom/pods.json"

// TestExplainOOMSeedExample reproduces the seed's OOM table: four single-container
// pods on a 30Gi node, the Burstable one requesting 4Gi.
func TestExplainOOMSeedExample(t *testing.T) {
	t.Parallel()
	got := explainOOMJSON(t, "--pods", oomExample, "--memory-capacity", "30Gi")
	want := []oomJSONRow{
		{Namespace: "default", Name: "a", Container: "app", QOS: "BestEffort", OOMScoreAdj: 1000},
		{Namespace: "default", Name: "b", Container: "app", QOS: "Guaranteed", OOMScoreAdj: -997},
		{Namespace: "default", Name: "c", Container: "app", QOS: "Burstable", OOMScoreAdj: 867},
		{Namespace: "default", Name: "d", Container: "app", QOS: "BestEffort", OOMScoreAdj: 1000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("explain oom (-want +got):\n%s", diff)
	}
}

func TestExplainOOMCapacityChangesBurstableOnly(t *testing.T) {
	t.Parallel()
	got := map[string]int{}
	for _, r := range explainOOMJSON(t, "--pods", oomExample, "--memory-capacity", "8Gi") {
		got[r.Name] = r.OOMScoreAdj
	}
	// 1000 - 1000*4/8 = 500 for c; the others do not depend on capacity.
	if diff := cmp.Diff(map[string]int{"a": 1000, "b": -997, "c": 500, "d": 1000}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestExplainOOMTable(t *testing.T) {
	t.Parallel()
	code, out, errOut := runExplainOOM(t, "--pods", oomExample, "--memory-capacity", "30Gi")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, strings.Fields(line))
	}
	want := [][]string{
		{"NAMESPACE/NAME", "CONTAINER", "QOS", "REQUEST", "OOM_SCORE_ADJ"},
		{"default/a", "app", "BestEffort", "-", "1000"},
		// REQUEST in the tables' byte unit (humanBytes), not as written.
		{"default/b", "app", "Guaranteed", "2.0Gi", "-997"},
		{"default/c", "app", "Burstable", "4.0Gi", "867"},
		{"default/d", "app", "BestEffort", "-", "1000"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("table (-want +got):\n%s\noutput:\n%s", diff, out)
	}
	// tabwriter aligns the columns: every row has CONTAINER at the same offset.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := strings.Index(lines[0], "CONTAINER")
	for _, l := range lines[1:] {
		if strings.Index(l, "app") != col {
			t.Errorf("column not aligned at %d: %q", col, l)
		}
	}
}

// TestExplainOOMContainerOrder checks that init containers (sidecars included)
// come before regular ones, pods keep file order, and the sidecar cap applies.
func TestExplainOOMContainerOrder(t *testing.T) {
	t.Parallel()
	pods := writeOOMFile(t, "pods.yaml", `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  initContainers:
  - name: migrate
    image: migrate
  - name: proxy
    image: envoy
    restartPolicy: Always
  containers:
  - name: small
    image: web
    resources: {requests: {memory: 1Gi}}
  - name: big
    image: web
    resources: {requests: {memory: 4Gi}, limits: {memory: 8Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: batch, namespace: jobs}
spec:
  containers:
  - name: worker
    image: worker
    resources: {limits: {cpu: "1", memory: 2Gi}}
`)
	got := explainOOMJSON(t, "--pods", pods, "--memory-capacity", "30Gi")
	want := []oomJSONRow{
		{Namespace: "shop", Name: "web", Container: "migrate", QOS: "Burstable", OOMScoreAdj: 999},
		{Namespace: "shop", Name: "web", Container: "proxy", QOS: "Burstable", OOMScoreAdj: 967},
		{Namespace: "shop", Name: "web", Container: "small", QOS: "Burstable", OOMScoreAdj: 967},
		{Namespace: "shop", Name: "web", Container: "big", QOS: "Burstable", OOMScoreAdj: 867},
		{Namespace: "jobs", Name: "batch", Container: "worker", QOS: "Guaranteed", OOMScoreAdj: -997},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("explain oom (-want +got):\n%s", diff)
	}
}

// TestExplainOOMJSONShape pins the exact JSON: key names and order are a stable
// interface for scripts.
func TestExplainOOMJSONShape(t *testing.T) {
	t.Parallel()
	pods := writeOOMFile(t, "pod.json", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"c","namespace":"default"},
"spec":{"containers":[{"name":"app","image":"x","resources":{"requests":{"memory":"4Gi"}}}]}}`)
	code, out, errOut := runExplainOOM(t, "--pods", pods, "--memory-capacity", "30Gi", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := `[
  {
    "namespace": "default",
    "name": "c",
    "container": "app",
    "qos": "Burstable",
    "oomScoreAdj": 867
  }
]
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("json (-want +got):\n%s", diff)
	}
}

func TestExplainOOMNoContainersIsEmptyArray(t *testing.T) {
	t.Parallel()
	pods := writeOOMFile(t, "pod.json", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"empty"},"spec":{}}`)
	code, out, errOut := runExplainOOM(t, "--pods", pods, "--memory-capacity", "1Gi", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rows []oomJSONRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || rows == nil || len(rows) != 0 {
		t.Errorf("want an empty JSON array, got %q (err %v)", out, err)
	}
}

func TestExplainOOMBadInput(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.json")
	tests := []struct {
		name string
		args []string
		want []string // all must appear in the one-line stderr
	}{
		{"missing pods", []string{"--memory-capacity", "30Gi"}, []string{"--pods", "missing"}},
		{"missing capacity", []string{"--pods", oomExample}, []string{"--memory-capacity", "missing"}},
		{"bad quantity", []string{"--pods", oomExample, "--memory-capacity", "30GB"}, []string{"--memory-capacity", `"30GB"`, "not a valid quantity"}},
		{"zero capacity", []string{"--pods", oomExample, "--memory-capacity", "0"}, []string{"--memory-capacity", `"0"`, "must be positive"}},
		{"negative capacity", []string{"--pods", oomExample, "--memory-capacity", "-1Gi"}, []string{"--memory-capacity", `"-1Gi"`, "must be positive"}},
		{"huge decimal capacity", []string{"--pods", oomExample, "--memory-capacity", "1e30"}, []string{"--memory-capacity", `"1e30"`, "too large"}},
		{"huge capacity", []string{"--pods", oomExample, "--memory-capacity", "9Ei"}, []string{"--memory-capacity", `"9Ei"`, "too large"}},
		{"missing file", []string{"--pods", missing, "--memory-capacity", "30Gi"}, []string{"nope.json"}},
		{"bad pods file", []string{"--pods", writeOOMFile(t, "bad.json", `{"kind":"List","items":[`), "--memory-capacity", "30Gi"}, []string{"bad.json"}},
		{"bad output", []string{"--pods", oomExample, "--memory-capacity", "30Gi", "-o", "yaml"}, []string{"--output", `"yaml"`}},
		{"positional argument", []string{"--pods", oomExample, "--memory-capacity", "30Gi", "extra"}, []string{"extra"}},
		{"unknown flag", []string{"--capacity", "30Gi"}, []string{"unknown flag", "--capacity"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runExplainOOM(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, exitUsage, errOut)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if strings.Count(strings.TrimRight(errOut, "\n"), "\n") != 0 {
				t.Errorf("stderr is not one line: %q", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

// TestExplainDuplicateKind: a pods file whose top-level kind is given twice
// ({"kind":"Pod","kind":"List"}) is refused by explain oom and explain
// eviction with exit 2 naming the file and the key; it was read as an empty
// List and the pod dropped, exit 0.
func TestExplainDuplicateKind(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pods.json")
	pod := `{"kind":"Pod","kind":"List","apiVersion":"v1","metadata":{"name":"a","namespace":"default"},` +
		`"spec":{"containers":[{"name":"c","image":"x","resources":{"requests":{"memory":"1Gi"}}}]}}`
	if err := os.WriteFile(path, []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"explain", "oom", "--memory-capacity", "4Gi", "--pods", path},
		{"explain", "eviction", "--summary", "../../examples/eviction/memory/summary.json", "--pods", path},
	} {
		code, _, errOut := runCLI(t, args...)
		want := "nodekeeper: " + path + ": duplicate field \"kind\"\n"
		if code != exitUsage || errOut != want {
			t.Errorf("%s: exit %d, stderr %q; want exit %d, %q", args[1], code, errOut, exitUsage, want)
		}
	}
}
