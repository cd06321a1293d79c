package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	v1 "k8s.io/api/core/v1"
)

// execStreams are the streams of one exec session, as a runtime's
// streaming server sees them.
type execStreams struct {
	req                   *runtimeapi.ExecRequest
	stdin, resize         io.Reader // nil when not asked for
	stdout, stderr        io.Writer // nil when not asked for
	sizes                 chan remotecommand.TerminalSize
	stdinBytes            chan byte
	stdinDone             chan struct{}
	exitCode              int
	stdoutStream, errorSt httpstream.Stream
	stderrStream          httpstream.Stream // nil: none
}

// fakeStreaming is a runtime's streaming server for exec (SPDY, protocol
// v4.channel.k8s.io): it waits for the session's streams, then calls
// handle with them and answers the exit code handle returns.
func fakeStreaming(t *testing.T, a *debugAgent, handle func(s *execStreams) int) {
	t.Helper()
	var mu sync.Mutex
	var reqs []*runtimeapi.ExecRequest // by the number in the session's URL
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		mu.Lock()
		req := reqs[n]
		mu.Unlock()
		if _, err := httpstream.Handshake(r, w, []string{rcconst.StreamProtocolV4Name}); err != nil {
			t.Error(err)
			return
		}
		streams := make(chan httpstream.Stream, 5)
		conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
			streams <- s
			return nil
		})
		if conn == nil {
			t.Error("upgrade failed")
			return
		}
		defer conn.Close()
		want := 2 // error, stdout
		if req.Stdin {
			want++
		}
		if req.Tty {
			want++ // resize
		} else if req.Stderr {
			want++
		}
		s := &execStreams{req: req, sizes: make(chan remotecommand.TerminalSize, 10)}
		for range want {
			st := <-streams
			switch st.Headers().Get(v1.StreamType) {
			case v1.StreamTypeError:
				s.errorSt = st
			case v1.StreamTypeStdin:
				s.stdin = st
			case v1.StreamTypeStdout:
				s.stdout, s.stdoutStream = st, st
			case v1.StreamTypeStderr:
				s.stderr, s.stderrStream = st, st
			case v1.StreamTypeResize:
				s.resize = st
			}
		}
		if s.resize != nil {
			go func() {
				d := json.NewDecoder(s.resize)
				for {
					var size remotecommand.TerminalSize
					if d.Decode(&size) != nil {
						return
					}
					s.sizes <- size
				}
			}()
		}
		code := handle(s)
		s.stdoutStream.Close()
		if s.stderrStream != nil {
			s.stderrStream.Close()
		}
		status := metav1.Status{Status: metav1.StatusSuccess}
		if code != 0 {
			status = metav1.Status{Status: metav1.StatusFailure, Reason: rcconst.NonZeroExitCodeReason,
				Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: rcconst.ExitCodeCauseType, Message: strconv.Itoa(code)}}}}
		}
		if err := json.NewEncoder(s.errorSt).Encode(status); err != nil {
			t.Error(err)
		}
		s.errorSt.Close()
		<-conn.CloseChan()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a.exec = func(r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		reqs = append(reqs, r)
		return &runtimeapi.ExecResponse{Url: fmt.Sprintf("%s/exec/%d", srv.URL, len(reqs)-1)}, nil
	}
}

// TestExec runs commands through the socket's /exec: their output, their
// stdin, their exit code as nodekeeper's; and the refusals.
func TestExec(t *testing.T) {
	t.Parallel()
	a, sock := newDebugAgent(t)
	fakeStreaming(t, a, func(s *execStreams) int {
		fmt.Fprintf(s.stdout, "%s in %s: %q\n", s.req.Cmd[0], s.req.ContainerId, s.req.Cmd[1:])
		if s.stdin != nil {
			in, _ := io.ReadAll(s.stdin)
			fmt.Fprintf(s.stdout, "stdin %q\n", in)
		}
		if s.stderr != nil {
			fmt.Fprintln(s.stderr, "to stderr")
		}
		if s.req.Cmd[0] == "exit" {
			n, _ := strconv.Atoi(s.req.Cmd[1])
			return n
		}
		return 0
	})
	tests := []struct {
		name                string
		args                []string
		stdin               string
		wantCode            int
		wantOut, wantStderr string
	}{
		{"output", []string{"web", "--", "env", "-x"}, "", 0, "env in c2: [\"-x\"]\n", "to stderr\n"},
		{"stdin", []string{"-i", "multi", "-c", "b", "--", "cat"}, "hello", 0, "cat in cb: []\nstdin \"hello\"\n", "to stderr\n"},
		{"exit code", []string{"web", "--", "exit", "3"}, "", 3, "exit in c2: [\"3\"]\n", "to stderr\n"},
		{"tty without a terminal", []string{"-t", "web", "--", "sh"}, "", 0, "sh in c2: []\n",
			"Unable to use a TTY - input is not a terminal or the right kind of file\nto stderr\n"},
		{"stopped container", []string{"-n", "jobs", "done", "--", "true"}, "", 1, "",
			"nodekeeper: container \"job\" of pod jobs/done is not running (terminated: Completed, exit code 0): exec runs only in a running container\n"},
		{"unknown pod", []string{"nope", "--", "true"}, "", 1, "",
			"nodekeeper: pod \"nope\" not found in namespace \"default\" (nodekeeper get pods lists the pods)\n"},
		{"unknown container", []string{"web", "-c", "nope", "--", "true"}, "", 1, "",
			"nodekeeper: container \"nope\" is not valid for pod \"web\": choose one of: [app]\n"},
		{"container to choose", []string{"multi", "--", "true"}, "", 1, "",
			"nodekeeper: a container name must be specified for pod multi, choose one of: [a b] or one of the init containers: [setup] (-c)\n"},
		{"no command", []string{"web"}, "", 2, "", "nodekeeper: exec needs a command: exec POD -- COMMAND [ARG...]\n"},
		{"no --", []string{"web", "ls"}, "", 2, "", "nodekeeper: exec web ls: put -- before the command: exec POD -- COMMAND [ARG...]\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			root := newRootCmd(slog.New(slog.DiscardHandler))
			args := append([]string{"exec", "--socket", sock}, tc.args...)
			root.SetArgs(args)
			root.SetIn(bytes.NewBufferString(tc.stdin))
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			code := execute(t.Context(), root, interruptGrace, &stderr)
			if code != tc.wantCode || stdout.String() != tc.wantOut || stderr.String() != tc.wantStderr {
				t.Errorf("%v = %d, stdout %q, stderr %q; want %d, %q, %q", args, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantOut, tc.wantStderr)
			}
		})
	}
}

