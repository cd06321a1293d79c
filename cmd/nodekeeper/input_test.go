package main

import (
	"strings"
	"testing"
)

// TestInputSizeLimit gives /dev/zero, which never ends, to every input file
// flag of every explain command: each stops at --max-input-size with one line
// naming the file and the limit, exit 2.
func TestInputSizeLimit(t *testing.T) {
	t.Parallel()
	const zero = "/dev/zero"
	ev := map[string]string{"--pods": "../../examples/eviction/memory/pods.json", "--summary": "../../examples/eviction/memory/summary.json"}
	gc := map[string]string{"--images": imagegcExample + "images.json", "--containers": imagegcExample + "containers.json",
		"--imagefs": imagegcExample + "imagefs.json", "--capacity": "100Gi"}
	pre := map[string]string{"--pods": "../../examples/preemption/running.json", "--pod": "../../examples/preemption/critical-pod.yaml",
		"--capacity": "cpu=4,memory=8Gi"}
	args := func(cmd string, base map[string]string, flag string) []string {
		out := []string{"--max-input-size", "64Ki", "explain", cmd}
		for f, v := range base {
			if f != flag {
				out = append(out, f, v)
			}
		}
		return append(out, flag, zero)
	}
	cases := [][]string{
		{"--max-input-size", "64Ki", "explain", "oom", "--memory-capacity", "1Gi", "--pods", zero},
		args("eviction", ev, "--pods"), args("eviction", ev, "--summary"), args("eviction", ev, "--config"),
		args("imagegc", gc, "--images"), args("imagegc", gc, "--containers"), args("imagegc", gc, "--imagefs"),
		args("imagegc", gc, "--records"), args("imagegc", gc, "--config"),
		args("preemption", pre, "--pods"), args("preemption", pre, "--pod"), args("preemption", pre, "--config"),
	}
	for _, a := range cases {
		t.Run(strings.Join(a[2:], " "), func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, a...)
			want := "nodekeeper: /dev/zero: larger than the input size limit of 64Ki (65536 bytes; see --max-input-size)\n"
			if code != exitUsage || errOut != want {
				t.Errorf("exit %d, stderr %q; want exit %d, %q", code, errOut, exitUsage, want)
			}
		})
	}
}

func TestMaxInputSizeFlag(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, "--max-input-size", "0", "explain", "oom", "--memory-capacity", "1Gi", "--pods", "../../examples/oom/pods.json")
	if code != exitUsage || !strings.HasPrefix(errOut, `nodekeeper: --max-input-size: "0": `) {
		t.Errorf("exit %d, stderr %q; want a usage error about --max-input-size", code, errOut)
	}
	code, _, errOut = runCLI(t, "--max-input-size", "1Mi", "explain", "oom", "--memory-capacity", "1Gi", "--pods", "../../examples/oom/pods.json")
	if code != 0 {
		t.Errorf("exit %d, stderr %q; want 0", code, errOut)
	}
}
