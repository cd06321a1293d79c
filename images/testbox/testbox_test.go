package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

type step struct {
	method, path string
	status       int
	body         string
}

func do(t *testing.T, base string, st step) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), st.method, base+st.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != st.status || (st.body != "" && string(b) != st.body) {
		t.Errorf("%s %s = %d %q, want %d %q", st.method, st.path, resp.StatusCode, b, st.status, st.body)
	}
}

// TestControl drives the probes' switches, in order, on one server.
func TestControl(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newState("").handler())
	defer srv.Close()
	for _, st := range []step{
		{"GET", "/healthz", 200, "ok\n"},
		{"GET", "/readyz", 200, "ok\n"},
		{"GET", "/startupz", 200, "ok\n"},
		{"GET", "/control", 200, "liveness=ok readiness=ok startup=ok tcp=ok\n"},
		{"POST", "/control/liveness=fail", 200, "liveness=fail readiness=ok startup=ok tcp=ok\n"},
		{"GET", "/healthz", 500, "liveness failing\n"},
		{"GET", "/readyz", 200, "ok\n"},
		{"POST", "/control/readiness=fail", 200, ""},
		{"GET", "/readyz", 500, "readiness failing\n"},
		{"POST", "/control/liveness=ok", 200, "liveness=ok readiness=fail startup=ok tcp=ok\n"},
		{"GET", "/healthz", 200, "ok\n"},
		{"POST", "/control/startup=fail", 200, ""},
		{"GET", "/startupz", 500, "startup failing\n"},
		{"POST", "/control/liveness=maybe", 400, "want /control/PROBE=fail or =ok, PROBE one of liveness, readiness, startup, tcp\n"},
		{"POST", "/control/memory=fail", 400, ""},
		{"GET", "/control/liveness=fail", 405, ""},
		{"POST", "/healthz", 405, ""},
		{"GET", "/nope", 404, ""},
	} {
		do(t, srv.URL, st)
	}
}

// While the fail file exists, liveness fails; readiness does not.
func TestFailFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fail")
	srv := httptest.NewServer(newState(path).handler())
	defer srv.Close()
	do(t, srv.URL, step{"GET", "/healthz", 200, "ok\n"})
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	do(t, srv.URL, step{"GET", "/healthz", 500, "liveness failing\n"})
	do(t, srv.URL, step{"GET", "/readyz", 200, "ok\n"})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	do(t, srv.URL, step{"GET", "/healthz", 200, "ok\n"})
}

// lines returns a writer and a channel of the lines written to it.
func lines(t *testing.T) (io.WriteCloser, <-chan string) {
	r, w := io.Pipe()
	c := make(chan string, 16)
	go func() {
		defer close(c)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			c <- sc.Text()
		}
	}()
	t.Cleanup(func() { r.Close() })
	return w, c
}

func next(t *testing.T, c <-chan string) string {
	t.Helper()
	select {
	case l := <-c:
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no output")
		return ""
	}
}

// fixedPort is a free loopback port below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), so that no socket bound to port 0 and no
// outgoing connection of another test can take it while the TCP port is
// closed, nor a dial to it connect to itself: a port of the ephemeral
// range, closed and opened again, was taken in between on a busy CI.
func fixedPort(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	for range 100 {
		port := 10000 + rand.IntN(max(low-10000, 1))
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			addr := ln.Addr().String()
			ln.Close()
			return addr
		}
	}
	t.Fatalf("no free loopback port in 10000-%d", low)
	return ""
}

