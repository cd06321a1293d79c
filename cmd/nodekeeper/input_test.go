package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestMain runs the command itself when the test binary is started with
// NODEKEEPER_TEST_MAIN=1, for tests that need a real process (signals, another
// user); with NODEKEEPER_TEST_POST=URL it POSTs its standard input to URL as
// YAML and prints the answer's status code, as any local program could.
func TestMain(m *testing.M) {
	if os.Getenv("NODEKEEPER_TEST_MAIN") == "1" {
		os.Args = append([]string{"nodekeeper"}, os.Args[1:]...)
		main()
	}
	if url := os.Getenv("NODEKEEPER_TEST_POST"); url != "" {
		resp, err := http.Post(url, "application/yaml", os.Stdin)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestInputSizeLimit gives /dev/zero, which never ends, to every input file
// flag of every explain command: each stops at --max-input-size with one line
// naming the file and the limit, exit 2.
func TestInputSizeLimit(t *testing.T) {
	t.Parallel()
	const zero = "/dev/zero"
	ev := map[string]string{"--pods": "../../examples/eviction/memory/pods.json", "--summary": "../../examples/eviction/memory/summary.json"}
	gc := map[string]string{"--images": imagegcExample + "images.json", "--containers": imagegcExample + "containers.json",
		"--imagefs": imagegcExample + "imagefs.json", "--capacity": "100Gi"}
	pre := map[string]string{"--pods": "../../examples/preemption/running.json", "--pod": "../../examples/preemption/critical-pod.yaml",
		"--capacity": "cpu=4,memory=8Gi"}
	args := func(cmd string, base map[string]string, flag string) []string {
		out := []string{"--max-input-size", "64Ki", "explain", cmd}
		for f, v := range base {
			if f != flag {
				out = append(out, f, v)
			}
		}
		return append(out, flag, zero)
	}
	cases := [][]string{
		{"--max-input-size", "64Ki", "explain", "oom", "--memory-capacity", "1Gi", "--pods", zero},
		args("eviction", ev, "--pods"), args("eviction", ev, "--summary"), args("eviction", ev, "--config"),
		args("imagegc", gc, "--images"), args("imagegc", gc, "--containers"), args("imagegc", gc, "--imagefs"),
		args("imagegc", gc, "--records"), args("imagegc", gc, "--config"),
		args("preemption", pre, "--pods"), args("preemption", pre, "--pod"), args("preemption", pre, "--config"),
	}
	for _, a := range cases {
		t.Run(strings.Join(a[2:], " "), func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, a...)
			want := "nodekeeper: /dev/zero: larger than the input size limit of 64Ki (65536 bytes; see --max-input-size)\n"
			if code != exitUsage || errOut != want {
				t.Errorf("exit %d, stderr %q; want exit %d, %q", code, errOut, exitUsage, want)
			}
		})
	}
}

func TestMaxInputSizeFlag(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, "--max-input-size", "0", "explain", "oom", "--memory-capacity", "1Gi", "--pods", "../../examples/oom/pods.json")
	if code != exitUsage || !strings.HasPrefix(errOut, `nodekeeper: --max-input-size: "0": `) {
		t.Errorf("exit %d, stderr %q; want a usage error about --max-input-size", code, errOut)
	}
	code, _, errOut = runCLI(t, "--max-input-size", "1Mi", "explain", "oom", "--memory-capacity", "1Gi", "--pods", "../../examples/oom/pods.json")
	if code != 0 {
		t.Errorf("exit %d, stderr %q; want 0", code, errOut)
	}
}

