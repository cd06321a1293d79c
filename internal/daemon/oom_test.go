package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSetOOMScoreAdj(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "oom_score_adj")
	if err := os.WriteFile(f, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := setOOMScoreAdj(f, -999)
	if err != nil || got != -999 {
		t.Fatalf("setOOMScoreAdj = %d, %v; want -999", got, err)
	}
	if b, _ := os.ReadFile(f); string(b) != "-999" {
		t.Errorf("file holds %q", b)
	}
	if _, err := setOOMScoreAdj(f, -1001); err == nil || !strings.Contains(err.Error(), "-1001") {
		t.Errorf("out of range: %v", err)
	}
	// A refused write (here: a read-only file) reports the value kept.
	ro := filepath.Join(dir, "ro")
	if err := os.WriteFile(ro, []byte("0\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 { // root writes read-only files
		got, err := setOOMScoreAdj(ro, -999)
		if err == nil || got != 0 || !strings.Contains(err.Error(), "stays 0") {
			t.Errorf("refused: %d, %v", got, err)
		}
	}
}

// The real file: writing the value it holds is always allowed (lowering
// needs CAP_SYS_RESOURCE, refused on this machine kind), and the test
// process keeps its score.
func TestSetOOMScoreAdjOnProc(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(selfOOMScoreAdj)
	if err != nil {
		t.Fatalf("read %s: %v (Linux always has it)", selfOOMScoreAdj, err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := setOOMScoreAdj(selfOOMScoreAdj, cur); err != nil || got != cur {
		t.Errorf("setting the current value %d: %d, %v", cur, got, err)
	}
}

// TestContainerOOMGroup: the kubelet's choice of memory.oom.group for
// containers, from the cgroup version and singleProcessOOMKill.
func TestContainerOOMGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		v2     bool
		single *bool
		want   bool
	}{
		{"v2, unset", true, nil, true},
		{"v2, false", true, new(false), true},
		{"v2, true", true, new(true), false},
		{"v1, unset", false, nil, false},
		{"v1, true", false, new(true), false},
	} {
		if got := containerOOMGroup(tc.v2, tc.single); got != tc.want {
			t.Errorf("%s: containerOOMGroup = %v, want %v", tc.name, got, tc.want)
		}
	}
}
