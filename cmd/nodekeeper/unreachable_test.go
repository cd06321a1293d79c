package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// refusingSocket returns the path of a unix socket file nothing listens on:
// connecting to it is refused (ECONNREFUSED).
func refusingSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodekeeper.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the socket file is gone: %v", err)
	}
	return path
}

// Every command that talks to a running agent follows one rule where none
// answers, the socket absent or refusing: one line that ends with the hint
// get gives, exit 1 (a runtime error, not a usage error).
func TestNoAgentAnswers(t *testing.T) {
	t.Parallel()
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: web, image: busybox}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const hint = "(is 'nodekeeper run' running with this root directory?)"
	for _, sock := range []struct{ name, path, errno string }{
		{"absent", filepath.Join(t.TempDir(), "nodekeeper.sock"), "no such file or directory"},
		{"refusing", refusingSocket(t), "connection refused"},
	} {
		for _, tc := range []struct {
			name string
			args []string
		}{
			{"get pods", []string{"get", "pods", "--socket", sock.path}},
			{"get pod NAME", []string{"get", "pod", "web", "--socket", sock.path}},
			{"get pods -w", []string{"get", "pods", "-w", "--socket", sock.path}},
			{"get node", []string{"get", "node", "--socket", sock.path}},
			{"describe pod", []string{"describe", "pod", "web", "--socket", sock.path}},
			{"events", []string{"events", "--socket", sock.path}},
			{"logs", []string{"logs", "web", "--socket", sock.path}},
			{"logs -f", []string{"logs", "-f", "web", "--socket", sock.path}},
			{"exec", []string{"exec", "web", "--socket", sock.path, "--", "true"}},
			{"apply", []string{"apply", "-f", manifest, "--socket", sock.path}},
			{"delete pod", []string{"delete", "pod", "web", "--socket", sock.path}},
			{"explain eviction --live", []string{"explain", "eviction", "--live=" + sock.path}},
			{"kubeconfig", []string{"kubeconfig", "--socket", sock.path}},
		} {
			t.Run(sock.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				code, out, errOut := runCLI(t, tc.args...)
				if code != 1 || out != "" || !strings.HasPrefix(errOut, "nodekeeper: ") || strings.Count(errOut, "\n") != 1 ||
					!strings.Contains(errOut, sock.path) || !strings.Contains(errOut, sock.errno) || !strings.HasSuffix(errOut, hint+"\n") {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and one line naming %s, %q and ending %q", code, out, errOut, sock.path, sock.errno, hint)
				}
			})
		}
	}
}