// TestServe runs serve on loopback: HTTP control switches the TCP port and
// the gRPC health answers; it exits 0 when stopped.
func TestServe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	out, c := lines(t)
	done := make(chan int, 1)
	tcp := fixedPort(t)
	go func() {
		done <- run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--tcp", tcp, "--grpc", "127.0.0.1:0"}, nil, out, io.Discard)
	}()
	addr := map[string]string{}
	for range 3 {
		kind, a, _ := strings.Cut(next(t, c), " on ")
		addr[kind] = a
	}
	base := "http://" + addr["http"]
	dialTCP := func() error {
		conn, err := net.Dial("tcp", addr["tcp"])
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := dialTCP(); err != nil {
		t.Fatalf("tcp port: %v", err)
	}
	do(t, base, step{"POST", "/control/tcp=fail", 200, ""})
	if err := dialTCP(); err == nil {
		t.Error("tcp port open after tcp=fail")
	}
	do(t, base, step{"POST", "/control/tcp=ok", 200, ""})
	if err := dialTCP(); err != nil {
		t.Errorf("tcp port after tcp=ok: %v", err)
	}

	conn, err := grpc.NewClient(addr["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != want {
			t.Errorf("Check(%q) = %v, %v; want %v", service, resp.GetStatus(), err, want)
		}
	}
	check("", healthpb.HealthCheckResponse_SERVING)
	check("readiness", healthpb.HealthCheckResponse_SERVING)
	do(t, base, step{"POST", "/control/liveness=fail", 200, ""})
	check("", healthpb.HealthCheckResponse_NOT_SERVING)
	check("liveness", healthpb.HealthCheckResponse_NOT_SERVING)
	check("readiness", healthpb.HealthCheckResponse_SERVING)
	do(t, base, step{"POST", "/control/readiness=fail", 200, ""})
	check("readiness", healthpb.HealthCheckResponse_NOT_SERVING)
	if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "db"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check(db) = %v, want NotFound", err)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d after stop, want 0", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists")
	if err := os.WriteFile(exists, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for _, tc := range []struct {
		name           string
		args           []string
		ctx            context.Context // nil: not stopped
		code           int
		stdout, stderr string
	}{
		{name: "check absent", args: []string{"check", filepath.Join(dir, "absent")}},
		{name: "check present", args: []string{"check", exists}, code: 1, stdout: "failing: " + exists + " exists\n"},
		{name: "env sorted", args: []string{"env"}, stdout: "A=1\nB=2\n"},
		{name: "exit", args: []string{"exit", "3"}, code: 3},
		{name: "exit after a delay", args: []string{"exit", "--after", "10ms", "4"}, code: 4},
		{name: "exit stopped first", args: []string{"exit", "--after", "1h", "4"}, ctx: stopped},
		{name: "exit once: the first time", args: []string{"exit", "--once", filepath.Join(dir, "once"), "42"}, code: 42},
		{name: "exit once: it ran before, runs until stopped", args: []string{"exit", "--once", exists, "42"}, ctx: stopped},
		{name: "print", args: []string{"print", "--count", "3", "--every", "1ms", "line"}, stdout: "line 1\nline 2\nline 3\n"},
		{name: "print stopped", args: []string{"print", "--count", "3", "--every", "1h", "line"}, ctx: stopped, stdout: "line 1\n"},
		{name: "sleep", args: []string{"sleep", "1ms"}},
		{name: "sleep stopped", args: []string{"sleep"}, ctx: stopped},
		{name: "alloc", args: []string{"alloc", "2"}, ctx: stopped, stdout: "allocated 2 MiB\n"},
		{name: "fill", args: []string{"fill", filepath.Join(dir, "f"), "3Ki"}, ctx: stopped, stdout: "wrote 3072 bytes to " + filepath.Join(dir, "f") + "\n"},
		{name: "no subcommand", code: 2, stderr: "testbox: no subcommand\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n"},
		{name: "unknown", args: []string{"dance"}, code: 2, stderr: "testbox: unknown subcommand \"dance\"\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n"},
		{name: "bad exit code", args: []string{"exit", "300"}, code: 2, stderr: "testbox: exit: \"300\": want a status from 0 to 255\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n"},
		{name: "bad flag", args: []string{"serve", "--port", "1"}, code: 2, stderr: "testbox: serve: flag provided but not defined: -port\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n"},
		{name: "missing argument", args: []string{"alloc"}, code: 2, stderr: "testbox: alloc: want 1 arguments, got []\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n"},
		{name: "bad size", args: []string{"fill", "x", "lots"}, code: 2, stderr: "testbox: fill: \"lots\": want a byte count such as 1048576 or 64Mi\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n"},
		{name: "fill error", args: []string{"fill", filepath.Join(dir, "no", "f"), "1"}, code: 1, stderr: "testbox: open " + filepath.Join(dir, "no", "f") + ": no such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			var stdout, stderr bytes.Buffer
			code := run(ctx, tc.args, []string{"B=2", "A=1"}, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr.String())
			}
			if diff := cmp.Diff(tc.stdout, stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.stderr, stderr.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFillWritesTheSize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	if err := fill(path, 3*mib+5); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 3*mib+5 {
		t.Errorf("size %d", st.Size())
	}
}

func TestAllocHoldsResidentMemory(t *testing.T) {
	t.Parallel()
	held := alloc(3)
	if len(held) != 3 || len(held[2]) != mib || held[2][4096] != 1 {
		t.Errorf("alloc(3) = %d slices", len(held))
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "10": 10, "2Ki": 2048, "64Mi": 64 << 20, "1Gi": 1 << 30} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1G", "Mi", "99999999999Gi"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

// spawn keeps its processes until stopped, then kills and reaps them.
func TestSpawn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	out, c := lines(t)
	done := make(chan error, 1)
	go func() { done <- spawn(ctx, 2, []string{"sleep", "60"}, out) }()
	line := next(t, c)
	rest, ok := strings.CutPrefix(line, "spawned 2 processes: ")
	if !ok {
		t.Fatalf("output %q", line)
	}
	pids := strings.Fields(rest)
	if len(pids) != 2 {
		t.Fatalf("pids %q", pids)
	}
	for _, p := range pids {
		if _, err := strconv.Atoi(p); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile("/proc/" + p + "/comm"); err != nil || string(b) != "sleep\n" {
			t.Errorf("process %s: %q, %v", p, b, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("spawn did not return")
	}
	for _, p := range pids {
		if _, err := os.Stat("/proc/" + p); err == nil {
			t.Errorf("process %s still there after spawn returned", p)
		}
	}
}

// TestStopExit: a subcommand ended by a stopping signal exits 0, or with
// TESTBOX_STOP_EXIT's status when set (a bad value counts as unset).
func TestStopExit(t *testing.T) {
	t.Parallel()
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		environ []string
		code    int
	}{
		{nil, 0},
		{[]string{"TESTBOX_STOP_EXIT=143"}, 143},
		{[]string{"TESTBOX_STOP_EXIT=300"}, 0},
		{[]string{"TESTBOX_STOP_EXIT=x"}, 0},
	} {
		if code := run(stopped, []string{"sleep"}, tc.environ, io.Discard, io.Discard); code != tc.code {
			t.Errorf("environ %q: exit %d, want %d", tc.environ, code, tc.code)
		}
	}
	if code := run(t.Context(), []string{"exit", "3"}, []string{"TESTBOX_STOP_EXIT=143"}, io.Discard, io.Discard); code != 3 {
		t.Errorf("exit 3 with TESTBOX_STOP_EXIT set: exit %d", code)
	}
}
