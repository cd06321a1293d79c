package toolbuild

import (
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBuildCgo builds a tiny module with and without DefaultCgo: the
// CGO_ENABLED the binary was built with follows the spec, each setting has a
// cache directory of its own, and a second Build finds the first's binary.
func TestBuildCgo(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // os.UserCacheDir
	t.Setenv("CGO_ENABLED", "1")            // the go command's "default" here
	spec := Spec{
		Module:    "internal/testenv/toolbuild/testdata/hello",
		Binaries:  map[string]string{"hello": "."},
		KeyFiles:  []string{"main.go"},
		CacheName: "test",
	}
	dirs := map[bool]string{}
	for _, defaultCgo := range []bool{false, true} {
		spec.DefaultCgo = defaultCgo
		dir, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		info, err := buildinfo.ReadFile(filepath.Join(dir, "hello"))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, s := range info.Settings {
			if s.Key == "CGO_ENABLED" {
				got = s.Value
			}
		}
		want := map[bool]string{false: "0", true: "1"}[defaultCgo]
		if got != want {
			t.Errorf("DefaultCgo %v: built with CGO_ENABLED=%q, want %q", defaultCgo, got, want)
		}
		again, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		if again != dir {
			t.Errorf("DefaultCgo %v: second Build %s, want the cached %s", defaultCgo, again, dir)
		}
		dirs[defaultCgo] = dir
	}
	if dirs[false] == dirs[true] {
		t.Errorf("CGO_ENABLED=0 and =1 share the cache directory %s", dirs[false])
	}
}

// TestBuildLDFlags builds the tiny module with a -X setting: the binary
// prints it, and the flags are part of the cache key.
func TestBuildLDFlags(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // os.UserCacheDir
	spec := Spec{
		Module:    "internal/testenv/toolbuild/testdata/hello",
		Binaries:  map[string]string{"hello": "."},
		KeyFiles:  []string{"main.go"},
		CacheName: "test",
	}
	plain, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.LDFlags = "-X main.greeting=hi"
	dir, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if dir == plain {
		t.Errorf("with and without ldflags share the cache directory %s", dir)
	}
	for _, tc := range []struct{ dir, want string }{{plain, "hello\n"}, {dir, "hi\n"}} {
		out, err := exec.Command(filepath.Join(tc.dir, "hello")).Output()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, string(out)); diff != "" {
			t.Errorf("%s output (-want +got):\n%s", tc.dir, diff)
		}
	}
}

// TestBuildTests builds a test binary (go test -c) beside a program, with the
// spec's ldflags: it runs the module's test, and both outputs are in the
// directory Build returns.
func TestBuildTests(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // os.UserCacheDir
	spec := Spec{
		Module:    "internal/testenv/toolbuild/testdata/hello",
		Binaries:  map[string]string{"hello": "."},
		Tests:     map[string]string{"hello.test": "."},
		KeyFiles:  []string{"main.go", "main_test.go"},
		CacheName: "test",
		// A package main under test has its import path, not "main".
		LDFlags: "-X main.greeting=hey -X example.com/hello.greeting=hey",
	}
	dir, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "hello.test"), "-test.v", "-test.run", "TestGreeting").CombinedOutput()
	if err != nil {
		t.Fatalf("hello.test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "greeting: hey") || !strings.Contains(string(out), "--- PASS: TestGreeting") {
		t.Errorf("hello.test output lacks the test's log with the ldflags value:\n%s", out)
	}
	if out, err := exec.Command(filepath.Join(dir, "hello")).Output(); err != nil || string(out) != "hey\n" {
		t.Errorf("the program beside the test binary: %q, %v; want \"hey\\n\"", out, err)
	}
	spec.Tests["other.test"] = "."
	again, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(again, "other.test")); err != nil {
		t.Errorf("a spec naming one more test binary: %v", err)
	}
}
