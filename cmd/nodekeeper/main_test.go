package main

import (
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
