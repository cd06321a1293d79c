package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecordAndPackageDir(t *testing.T) {
	t.Parallel()
	if got := packageDir(); got != "internal/testenv/integration" {
		t.Errorf("packageDir() = %q, want internal/testenv/integration", got)
	}
	path := filepath.Join(t.TempDir(), "skipped")
	if err := record(path, "imagegc", "containerd not found"); err != nil {
		t.Fatal(err)
	}
	if err := record(path, "devicemanager", "needs root"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "./imagegc: containerd not found\n./devicemanager: needs root\n"; string(b) != want {
		t.Errorf("record wrote %q, want %q", b, want)
	}
}

// TestRequire runs Require in subtests: an empty reason lets the test go on;
// a reason skips it (CI unset here) and records the skip.
func TestRequire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "skipped")
	t.Setenv(SkippedEnv, path)
	t.Setenv("CI", "")
	ran := false
	t.Run("available", func(t *testing.T) { Require(t, ""); ran = true })
	var skipped bool
	t.Run("unavailable", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Require(t, "no containerd here")
		t.Error("Require did not end the test")
	})
	if !ran || !skipped {
		t.Errorf("ran %v, skipped %v; want both", ran, skipped)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "./internal/testenv/integration: no containerd here") {
		t.Errorf("skip record %q", b)
	}
}

func TestSlow(t *testing.T) {
	t.Setenv(SlowEnv, "")
	if got := Slow(t, time.Second); got != time.Second {
		t.Errorf("unset: %v", got)
	}
	t.Setenv(SlowEnv, "15")
	if got := Slow(t, 2*time.Second); got != 30*time.Second {
		t.Errorf("factor 15: %v", got)
	}
}

// TestHostDiskNeutral: a config naming no thresholds gets both, one that
// names its own keeps them.
func TestHostDiskNeutral(t *testing.T) {
	for _, tc := range []struct {
		config         string
		imageGC, evict bool
	}{
		{"failSwapOn: false\n", true, true},
		{"imageGCHighThresholdPercent: 90\n", false, true},
		{"evictionHard:\n  nodefs.available: 5%\n", true, false},
		{"imageGCLowThresholdPercent: 50\nevictionHard: {}\n", false, false},
	} {
		got := HostDiskNeutral(tc.config)
		if has := strings.Contains(got, "imageGCHighThresholdPercent: 100\n"); has != tc.imageGC {
			t.Errorf("HostDiskNeutral(%q) = %q: image GC line %v, want %v", tc.config, got, has, tc.imageGC)
		}
		if has := strings.Contains(got, "imagefs.available: 1%\n"); has != tc.evict {
			t.Errorf("HostDiskNeutral(%q) = %q: eviction lines %v, want %v", tc.config, got, has, tc.evict)
		}
	}
}