// TestInterrupt runs nodekeeper as a process reading pods from a FIFO whose
// writer sends nothing, sends it SIGINT or SIGTERM, and expects exit 130 with
// one line, within 1 s: explain's input, and each file run reads (a daemon,
// which gets 60 s to shut down once it runs, must not wait them on a read).
func TestInterrupt(t *testing.T) {
	t.Parallel()
	oom := func(_, fifo string) []string {
		return []string{"explain", "oom", "--memory-capacity", "1Gi", "--pods", fifo}
	}
	runWith := func(flag string, dropIn bool) func(dir, fifo string) []string {
		return func(dir, fifo string) []string {
			arg := fifo
			if dropIn {
				arg = filepath.Dir(fifo)
			}
			return []string{"run", "--root-dir", filepath.Join(dir, "root"), "--status-interval", "0", flag, arg}
		}
	}
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		fifo string // the FIFO's path under the test's directory
		args func(dir, fifo string) []string
	}{
		{"reading/SIGINT", syscall.SIGINT, "pods", oom},
		{"reading/SIGTERM", syscall.SIGTERM, "pods", oom},
		{"run --config/SIGINT", syscall.SIGINT, "config", runWith("--config", false)},
		{"run --config/SIGTERM", syscall.SIGTERM, "config", runWith("--config", false)},
		{"run --config-dir/SIGINT", syscall.SIGINT, "conf.d/10-fifo.conf", runWith("--config-dir", true)},
		{"run --kubeconfig/SIGINT", syscall.SIGINT, "kubeconfig", runWith("--kubeconfig", false)},
	} {
		sig := tc.sig
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			fifo := filepath.Join(dir, tc.fifo)
			if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
			cmd := exec.Command(os.Args[0], tc.args(dir, fifo)...)
			cmd.Env = append(os.Environ(), "NODEKEEPER_TEST_MAIN=1")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// The open returns once the process has the FIFO open for
			// reading: it has its signal handler and blocks in the read.
			opened := make(chan *os.File, 1)
			go func() {
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					w = nil
				}
				opened <- w
			}()
			select {
			case w := <-opened:
				if w == nil {
					t.Fatal("cannot open the FIFO for writing")
				}
				defer w.Close()
			case err := <-exited:
				t.Fatalf("exited before reading the FIFO: %v; stderr %q", err, stderr.String())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			var err error
			select {
			case err = <-exited:
			case <-ctx.Done():
				t.Fatalf("still running 1 s after %v", sig)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
				t.Errorf("exit %v after %v, want %d", err, time.Since(sent), exitInterrupted)
			}
			if got := stderr.String(); got != "nodekeeper: interrupted\n" {
				t.Errorf("stderr %q, want one line %q", got, "nodekeeper: interrupted")
			}
		})
	}
}

// TestInterruptAbandonsBusyCommand: a command busy without looking at ctx
// (parsing a huge file) is abandoned when ctx is cancelled: exit 130, one line.
func TestInterruptAbandonsBusyCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	busy := &cobra.Command{
		Use: "busy",
		RunE: func(*cobra.Command, []string) error {
			close(started)
			<-release // ignores ctx, as a long parse does
			return nil
		},
	}
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- execute(ctx, busy, interruptGrace, &stderr) }()
	<-started
	cancel()
	if got := <-code; got != exitInterrupted {
		t.Errorf("exit %d, want %d", got, exitInterrupted)
	}
	if got := stderr.String(); got != "nodekeeper: interrupted\n" {
		t.Errorf("stderr %q, want %q", got, "nodekeeper: interrupted\n")
	}
}

// TestGraceFor: a daemon gets shutdownGrace to stop after a signal; every
// other command interruptGrace.
func TestGraceFor(t *testing.T) {
	t.Parallel()
	root := &cobra.Command{Use: "nodekeeper"}
	root.AddCommand(&cobra.Command{Use: "run", Annotations: map[string]string{annotationDaemon: "true"}, Run: func(*cobra.Command, []string) {}},
		&cobra.Command{Use: "explain", Run: func(*cobra.Command, []string) {}})
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"run", "--config", "x"}, shutdownGrace},
		{[]string{"explain"}, interruptGrace},
		{[]string{"nosuch"}, interruptGrace},
	} {
		if got := graceFor(root, tc.args); got != tc.want {
			t.Errorf("graceFor(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