// TestExecRuntimeRefuses: the runtime refuses the exec (the container
// stopped after the agent's last look): one line, exit 1.
func TestExecRuntimeRefuses(t *testing.T) {
	t.Parallel()
	a, sock := newDebugAgent(t)
	a.exec = func(*runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
		return nil, fmt.Errorf("container c2 is not running")
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"exec", "--socket", sock, "web", "--", "true"}, &stdout, &stderr)
	if want := "nodekeeper: container c2 is not running\n"; code != 1 || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want 1, %q", code, stderr.String(), want)
	}
}

// openPTY returns a new pseudo-terminal's controller and its terminal.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ptmx = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

// TestExecTerminal runs exec -it on a pseudo-terminal: the command gets
// the terminal's size, then its new size after SIGWINCH; Ctrl-C reaches
// the command as a byte (the terminal is raw, no signal here), and the
// terminal's mode is restored afterwards.
func TestExecTerminal(t *testing.T) {
	// Not parallel: it takes SIGWINCH for the process.
	a, sock := newDebugAgent(t)
	ptmx, tty := openPTY(t)
	setSize := func(cols, rows uint16) {
		if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
			t.Fatal(err)
		}
	}
	setSize(80, 24)
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	sizes := make(chan remotecommand.TerminalSize, 10)
	got := make(chan byte, 10)
	fakeStreaming(t, a, func(s *execStreams) int {
		if !s.req.Tty || !s.req.Stdin || s.req.Stderr {
			t.Errorf("exec request %v: want tty and stdin, no stderr", s.req)
		}
		go func() {
			for sz := range s.sizes {
				sizes <- sz
			}
		}()
		fmt.Fprint(s.stdout, "$ ")
		b := make([]byte, 1)
		for {
			if _, err := s.stdin.Read(b); err != nil {
				return 1
			}
			got <- b[0]
			if b[0] == 3 {
				return 130
			}
		}
	})
	wait := func(what string, ch any) any {
		t.Helper()
		switch c := ch.(type) {
		case chan remotecommand.TerminalSize:
			select {
			case v := <-c:
				return v
			case <-time.After(30 * time.Second):
			}
		case chan byte:
			select {
			case v := <-c:
				return v
			case <-time.After(30 * time.Second):
			}
		}
		t.Fatalf("no %s in 30s", what)
		return nil
	}
	var stdout, stderr bytes.Buffer
	root := newRootCmd(slog.New(slog.DiscardHandler))
	root.SetArgs([]string{"exec", "--socket", sock, "-it", "web", "--", "sh"})
	root.SetIn(tty)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	done := make(chan int, 1)
	go func() { done <- execute(t.Context(), root, interruptGrace, &stderr) }()
	if sz := wait("first size", sizes); sz != (remotecommand.TerminalSize{Width: 80, Height: 24}) {
		t.Errorf("first size = %v, want 80x24", sz)
	}
	setSize(120, 40)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if sz := wait("size after SIGWINCH", sizes); sz != (remotecommand.TerminalSize{Width: 120, Height: 40}) {
		t.Errorf("size after SIGWINCH = %v, want 120x40", sz)
	}
	if _, err := ptmx.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
	if b := wait("Ctrl-C", got); b != byte(3) {
		t.Errorf("the command read %q, want Ctrl-C (0x03)", b)
	}
	select {
	case code := <-done:
		if code != 130 {
			t.Errorf("exit %d (stderr %q), want the command's 130", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec still running 30s after the command ended")
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("terminal mode after exec = %+v, want it restored to %+v", after, before)
	}
	if stdout.String() != "$ " {
		t.Errorf("stdout = %q, want the prompt", stdout.String())
	}
}

// TestExecTerminalClosed closes the terminal in the middle of exec -it: the
// command's stdin ends, and exec ends with the command, without hanging.
func TestExecTerminalClosed(t *testing.T) {
	a, sock := newDebugAgent(t)
	ptmx, tty := openPTY(t)
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 80, Row: 24}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	fakeStreaming(t, a, func(s *execStreams) int {
		close(started)
		_, _ = io.Copy(io.Discard, s.stdin) // until the client closes stdin
		return 7
	})
	var stdout, stderr bytes.Buffer
	root := newRootCmd(slog.New(slog.DiscardHandler))
	root.SetArgs([]string{"exec", "--socket", sock, "-it", "web", "--", "sh"})
	root.SetIn(tty)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	done := make(chan int, 1)
	go func() { done <- execute(t.Context(), root, interruptGrace, &stderr) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no exec session in 30s")
	}
	ptmx.Close() // the terminal hangs up: reads of tty fail
	select {
	case code := <-done:
		if code != 7 {
			t.Errorf("exit %d (stderr %q), want the command's 7", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec still running 30s after its terminal was closed")
	}
}
