package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestSplitFlagged: the Lock contention spec runs apart with the lock flags;
// the other units stay together, and their run skips it.
func TestSplitFlagged(t *testing.T) {
	t.Parallel()
	lock := "[sig-node] Lock contention [Slow] [Disruptive] [Feature:LockContention] Kubelet should stop when the test acquires the lock on lock file and restart once the lock is released"
	oom := "[sig-node] OOMKiller for pod using more memory than node allocatable [LinuxOnly] [Serial] single process container without resource limits The containers terminated by OOM killer should have the reason set to OOMKilled"
	names := []string{lock, oom}
	rest, flagged, err := splitFlagged([]string{specFocus(lock), specFocus(oom)}, names)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rest, []string{specFocus(oom)}) {
		t.Errorf("rest %q, want the OOM spec's focus alone", rest)
	}
	if len(flagged) != 1 || flagged[0].focus != specFocus(lock) ||
		!slices.Equal(flagged[0].spec.flags, []string{"--lock-file=/var/run/kubelet.lock", "--exit-on-lock-contention"}) {
		t.Errorf("flagged %+v, want the lock spec with --lock-file and --exit-on-lock-contention", flagged)
	}
	skip := regexp.MustCompile(flaggedSkip())
	if !skip.MatchString(lock) || skip.MatchString(oom) {
		t.Errorf("skip %q: matches the lock spec %v, the OOM spec %v; want true, false", skip, skip.MatchString(lock), skip.MatchString(oom))
	}
	if _, _, err := splitFlagged([]string{"("}, names); err == nil {
		t.Error("a focus that does not compile: no error")
	}
}

// TestAbsentFiles: only the files that are not there are listed (those a
// spec's run may remove after it).
func TestAbsentFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	there, absent := filepath.Join(dir), filepath.Join(dir, "kubelet.lock")
	if got := absentFiles([]string{there, absent}); !slices.Equal(got, []string{absent}) {
		t.Errorf("absentFiles = %q, want %q", got, absent)
	}
}
