package main

import (
	"encoding/json"
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
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pod without name", []string{"simulate", bad}, "bad.yaml: steps[0].pods: items[0]: pod has no metadata.name"},
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
