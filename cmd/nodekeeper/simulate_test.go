package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulateExampleJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "simulate", "-o", "json", "../../examples/scenarios/critical-preemption.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if _, ok := rec["at"].(string); !ok {
			t.Errorf("line %q has no at", line)
		}
		kinds = append(kinds, rec["event"].(string)+" "+rec["name"].(string))
	}
	want := "Preempted api-1,Admitted etcd-worker-1,Rejected api-3"
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("events = %s, want %s", got, want)
	}
}

func TestSimulateBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("until: 1m\nsteps: [{at: 0s, pods: [{spec: {}}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The memory-pressure example with one mistake each, as issue 7 lists them.
	example, err := os.ReadFile("../../examples/scenarios/memory-pressure.yaml")
	if err != nil {
		t.Fatal(err)
	}
	variant := func(file, old, new string) string {
		if !strings.Contains(string(example), old) {
			t.Fatalf("memory-pressure.yaml has no %q", old)
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(strings.Replace(string(example), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	typo := variant("typo.yaml", "memory: {availableBytes: 419430400", "memory: {availableByts: 419430400")
	negCapacity := variant("negcap.yaml", "memory: 8Gi", "memory: -8Gi")
	negUntil := variant("neguntil.yaml", "until: 5m", "until: -1m")
	maxUntil := variant("maxuntil.yaml", "until: 5m", "until: 2562047h47m16.854775807s")
	huge := variant("huge.yaml", "memory: {availableBytes: 419430400", "memory: {availableBytes: 18446744073709551615")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pod without name", []string{"simulate", bad}, "bad.yaml: steps[0].pods: items[0]: pod has no metadata.name"},
		{"unknown summary field", []string{"simulate", typo}, `typo.yaml: steps[1].summary: unknown field "node.memory.availableByts"`},
		{"negative capacity", []string{"simulate", negCapacity}, `negcap.yaml: node.capacity[memory]: "-8Gi": must not be negative`},
		{"negative until", []string{"simulate", negUntil}, `neguntil.yaml: until: "-1m": want a non-negative duration`},
		{"summary gauge beyond int64", []string{"simulate", huge}, `huge.yaml: steps[1].summary: node.memory.availableBytes: 18446744073709551615: too large`},
		{"until beyond the maximum", []string{"simulate", maxUntil}, `maxuntil.yaml: until: "2562047h47m16.854775807s": beyond the maximum of 87600h0m0s`},
		{"missing file", []string{"simulate", filepath.Join(dir, "none.yaml")}, "none.yaml"},
		{"no file", []string{"simulate"}, "accepts 1 arg"},
		{"bad format", []string{"simulate", "-o", "xml", bad}, `unknown format "xml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line with %q", code, errOut, tc.want)
			}
		})
	}
}

// With -v the managers' log lines go to stderr stamped with the virtual time.
func TestSimulateVerboseLogsVirtualTime(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, "simulate", "-v", "../../examples/scenarios/memory-pressure.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !regexpLine(errOut, `^time=2026-01-01T00:01:30\.000Z level=INFO msg="Eviction manager: evicting pod"`) {
		t.Errorf("stderr has no eviction line at the virtual time 00:01:30:\n%s", errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if !strings.HasPrefix(line, "time=2026-01-01T") {
			t.Errorf("line not at virtual time: %s", line)
		}
	}
}

// cancelWriter ends the run's context at its first write.
type cancelWriter struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.cancel()
	return w.Buffer.Write(p)
}

// simulate prints each record as it is computed: interrupted after its first
// write, a run has printed that record and stops there.
func TestSimulateStreamsOutput(t *testing.T) {
	t.Parallel()
	var doc strings.Builder
	doc.WriteString("until: 1000s\nloops: false\nsteps:\n")
	for i := range 1000 {
		fmt.Fprintf(&doc, "  - {at: %ds, do: [detectImages]}\n", i)
	}
	file := filepath.Join(t.TempDir(), "long.yaml")
	if err := os.WriteFile(file, []byte(doc.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ format, want string }{
		{"json", `{"at":"0s","event":"ActionResult","action":"detectImages","freed":0}` + "\n"},
		{"text", "      0s  ActionResult        detectImages: freed 0 bytes\n"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out := &cancelWriter{cancel: cancel}
			var errOut bytes.Buffer
			code := run(ctx, []string{"simulate", "-o", tc.format, file}, out, &errOut)
			if code != 130 || errOut.String() != "nodekeeper: interrupted\n" {
				t.Errorf("exit %d, stderr %q: want exit 130 and one line saying it was interrupted", code, errOut.String())
			}
			if out.String() != tc.want {
				t.Errorf("stdout = %q, want %q", out.String(), tc.want)
			}
		})
	}
}
