package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMakeConformanceFocus: `make conformance FOCUS=...` hands the driver
// the focus as it was given, a ' (a spec's name: "kubelet's"), a $ and a ,
// included.
func TestMakeConformanceFocus(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed: it runs `make conformance`")
	}
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	fakeGo := filepath.Join(dir, "go")
	if err := writeScript(fakeGo, "for a in \"$@\"; do printf '%s\\n' \"$a\"; done >> "+shellQuote(args)+"\n"); err != nil {
		t.Fatal(err)
	}
	focus := `the kubelet's "config" $HOME, \d+`
	cmd := exec.Command("make", "-s", "-C", "../..", "conformance", "GO="+fakeGo, "FOCUS="+focus, "CHUNK=2/7")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make conformance: %v\n%s", err, out)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	i := slices.Index(got, "-focus")
	if i < 0 || i+1 >= len(got) || got[i+1] != focus {
		t.Fatalf("the driver's arguments %q: want -focus %q", got, focus)
	}
	for _, a := range []string{"-chunk", "2/7"} {
		if !slices.Contains(got, a) {
			t.Errorf("the driver's arguments %q lack %q", got, a)
		}
	}
}
