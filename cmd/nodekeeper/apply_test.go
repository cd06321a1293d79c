package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// nopAgent takes every set and stops every pod at once.
type nopAgent struct{}

func (nopAgent) SetPods(context.Context, string, []*v1.Pod) error   { return nil }
func (nopAgent) KillPod(context.Context, nodeapi.KillRequest) error { return nil }

// apply, get pods and delete pod against a real store and server behind the
// agent's real unix socket; the read-only port is no way to change pods.
func TestApplyAndDeletePod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := localpods.New(localpods.Config{Path: filepath.Join(dir, localpods.FileName), NodeName: "n1"},
		localpods.Deps{Agent: nopAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = store.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deps := server.Deps{Local: store.Handler(), Pods: store.Pods}
	root, sock := serveSocket(t, deps)
	url := serve(t, deps) // a read-only port
	empty, err := os.MkdirTemp("", "nk-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(empty) })

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
		{"apply", []string{"apply", "-f", manifest, "--root-dir", root}, 0, `^pod/web created \(namespace default, uid ` + uuid + `\)\n$`, `^$`},
		{"apply again", []string{"apply", "-f", manifest, "--socket", sock}, exitUsage, `^$`, `^nodekeeper: pod "default/web": already exists\n$`},
		{"bad manifest", []string{"apply", "-f", bad, "--socket", sock}, exitUsage, `^$`,
			`^nodekeeper: ` + regexp.QuoteMeta(bad) + `: pod "default/x": spec.priorityClassName: "gold": no such priority class .*\n$`},
		{"no file", []string{"apply", "--socket", sock}, exitUsage, `^$`, `^nodekeeper: apply needs -f FILE\n$`},
		{"two targets", []string{"apply", "-f", manifest, "--socket", sock, "--root-dir", root}, exitUsage, `^$`, `^nodekeeper: --socket and --root-dir: give one of them\n$`},
		{"apply through the read-only port", []string{"apply", "-f", manifest, "--server", url}, exitUsage, `^$`,
			`^nodekeeper: --server: pods change only through the running nodekeeper's unix socket, never through a TCP port: drop --server \(see --root-dir and --socket\)\n$`},
		{"delete through the read-only port", []string{"delete", "pod", "web", "--server", url}, exitUsage, `^$`, `^nodekeeper: --server: pods change only through`},
		{"get pods", []string{"get", "pods", "--root-dir", root}, 0, `(?m)^default\s+web\s+0/1\s+Pending\s`, `^$`},
		{"get pods from the read-only port", []string{"get", "pods", "--server", url}, 0, `(?m)^default\s+web\s+0/1\s+Pending\s`, `^$`},
		{"delete", []string{"delete", "pod", "web", "--socket", sock, "--grace-period", "1"}, 0, `^pod "web" deleted \(namespace default, uid ` + uuid + `\)\n$`, `^$`},
		{"delete again", []string{"delete", "pod", "web", "-n", "default", "--root-dir", root}, 1, `^$`, `^nodekeeper: pod "default/web": not found\n$`},
		{"no agent", []string{"delete", "pod", "web", "--root-dir", empty}, 1, `^$`,
			`^nodekeeper: DELETE ` + regexp.QuoteMeta(filepath.Join(empty, "nodekeeper.sock")) + `: dial unix .*: no such file or directory \(is 'nodekeeper run' running with this root directory\?\)\n$`},
		{"no agent to apply to", []string{"apply", "-f", manifest, "--root-dir", empty}, 1, `^$`, `no such file or directory \(is 'nodekeeper run' running`},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != tc.code || !regexp.MustCompile(tc.out).MatchString(out) || !regexp.MustCompile(tc.err).MatchString(errOut) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %s, %s", tc.name, code, out, errOut, tc.code, tc.out, tc.err)
		}
	}
	if n := len(store.Pods()); n != 0 {
		t.Errorf("%d pods left in the store", n)
	}
}

// Without flags the commands that talk to the agent use the socket in the
// default root directory, as 'nodekeeper run' makes it.
func TestAgentTargetDefault(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"apply"}, {"delete", "pod"}, {"get", "pods"}, {"get", "node"}} {
		cmd, _, err := newRootCmd(slog.New(slog.DiscardHandler)).Find(args)
		if err != nil {
			t.Fatal(err)
		}
		var at agentTarget
		for _, name := range []string{"root-dir", "socket", "server"} {
			if f := cmd.Flags().Lookup(name); f == nil {
				t.Errorf("%v: no --%s", args, name)
			}
		}
		at.rootDir = cmd.Flags().Lookup("root-dir").DefValue
		_, base, sock, err := at.client(cmd)
		if err != nil || sock != "/var/lib/nodekeeper/nodekeeper.sock" || base != "http://localhost" {
			t.Errorf("%v: socket %q, base %q, %v; want /var/lib/nodekeeper/nodekeeper.sock", args, sock, base, err)
		}
	}
}

