package prober

import (
	"strings"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// Exec probes through the real CRI client against a real containerd: exit 0 is
// success, another exit code is failure with the code, and a command that outlives
// the probe timeout is a failure, not an error.
func TestExecProbeThroughContainerd(t *testing.T) {
	ctd := containerdtest.Start(t)
	app := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/probe-target:1", Runnable: true})
	ctd.Import(t, app)
	pod := ctd.RunPod(t, "probe", "uid-probe")
	id := ctd.CreateContainer(t, pod, "app", 0, app.Ref, nil, true)
	exec := NewExec(ctd.CRI)
	for _, tc := range []struct {
		name    string
		cmd     []string
		timeout time.Duration
		want    Outcome
		output  string
	}{
		{name: "exit 0", cmd: []string{"/pause", "exit", "0"}, timeout: 5 * time.Second, want: OutcomeSuccess},
		{name: "exit 3", cmd: []string{"/pause", "exit", "3"}, timeout: 5 * time.Second, want: OutcomeFailure, output: "exited with 3"},
		{name: "hangs past the timeout", cmd: []string{"/pause"}, timeout: time.Second, want: OutcomeFailure, output: "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got, out, err := exec.Probe(t.Context(), Target{ContainerID: "containerd://" + id, Command: tc.cmd, Timeout: tc.timeout})
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if got != tc.want || !strings.Contains(out, tc.output) {
				t.Errorf("Probe = %v, %q; want %v with %q", got, out, tc.want, tc.output)
			}
			if d := time.Since(start); d > tc.timeout+5*time.Second {
				t.Errorf("probe took %v with a %v timeout", d, tc.timeout)
			}
		})
	}
}
