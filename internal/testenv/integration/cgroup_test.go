package integration

import (
	"os"
	"strings"
	"testing"
)

// TestCgroupVersion checks the statfs answer against /proc/self/mounts: a
// cgroup2 mount at /sys/fs/cgroup is v2, anything else there is v1.
func TestCgroupVersion(t *testing.T) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Skip(err)
	}
	want := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "/sys/fs/cgroup" {
			want = 1
			if f[2] == "cgroup2" {
				want = 2
			}
		}
	}
	if got := CgroupVersion(); got != want {
		t.Errorf("CgroupVersion() = %d, /proc/self/mounts says %d", got, want)
	}
}
