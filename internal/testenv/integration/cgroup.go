package integration

import (
	"testing"

	"golang.org/x/sys/unix"
)

// CgroupVersion is the version of the cgroup hierarchy mounted at
// /sys/fs/cgroup: 2 when it is a cgroup2 mount (unified), 1 otherwise (v1 or
// hybrid), 0 when it cannot be read.
func CgroupVersion() int {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return 0
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 2
	}
	return 1
}

// OnCgroup skips t unless the machine's cgroup version is v. A test written
// for one version is not a test the machine lacks parts for: it runs on the
// other lane (make test on this v1 host, make test-cgroup2 in the v2 VM), so
// the skip is neither a CI failure nor recorded as a missing part.
func OnCgroup(t testing.TB, v int) {
	t.Helper()
	if got := CgroupVersion(); got != v {
		t.Skipf("runs on cgroup v%d only; this machine has cgroup v%d", v, got)
	}
}
