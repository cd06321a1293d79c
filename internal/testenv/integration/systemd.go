package integration

import (
	"os"
	"testing"
)

// SystemdBooted reports whether systemd is the init system here: the
// directory /run/systemd/system exists (sd_booted(3)).
func SystemdBooted() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// OnSystemd skips t unless systemd is the init system. As with OnCgroup, a
// test written for systemd is not a test the machine lacks parts for: it
// runs in the lane that boots systemd (hack/cgroup2vm/systemd-guest.sh in the cgroup
// v2 VM), so the skip is neither a CI failure nor recorded as a missing part.
func OnSystemd(t testing.TB) {
	t.Helper()
	if !SystemdBooted() {
		t.Skip("runs where systemd is the init system (hack/cgroup2vm/systemd-guest.sh in the cgroup v2 VM); this machine's is not (no /run/systemd/system)")
	}
}
