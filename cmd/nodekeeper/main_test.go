package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestRootUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // in stdout for exit 0, else in stderr
	}{
		{"no command prints help", nil, 0, "Available Commands:"},
		{"version", []string{"version"}, 0, "nodekeeper "},
		{"unknown command", []string{"evict"}, exitUsage, `unknown command "evict" for "nodekeeper"`},
		{"unknown explain subcommand", []string{"explain", "gc"}, exitUsage, `unknown command "gc" for "nodekeeper explain"`},
		{"unknown flag", []string{"--verbose"}, exitUsage, "unknown flag: --verbose"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.wantCode, errOut)
			}
			got := errOut
			if code == 0 {
				got = out
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("output %q lacks %q", got, tc.want)
			}
			if code != 0 && strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("want one line on stderr, got %q", errOut)
			}
		})
	}
}

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	const rev = "f27bcda97050831c57ffa3e2dcd7f65db133f050"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		want   string
	}{
		{"no build info", "", nil, "devel (revision unknown)"},
		{"go test or -buildvcs=false", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel (revision unknown)"},
		{"go build in a clean checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261124013638-f27bcda97050"}, Settings: vcs("false")},
			"v0.0.0-20261124013638-f27bcda97050 (revision " + rev + ")"},
		{"go build with local changes", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261124013638-f27bcda97050+dirty"}, Settings: vcs("true")},
			"v0.0.0-20261124013638-f27bcda97050+dirty (revision " + rev + ", modified)"},
		{"go install module@version", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0 (revision unknown)"},
		{"ldflags wins over the module version", "1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: vcs("false")}, "1.2.3 (revision " + rev + ")"},
		{"ldflags without build info", "1.2.3", nil, "1.2.3 (revision unknown)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := formatVersion(tc.linked, tc.bi); got != tc.want {
				t.Errorf("formatVersion(%q) = %q, want %q", tc.linked, got, tc.want)
			}
		})
	}
}

// version and --version print the same line, taken from the build information.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	want := "nodekeeper " + versionString() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 || out != want || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", args, code, out, errOut, want)
		}
	}
}
