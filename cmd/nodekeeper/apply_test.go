package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/localpods"
	"github.com/nodekeeper/nodekeeper/internal/server"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// nopAgent takes every set and stops every pod at once.
type nopAgent struct{}

func (nopAgent) SetPods(context.Context, string, []*v1.Pod) error   { return nil }
func (nopAgent) KillPod(context.Context, nodeapi.KillRequest) error { return nil }

// apply and delete pod against a real store behind a real loopback server
// and unix socket.
func TestApplyAndDeletePod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "nk-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "nk.sock")
	store, err := localpods.New(localpods.Config{Path: filepath.Join(dir, localpods.FileName), NodeName: "n1"},
		localpods.Deps{Agent: nopAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{}, server.Deps{Local: store.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{}, 3)
	ready := make(chan struct{})
	go func() { _ = store.Run(ctx); done <- struct{}{} }()
	go func() { _ = srv.Run(ctx); done <- struct{}{} }()
	go func() { _ = localpods.ServeUnix(ctx, sock, store.Handler(), nil, ready); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	<-srv.Ready()
	<-ready
	url := "http://" + srv.Addr()

	manifest := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: testbox}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {priorityClassName: gold, containers: [{name: c, image: i}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	uuid := `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		out, err string // regular expressions of the whole output
	}{
		{"apply", []string{"apply", "-f", manifest, "--server", url}, 0, `^pod/web created \(namespace default, uid ` + uuid + `\)\n$`, `^$`},
		{"apply again", []string{"apply", "-f", manifest, "--socket", sock}, exitUsage, `^$`, `^nodekeeper: pod "default/web": already exists\n$`},
		{"bad manifest", []string{"apply", "-f", bad, "--socket", sock}, exitUsage, `^$`,
			`^nodekeeper: ` + regexp.QuoteMeta(bad) + `: pod "default/x": spec.priorityClassName: "gold": no such priority class .*\n$`},
		{"no file", []string{"apply", "--socket", sock}, exitUsage, `^$`, `^nodekeeper: apply needs -f FILE\n$`},
		{"both targets", []string{"apply", "-f", manifest, "--socket", sock, "--server", url}, exitUsage, `^$`, `^nodekeeper: --server and --socket: give one of them\n$`},
		{"delete", []string{"delete", "pod", "web", "--socket", sock, "--grace-period", "1"}, 0, `^pod "web" deleted \(namespace default, uid ` + uuid + `\)\n$`, `^$`},
		{"delete again", []string{"delete", "pod", "web", "-n", "default", "--server", url}, exitUsage, `^$`, `^nodekeeper: pod "default/web": not found\n$`},
		{"no agent", []string{"delete", "pod", "web", "--socket", filepath.Join(sockDir, "none")}, 1, `^$`, `is 'nodekeeper run' serving there\?`},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != tc.code || !regexp.MustCompile(tc.out).MatchString(out) || !regexp.MustCompile(tc.err).MatchString(errOut) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %s, %s", tc.name, code, out, errOut, tc.code, tc.out, tc.err)
		}
	}
}

// TestApplyInputTooLarge: a manifest over --max-input-size is a usage error
// (exit 2) naming the file and the limit, before any request.
func TestApplyInputTooLarge(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, "--max-input-size", "10", "apply", "-f", path, "--server", "http://127.0.0.1:1")
	want := "nodekeeper: " + path + ": larger than the input size limit of 10 (10 bytes; see --max-input-size)\n"
	if code != exitUsage || errOut != want {
		t.Errorf("exit %d, stderr %q; want exit %d, %q", code, errOut, exitUsage, want)
	}
}
