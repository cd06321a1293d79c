package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStopRuntimeInput: a root directory that is not one and a timeout that
// is not positive are usage errors naming the value; a root directory whose
// agent runs (its lock is held) is refused with exit 1; one with no
// containerd recorded is fine, and nothing is signalled.
func TestStopRuntimeInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	locked := t.TempDir()
	f, err := os.OpenFile(filepath.Join(locked, "nodekeeper.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"missing root", []string{"--root-dir", filepath.Join(dir, "missing")}, exitUsage, "", "missing"},
		{"file root", []string{"--root-dir", file}, exitUsage, "", file},
		{"zero timeout", []string{"--root-dir", dir, "--timeout", "0s"}, exitUsage, "", "--timeout 0s"},
		{"agent running", []string{"--root-dir", locked}, 1, "", "another nodekeeper is running"},
		{"nothing recorded", []string{"--root-dir", dir}, 0, "no containerd of " + dir + " is running", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"stop-runtime"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}
