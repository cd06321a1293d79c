package main

import (
	"errors"
	"log/slog"
	"os"
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

// TestRemoveMade: what a run made (absent before it) is removed, a file
// before its directory, and what was there before is kept; a file already
// gone is no error, a directory that is not empty is one.
func TestRemoveMade(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	kept := filepath.Join(base, "kept")
	if err := os.WriteFile(kept, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, spec, gone := filepath.Join(base, "cdi"), filepath.Join(base, "cdi", "example.com.json"), filepath.Join(base, "gone")
	made := absentFiles([]string{spec, dir, kept, gone})
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	if err := removeMade(log, made); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{spec, dir} {
		if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: still there (%v)", f, err)
		}
	}
	if _, err := os.Lstat(kept); err != nil {
		t.Errorf("%s, there before: %v", kept, err)
	}
	// A directory someone else filled is not removed, and says so.
	if err := os.MkdirAll(filepath.Join(dir, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := removeMade(log, []string{dir}); err == nil {
		t.Errorf("a directory that is not empty: no error")
	}
}
