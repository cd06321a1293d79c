package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
)

// exitCodeError ends the process with the exit code of the command run in a
// container, printing nothing more (the command printed its own error).
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", e.code)
}

func newExecCmd() *cobra.Command {
	var (
		at         agentTarget
		ref        podRef
		stdin, tty bool
	)
	cmd := &cobra.Command{
		Use:   "exec POD [-c CONTAINER] [-n NAMESPACE] [-i] [-t] [--root-dir DIR | --socket PATH] -- COMMAND [ARG...]",
		Short: "Run a command in a running container, as kubectl exec does",
		Long: `Runs COMMAND in a running container of a pod that a running 'nodekeeper run'
runs, through the agent's root-only unix socket ROOT_DIR/nodekeeper.sock
(default ` + defaultSocket + `; the read-only port never serves exec) and
the runtime's CRI streaming server, as the kubelet API's /exec does. The
container is -c, else the pod's ` + defaultContainerAnnotation + ` annotation,
else its only container. -i passes this command's standard input; -t
gives the command a terminal (with -i: this terminal in raw mode, its size
followed, Ctrl-C sent to the command). nodekeeper exits with the command's
exit code.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash < 0 && len(args) > 1:
				return badInput(fmt.Errorf("exec %s %s: put -- before the command: exec POD -- COMMAND [ARG...]", args[0], strings.Join(args[1:], " ")))
			case dash > 1:
				return badInput(fmt.Errorf("exec %s: one pod before --, the command after it", strings.Join(args[:dash], " ")))
			case len(args) < 2:
				return badInput(errors.New("exec needs a command: exec POD -- COMMAND [ARG...]"))
			}
			c, base, sock, err := at.client(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pod, ctr, st, err := ref.resolve(ctx, c, base, sock, args[0])
			if err != nil {
				return err
			}
			if st == nil || st.State.Running == nil {
				return fmt.Errorf("container %q of pod %s/%s is not running (%s): exec runs only in a running container", ctr, pod.Namespace, pod.Name, stateText(st))
			}
			s := session{sock: sock, stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr()}
			if stdin {
				s.stdin = cmd.InOrStdin()
			}
			if tty {
				f, ok := cmd.InOrStdin().(*os.File)
				if !ok || !term.IsTerminal(int(f.Fd())) {
					fmt.Fprintln(cmd.ErrOrStderr(), "Unable to use a TTY - input is not a terminal or the right kind of file")
				} else {
					s.tty = f
				}
			}
			return s.run(ctx, pod, ctr, args[1:])
		},
	}
	ref.flags(cmd)
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "pass standard input to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal (standard input must be one)")
	at.socketFlags(cmd, "exec runs")
	return cmd
}

// stateText says in a few words what a container's status shows.
func stateText(st *v1.ContainerStatus) string {
	switch {
	case st == nil:
		return "no status yet"
	case st.State.Terminated != nil:
		t := st.State.Terminated
		return fmt.Sprintf("terminated: %s, exit code %d", t.Reason, t.ExitCode)
	case st.State.Waiting != nil:
		return "waiting: " + st.State.Waiting.Reason
	}
	return "no state"
}

// session is one exec through the agent's socket.
type session struct {
	sock           string
	stdin          io.Reader // nil: none
	stdout, stderr io.Writer
	// tty is the terminal the command gets (this process's standard input),
	// nil for none.
	tty *os.File
}

// run runs argv in container ctr of pod and returns nil when it exited 0,
// an exitCodeError with its exit code, or why it could not run.
func (s *session) run(ctx context.Context, pod *v1.Pod, ctr string, argv []string) error {
	q := url.Values{"command": argv}
	q.Set(v1.ExecStdoutParam, "true")
	if s.stdin != nil {
		q.Set(v1.ExecStdinParam, "true")
	}
	opts := remotecommand.StreamOptions{Stdin: s.stdin, Stdout: s.stdout}
	if s.tty != nil {
		q.Set(v1.ExecTTYParam, "true")
		opts.Tty = true
	} else {
		q.Set(v1.ExecStderrParam, "true")
		opts.Stderr = s.stderr
	}
	u := &url.URL{Scheme: "http", Host: "localhost", RawQuery: q.Encode(),
		Path: "/exec/" + pod.Namespace + "/" + pod.Name + "/" + ctr}
	rt := &unixUpgrader{sock: s.sock}
	ex, err := remotecommand.NewSPDYExecutorForTransports(rt, rt, http.MethodPost, u)
	if err != nil {
		return err
	}
	if s.tty != nil && s.stdin != nil {
		fd := int(s.tty.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("terminal: %w", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
	}
	if s.tty != nil {
		sizes := newTerminalSizes(int(s.tty.Fd()))
		defer sizes.stop()
		opts.TerminalSizeQueue = sizes
	}
	err = ex.StreamWithContext(ctx, opts)
	var ce exec.CodeExitError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &ce):
		return exitCodeError{code: ce.Code}
	}
	return err
}

// terminalSizes is remotecommand's TerminalSizeQueue for the terminal fd:
// its size first, then again on each SIGWINCH, until stop.
type terminalSizes struct {
	fd    int
	winch chan os.Signal
	done  chan struct{}
	first bool
}

func newTerminalSizes(fd int) *terminalSizes {
	t := &terminalSizes{fd: fd, winch: make(chan os.Signal, 1), done: make(chan struct{}), first: true}
	signal.Notify(t.winch, syscall.SIGWINCH)
	return t
}

// Next blocks until the terminal's size is known or changes, and returns
// it; nil once stopped. remotecommand calls it from one goroutine.
func (t *terminalSizes) Next() *remotecommand.TerminalSize {
	for {
		if !t.first {
			select {
			case <-t.done:
				return nil
			case <-t.winch:
			}
		}
		t.first = false
		w, h, err := term.GetSize(t.fd)
		if err != nil || w <= 0 || h <= 0 {
			continue
		}
		return &remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
	}
}

// stop ends Next and the SIGWINCH subscription.
func (t *terminalSizes) stop() {
	signal.Stop(t.winch)
	close(t.done)
}

// unixUpgrader is the SPDY transport and upgrader of one exec request: it
// dials the agent's unix socket, sends the upgrade request and hands the
// upgraded connection to a SPDY client connection. client-go's own SPDY
// round tripper dials TCP only.
type unixUpgrader struct {
	sock string
	conn net.Conn // the upgraded connection, set by RoundTrip
}

// RoundTrip sends req, an upgrade to SPDY, on a new connection to the
// socket and returns the answer; on 101 the connection is kept for
// NewConnection.
func (u *unixUpgrader) RoundTrip(req *http.Request) (*http.Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(req.Context(), "unix", u.sock)
	if err != nil {
		return nil, unreachable(u.sock, err)
	}
	req = req.Clone(req.Context())
	req.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	req.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	if err := req.Write(conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		_ = conn.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		return resp, nil
	}
	u.conn = &bufferedConn{Conn: conn, r: br}
	return resp, nil
}

// NewConnection makes the SPDY client connection on the upgraded
// connection, or returns the agent's refusal as one line.
func (u *unixUpgrader) NewConnection(resp *http.Response) (httpstream.Connection, error) {
	if resp.StatusCode != http.StatusSwitchingProtocols || u.conn == nil {
		body, _ := io.ReadAll(resp.Body)
		return nil, agentRefusal(u.sock, "exec", resp.StatusCode, body)
	}
	return spdy.NewClientConnectionWithPings(u.conn, 5*time.Second)
}

// bufferedConn reads first what the upgrade's reader buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
