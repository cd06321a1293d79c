package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A ginkgo JSON report with a passed, a failed, a filtered-out and a
// suite-skipped spec, as ginkgo 2.28 writes them.
const reportJSON = `[{"SpecReports":[
 {"ContainerHierarchyTexts":["[sig-node] Probing container"],"LeafNodeText":"should be restarted","LeafNodeType":"It","State":"passed","RunTime":61000000000},
 {"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"should get a host IP","LeafNodeType":"It","State":"failed","RunTime":3200000000,"Failure":{"Message":"Timed out after 120s.\nExpected\n  <bool>: false"}},
 {"ContainerHierarchyTexts":["[sig-node] Swap"],"LeafNodeText":"with swap","LeafNodeType":"It","State":"skipped","RunTime":0},
 {"ContainerHierarchyTexts":["[sig-node] AppArmor"],"LeafNodeText":"loads","LeafNodeType":"It","State":"skipped","RunTime":1000000,"Failure":{"Message":"Only supported for node OS distro [gci ubuntu]"}},
 {"ContainerHierarchyTexts":null,"LeafNodeText":"","LeafNodeType":"SynchronizedBeforeSuite","State":"passed","RunTime":6000000000}
]}]`

func TestReadReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(reportJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, r := range res.Specs {
		got[name] = r.State + " " + r.Took.String() + " " + r.Message
	}
	want := map[string]string{
		"[sig-node] Probing container should be restarted": "passed 1m1s ",
		"[sig-node] Pods should get a host IP":             "failed 3s Timed out after 120s.",
		"[sig-node] AppArmor loads":                        "skipped 0s Only supported for node OS distro [gci ubuntu]",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// TestMergeResults: a run replaces the outcomes of the specs it ran and keeps
// the others'.
func TestMergeResults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.json")
	first := results{Agent: "kubelet", Specs: map[string]result{"a": {State: "failed"}, "b": {State: "passed"}}}
	second := results{Agent: "kubelet", Specs: map[string]result{"a": {State: "passed", Took: time.Second}}}
	for _, r := range []results{first, second} {
		if err := mergeResults(path, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := loadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	want := results{Agent: "kubelet", Specs: map[string]result{"a": {State: "passed", Took: time.Second}, "b": {State: "passed"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
}

// TestWriteReport: the document lists every spec of the set, a gap (passes
// on the kubelet, not on nodekeeper), what has not run, and a machine skip
// whose stored result (from before it was skipped) no longer counts.
func TestWriteReport(t *testing.T) {
	pull := "[sig-node] Container Runtime blackbox test when running a container with a new image [Serial] should be able to pull from private registry with secret [NodeConformance]"
	all := []string{"x passes on both", "y a gap", "z not run", pull}
	res := map[string]results{
		"kubelet":    {Specs: map[string]result{"x passes on both": {State: "passed"}, "y a gap": {State: "passed"}, pull: {State: "failed"}}},
		"nodekeeper": {Specs: map[string]result{"x passes on both": {State: "passed"}, "y a gap": {State: "failed", Message: "timed | out"}}},
	}
	var buf bytes.Buffer
	writeReport(&buf, "v1.36.3", all, res, []standIn{{Ref: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", Differs: "Debian busybox"}})
	doc := buf.String()
	for _, want := range []string{
		"| kubelet | 2 | 0 | 0 | 1 | 1 |",
		"| nodekeeper | 1 | 1 | 0 | 1 | 1 |",
		"| " + pull + " | skipped: this machine | skipped: this machine |",
		"- y a gap: failed: timed \\| out",
		"| z not run | not run | not run |",
		"| registry.k8s.io/e2e-test-images/busybox:1.37.0-1 | Debian busybox |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
}

func TestFailedFocus(t *testing.T) {
	r := results{Specs: map[string]result{
		"[sig-node] Pods should get a host IP [NodeConformance]": {State: "failed"},
		"[sig-node] Probing container should be restarted":       {State: "passed"},
		"[sig-node] AppArmor loads":                              {State: "skipped"},
		"[sig-node] X (y) works":                                 {State: "interrupted"},
		"[sig-node] Lifecycle when ordered should read the log":  {State: "failed"},
		"[sig-node] Lifecycle when ordered should read more":     {State: "failed"},
	}}
	// The two specs of an ordered container are focused as their container, once.
	ordered := map[string]string{
		"[sig-node] Lifecycle when ordered should produce a log": "[sig-node] Lifecycle when ordered",
		"[sig-node] Lifecycle when ordered should read the log":  "[sig-node] Lifecycle when ordered",
		"[sig-node] Lifecycle when ordered should read more":     "[sig-node] Lifecycle when ordered",
	}
	want := []string{`\[sig-node\] Lifecycle when ordered`, `\[sig-node\] Pods should get a host IP \[NodeConformance\]`, `\[sig-node\] X \(y\) works`}
	if diff := cmp.Diff(want, failedFocus(r, ordered)); diff != "" {
		t.Errorf("focus (-want +got):\n%s", diff)
	}
}

// TestMachineSkips: every skip is a valid regular expression with a reason;
// the private-registry pull is skipped (the agnhost stand-in's fake registry
// holds no image), and the specs that pull a stand-in with imagePullPolicy
// Always run (the run's loopback registry serves it).
func TestMachineSkips(t *testing.T) {
	for _, s := range machineSkips {
		if _, err := regexp.Compile(s.re); err != nil || s.reason == "" {
			t.Errorf("skip %q: %v, reason %q", s.re, err, s.reason)
		}
	}
	for spec, want := range map[string]bool{
		"[sig-node] Container Runtime blackbox test when running a container with a new image [Serial] should be able to pull from private registry with secret [NodeConformance]":                                                     true,
		"[sig-node] Container Runtime blackbox test when running a container with a new image [Serial] should be able to pull image [NodeConformance]":                                                                                 false,
		"[sig-node] [NodeConformance] Containers Lifecycle when A pod is running only regular containers when the regular container has its image updated should successfully restart when the image is updated, restartPolicy=Always": false,
	} {
		if got := machineSkipped(spec); got != want {
			t.Errorf("machineSkipped(%q) = %t, want %t", spec, got, want)
		}
	}
}

func TestChunks(t *testing.T) {
	names := []string{"a [x]", "b", "c", "d", "e"}
	var all []string
	for k := 1; k <= 2; k++ {
		all = append(all, chunkFocus(names, nil, k, 2)...)
	}
	slices.Sort(all)
	want := []string{`a \[x\]`, "b", "c", "d", "e"}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("chunks 1/2 and 2/2 together (-want +got):\n%s", diff)
	}
	if got := chunkFocus(names, nil, 2, 2); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("chunk 2/2 = %q, want b d", got)
	}
	// An ordered container's specs stay in one chunk, focused as the container.
	ordered := map[string]string{"b": "o", "c": "o"}
	if got := chunkFocus(names, ordered, 2, 2); !slices.Equal(got, []string{"o", "e"}) {
		t.Errorf("chunk 2/2 with b and c ordered = %q, want o e", got)
	}
	if got := chunkFocus(names, nil, 2, 2); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("chunk 2/2 = %q, want b d", got)
	}
	for _, bad := range []string{"", "3", "0/2", "3/2", "a/b", "1/0"} {
		if _, _, err := parseChunk(bad); err == nil {
			t.Errorf("parseChunk(%q) accepted", bad)
		}
	}
	if k, n, err := parseChunk("2/5"); err != nil || k != 2 || n != 5 {
		t.Errorf("parseChunk(2/5) = %d, %d, %v", k, n, err)
	}
}

// TestWithoutResult: -not-run selects the specs with no stored result, and
// never the machine's skips.
func TestWithoutResult(t *testing.T) {
	pull := "[sig-node] Container Runtime blackbox test when running a container with a new image [Serial] should be able to pull from private registry with secret [NodeConformance]"
	r := results{Specs: map[string]result{"a": {State: "failed"}, "b": {State: "passed"}}}
	got := withoutResult([]string{"a", "b", "c", pull, "d"}, r)
	if want := []string{"c", "d"}; !slices.Equal(got, want) {
		t.Errorf("withoutResult = %q, want %q", got, want)
	}
}

// TestSourceLines: an ordered container is found by its declaration line.
func TestSourceLines(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x_test.go")
	if err := os.WriteFile(f, []byte("package x\n\tginkgo.When(\"a\", ginkgo.Ordered, func() {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := sourceLines{}
	if got := s.line(f, 2); !strings.Contains(got, "Ordered") {
		t.Errorf("line 2 = %q", got)
	}
	if got := s.line(f, 9); got != "" {
		t.Errorf("line 9 = %q, want empty", got)
	}
	if got := s.line("/nonexistent", 1); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
