package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunOOMScoreAdjOutOfRange(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\noomScoreAdj: -1001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"flag", []string{"run", "--oom-score-adj", "5000", "--root-dir", t.TempDir()}, "--oom-score-adj (or oomScoreAdj in (defaults)) 5000"},
		{"config", []string{"run", "--config", cfg, "--root-dir", t.TempDir()}, "-1001: want a value in [-1000, 1000]"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, errOut, exitUsage, tc.want)
		}
	}
}
