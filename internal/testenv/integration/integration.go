// Package integration decides what an integration test does when the machine
// cannot run it (no root, no containerd, no unshare): under CI=true it fails,
// so CI never passes on tests that did not run; otherwise it skips, and records
// the skip in the file named by $NODEKEEPER_SKIPPED, one line per package and
// reason, which `make test` prints at its end so a skip is never a silent ok.
package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SkippedEnv names the environment variable holding the skip record's path.
const SkippedEnv = "NODEKEEPER_SKIPPED"

// Require ends t when why, the reason the machine cannot run it, is not empty:
// it fails t under CI=true and skips it otherwise, recording the skip. With
// an empty why it does nothing.
func Require(t testing.TB, why string) {
	t.Helper()
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but the integration test cannot run: %s", why)
	}
	if path := os.Getenv(SkippedEnv); path != "" {
		if err := record(path, packageDir(), why); err != nil {
			t.Logf("record the skip in %s: %v", path, err)
		}
	}
	t.Skipf("skipping integration test: %s", why)
}

// record appends "DIR: why" to the file at path. Test binaries of several
// packages append at once; each line is one write to a file opened O_APPEND.
func record(path, dir, why string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "./%s: %s\n", dir, why)
	return errors.Join(err, f.Close())
}

// packageDir is the test's package directory relative to the module root
// (go test runs a test binary in its package's directory).
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return wd
			}
			return filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// SlowEnv names the environment variable holding the integer factor by which
// Slow scales a test's bounds on waits for real processes (make test-cgroup2
// sets it: its VM emulates the CPU, and containerd, runc and the shims run
// 10-20 times slower there).
const SlowEnv = "NODEKEEPER_E2E_SLOW"

// Slow scales d, a bound on a wait for real processes, by the factor in
// $NODEKEEPER_E2E_SLOW (unset: 1); another value fails t.
func Slow(t testing.TB, d time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(SlowEnv)
	if v == "" {
		return d
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want an integer factor of 1 or more", SlowEnv, v)
	}
	return d * time.Duration(n)
}
