// Package cgroup2vm holds the tests of the cgroup v2 lane's scripts
// (make test-cgroup2): vm.sh boots the VM, lane.sh builds on the host, and
// guest.sh, tested here on the host, runs the test binaries in the guest.
package cgroup2vm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeTest writes an executable script standing in for a package's test
// binary: it prints its directory and arguments, then body runs.
func fakeTest(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	script := "#!/bin/sh\necho \"dir=$(pwd) args=$*\"\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runGuest runs guest.sh on a list of lines (BINARY, IMPORTPATH, DIR, RUN)
// and returns its output and exit code.
func runGuest(t *testing.T, env []string, lines ...[4]string) (string, int) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.Join(l[:], "\t") + "\n")
	}
	list := filepath.Join(t.TempDir(), "list")
	if err := os.WriteFile(list, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "guest.sh", list)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestGuestRunsEachInItsDirAndFailsOnAnyFailure runs a passing, a failing
// and a skipping package: each runs in its own directory with its -run
// filter and TESTFLAGS, each gets go test's ok/FAIL line, the recorded skip
// is listed, the binary after a failure still runs, and the exit code is 1.
func TestGuestRunsEachInItsDirAndFailsOnAnyFailure(t *testing.T) {
	t.Parallel()
	bins, pkgA, pkgB, pkgC := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	pass := fakeTest(t, bins, "a.test", "echo PASS")
	fail := fakeTest(t, bins, "b.test", "echo '--- FAIL: TestB (0.00s)'; echo FAIL; exit 1")
	skip := fakeTest(t, bins, "c.test", `echo "./c: no containerd here" >> "$NODEKEEPER_SKIPPED"; echo PASS`)
	out, code := runGuest(t, []string{"TESTFLAGS=-test.v", "TEST_TIMEOUT=3m"},
		[4]string{pass, "example.com/a", pkgA, "^TestA$"},
		[4]string{fail, "example.com/b", pkgB, ""},
		[4]string{skip, "example.com/c", pkgC, ""},
	)
	if code != 1 {
		t.Errorf("exit code %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{
		"dir=" + pkgA + " args=-test.count=1 -test.timeout=3m -test.run=^TestA$ -test.v\n",
		"dir=" + pkgB + " args=-test.count=1 -test.timeout=3m -test.v\n",
		"--- FAIL: TestB (0.00s)\n",
		"dir=" + pkgC + " ",
		"  ./c: no containerd here\n",
		"test-cgroup2: FAIL: example.com/b\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, re := range []string{`(?m)^ok  \texample.com/a\t[0-9.]+s$`, `(?m)^FAIL\texample.com/b\t[0-9.]+s$`, `(?m)^ok  \texample.com/c\t[0-9.]+s$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", re, out)
		}
	}
}

// TestGuestPasses: every package passing is exit 0; an empty list is a
// failure, not a silent ok.
func TestGuestPasses(t *testing.T) {
	t.Parallel()
	pass := fakeTest(t, t.TempDir(), "a.test", "echo PASS")
	out, code := runGuest(t, nil, [4]string{pass, "example.com/a", t.TempDir(), ""})
	if code != 0 || !strings.Contains(out, "test-cgroup2: ok, 1 packages") {
		t.Errorf("exit code %d, want 0; output:\n%s", code, out)
	}
	out, code = runGuest(t, nil)
	if code != 1 {
		t.Errorf("empty list: exit code %d, want 1; output:\n%s", code, out)
	}
}