// An unprivileged local user (uid 65534, a real process) can neither reach the
// agent's socket (EACCES: the socket is root's, mode 0600, in a directory
// everyone may enter) nor change pods through the read-only port on the
// loopback, which every local user and hostNetwork pod reaches (405, not
// 201); nothing is created.
func TestUnprivilegedUserCannotChangePods(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "needs root to start a process as uid 65534")
	}
	store, err := localpods.New(localpods.Config{Path: filepath.Join(t.TempDir(), localpods.FileName), NodeName: "n1"},
		localpods.Deps{Agent: nopAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = store.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deps := server.Deps{Local: store.Handler(), Pods: store.Pods}
	root, sock := serveSocket(t, deps)
	url := serve(t, deps)
	// Everyone may enter the root directory and read the test binary and
	// the manifest: only the socket's own mode stands in the way.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.MkdirTemp("", "nk-cli-pub-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pub, "nodekeeper.test")
	if err := os.Link(self, bin); err != nil {
		if err := copyFile(self, bin); err != nil {
			t.Fatal(err)
		}
	}
	const manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: root}\nspec:\n  hostNetwork: true\n" +
		"  containers: [{name: c, image: testbox, securityContext: {privileged: true}, volumeMounts: [{name: host, mountPath: /host}]}]\n" +
		"  volumes: [{name: host, hostPath: {path: /}}]\n"
	path := filepath.Join(pub, "root.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	asNobody := func(env string, args ...string) (int, string) {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = append(os.Environ(), env)
		cmd.Stdin = strings.NewReader(manifest)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("start %v as uid 65534: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := asNobody("NODEKEEPER_TEST_MAIN=1", "apply", "-f", path, "--root-dir", root); code != 1 ||
		!strings.Contains(out, "dial unix "+sock+": connect: permission denied (the socket is root's alone: are you root?)") {
		t.Errorf("apply through the socket as uid 65534: exit %d, %q; want exit 1, permission denied", code, out)
	}
	if code, out := asNobody("NODEKEEPER_TEST_MAIN=1", "get", "pods", "--socket", sock); code != 1 || !strings.Contains(out, "permission denied") {
		t.Errorf("get pods through the socket as uid 65534: exit %d, %q; want exit 1, permission denied", code, out)
	}
	if code, out := asNobody("NODEKEEPER_TEST_POST="+url+"/pods", "-test.run=^$"); code != 0 || strings.TrimSpace(out) != "405" {
		t.Errorf("POST /pods on the read-only port as uid 65534: exit %d, %q; want 405", code, out)
	}
	if pods := store.Pods(); len(pods) != 0 {
		t.Errorf("an unprivileged user created %d pods", len(pods))
	}
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// TestApplyRefusesUnsafePod: `apply` of a pod whose hostPath has type Bogus
// (or '..', or a relative path), against a real store behind the root-only
// socket, exits 2 with one line naming the file, the field path and the
// value, and the store keeps no pod (issue 26, item 12).
func TestApplyRefusesUnsafePod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := localpods.New(localpods.Config{Path: filepath.Join(dir, localpods.FileName), NodeName: "n1"},
		localpods.Deps{Agent: nopAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = store.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	_, sock := serveSocket(t, server.Deps{Local: store.Handler(), Pods: store.Pods})
	for _, tc := range []struct{ name, hostPath, want string }{
		{"type Bogus", "{path: /, type: Bogus}", `spec.volumes[0].hostPath.type: "Bogus": want "", DirectoryOrCreate`},
		{"..", "{path: /tmp/../etc}", `spec.volumes[0].hostPath.path: "/tmp/../etc": must not contain '..'`},
		{"relative", "{path: etc}", `spec.volumes[0].hostPath.path: "etc": must be an absolute path`},
	} {
		manifest := filepath.Join(dir, "root.yaml")
		if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: root}\nspec:\n"+
			"  containers: [{name: c, image: i, volumeMounts: [{name: h, mountPath: /h}]}]\n  volumes: [{name: h, hostPath: "+tc.hostPath+"}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, "apply", "-f", manifest, "--socket", sock)
		want := `^nodekeeper: ` + regexp.QuoteMeta(manifest+`: document 1: pod "root": `+tc.want) + `.*\n$`
		if code != exitUsage || out != "" || !regexp.MustCompile(want).MatchString(errOut) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d and %s", tc.name, code, out, errOut, exitUsage, want)
		}
	}
	if n := len(store.Pods()); n != 0 {
		t.Errorf("the store holds %d pods, want none", n)
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
	code, _, errOut := runCLI(t, "--max-input-size", "10", "apply", "-f", path, "--socket", filepath.Join(t.TempDir(), "none.sock"))
	want := "nodekeeper: " + path + ": larger than the input size limit of 10 (10 bytes; see --max-input-size)\n"
	if code != exitUsage || errOut != want {
		t.Errorf("exit %d, stderr %q; want exit %d, %q", code, errOut, exitUsage, want)
	}
}
