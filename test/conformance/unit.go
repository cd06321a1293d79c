package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The node e2e suite stops, starts and restarts its kubelet through systemd:
// `sudo systemctl list-units '*kubelet*' --state=running` finds the unit by
// the regexp (kubelet-\w+), then `systemctl reset-failed|kill|restart NAME`.
// The harness runs without the machine's systemd, so both agents get the
// same stand-in: the services start <k8s-bin-dir>/kubelet, a script that
// execs this program's `supervise` command, which runs the agent as its child
// and serves a unix socket; the suite's PATH has a `systemctl` script
// running this program's `systemctl` command, which knows that one unit and
// asks the supervisor over the socket. Nothing else is reachable through it.

// unitName is the supervised agent's unit as `systemctl list-units` shows
// it; the suite's regexp (kubelet-\w+) finds "kubelet-nkharness".
const unitName = "kubelet-nkharness.service"

// stopTimeout is how long stop and restart wait for the agent to exit after
// SIGTERM before SIGKILL (systemd's TimeoutStopSec is 90 s).
const stopTimeout = 90 * time.Second

// unitRequest is one systemctl command the shim accepts.
type unitRequest struct {
	verb      string // list-units, reset-failed, kill, stop, start, restart, is-active
	pattern   string // list-units: the glob, "" for every unit
	onlyState string // list-units --state=, "" for any
	quiet     bool   // is-active --quiet
}

// parseSystemctl reads a systemctl command line (without "systemctl"). It
// accepts only what the suite runs, on the one unit: any other verb, unit or
// option is an error that names it.
func parseSystemctl(args []string) (unitRequest, error) {
	var r unitRequest
	var rest []string
	for _, a := range args {
		switch {
		case a == "--quiet" || a == "-q":
			r.quiet = true
		case a == "--no-pager" || a == "--no-legend" || a == "--plain" || a == "--full" || a == "--all":
			// presentation only
		case strings.HasPrefix(a, "--state="):
			r.onlyState = strings.TrimPrefix(a, "--state=")
			if r.onlyState != "running" && r.onlyState != "active" && r.onlyState != "failed" && r.onlyState != "inactive" {
				return r, fmt.Errorf("--state=%s: this harness's systemctl knows running, active, inactive and failed", r.onlyState)
			}
		case strings.HasPrefix(a, "-"):
			return r, fmt.Errorf("option %q: not supported by this harness's systemctl (it supervises only %s)", a, unitName)
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return r, errors.New("no command: this harness's systemctl supports list-units, reset-failed, kill, stop, start, restart and is-active")
	}
	r.verb, rest = rest[0], rest[1:]
	switch r.verb {
	case "list-units":
		if len(rest) > 1 {
			return r, fmt.Errorf("list-units: one pattern at most, got %q", rest)
		}
		if len(rest) == 1 {
			if _, err := path.Match(rest[0], ""); err != nil {
				return r, fmt.Errorf("list-units: pattern %q: %w", rest[0], err)
			}
			r.pattern = rest[0]
		}
		return r, nil
	case "reset-failed", "kill", "stop", "start", "restart", "is-active":
		if r.onlyState != "" {
			return r, fmt.Errorf("%s: --state is an option of list-units", r.verb)
		}
		if len(rest) != 1 {
			return r, fmt.Errorf("%s: want exactly one unit (%s), got %q", r.verb, unitName, rest)
		}
		if rest[0] != unitName && rest[0]+".service" != unitName {
			return r, fmt.Errorf("%s: unit %q not found: this harness's systemctl supervises only %s", r.verb, rest[0], unitName)
		}
		return r, nil
	default:
		return r, fmt.Errorf("command %q: not supported by this harness's systemctl (list-units, reset-failed, kill, stop, start, restart, is-active on %s only)", r.verb, unitName)
	}
}

// unitState is the supervised agent's state as systemd would name it:
// active (running), inactive (stopped, or exited 0 or on SIGTERM) or failed
// (exited otherwise, SIGKILL included, until reset-failed or a start).
type unitState string

const (
	stateActive   unitState = "active"
	stateInactive unitState = "inactive"
	stateFailed   unitState = "failed"
)

// listUnits is what `systemctl list-units` prints for the unit in state st
// given r's pattern and --state filter.
func listUnits(r unitRequest, st unitState) string {
	show := r.pattern == "" || matchUnit(r.pattern)
	sub := map[unitState]string{stateActive: "running", stateInactive: "dead", stateFailed: "failed"}[st]
	switch r.onlyState {
	case "":
	case "running":
		show = show && sub == "running"
	default:
		show = show && (r.onlyState == string(st) || r.onlyState == sub)
	}
	if !show {
		return "0 loaded units listed.\n"
	}
	return fmt.Sprintf("  UNIT LOAD ACTIVE SUB DESCRIPTION\n  %s loaded %s %s nodekeeper conformance harness: the agent under test\n\n1 loaded units listed.\n", unitName, st, sub)
}

// matchUnit reports whether the glob pattern matches the unit, with or
// without its .service suffix, as systemd matches unit globs.
func matchUnit(pattern string) bool {
	for _, n := range []string{unitName, strings.TrimSuffix(unitName, ".service")} {
		if ok, _ := path.Match(pattern, n); ok {
			return true
		}
	}
	return false
}

// systemctlCmd is the `systemctl` the suite finds on its PATH: it parses the
// command line and asks the supervisor at $NKHARNESS_SOCKET (set by the
// script the driver writes). Exit codes follow
// systemctl: 0 done, 1 error, 3 is-active of a unit that is not active.
func systemctlCmd(args []string) int {
	sock := os.Getenv("NKHARNESS_SOCKET")
	r, err := parseSystemctl(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "systemctl (nodekeeper conformance harness):", err)
		return 1
	}
	if sock == "" {
		fmt.Fprintln(os.Stderr, "systemctl (nodekeeper conformance harness): NKHARNESS_SOCKET is not set: the driver sets it in this script")
		return 1
	}
	reply, err := askSupervisor(sock, r.verb)
	if err != nil {
		fmt.Fprintf(os.Stderr, "systemctl (nodekeeper conformance harness): %s %s: %v\n", r.verb, unitName, err)
		return 1
	}
	switch r.verb {
	case "list-units":
		fmt.Print(listUnits(r, unitState(reply)))
	case "is-active":
		if !r.quiet {
			fmt.Println(reply)
		}
		if unitState(reply) != stateActive {
			return 3
		}
	}
	return 0
}

// askSupervisor sends one request line and returns the reply line: "ok
// STATE" is success, "error MSG" a failure.
func askSupervisor(sock, verb string) (string, error) {
	conn, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		return "", fmt.Errorf("the supervisor is not there (is the agent's run over?): %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(stopTimeout + 30*time.Second)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(conn, verb); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer from the supervisor: %w", err)
	}
	status, msg, _ := strings.Cut(strings.TrimSpace(line), " ")
	if status != "ok" {
		return "", errors.New(msg)
	}
	return msg, nil
}

// supervisor runs the agent under test as its child, as systemd runs a unit:
// it starts, stops, kills and restarts it on request, each time with the same
// command line (the suite's flags, whose --config names <cwd>/kubelet-config,
// read again at each start). One goroutine, serve's, touches the process.
type supervisor struct {
	argv []string // the agent's command line
	log  *slog.Logger

	mu    sync.Mutex // guards proc, state
	proc  *os.Process
	exit  chan struct{} // closed when proc has exited
	state unitState
}

// superviseCmd is the program the suite starts as its kubelet:
// `supervise -socket S -- AGENT ARGS...`. It runs the agent until it gets
// SIGTERM or SIGINT (the services' kill, or its parent's death), then stops it
// and exits.
func superviseCmd(args []string) error {
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	sock := fs.String("socket", "", "the unix socket the harness's systemctl asks")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *sock == "" || fs.NArg() == 0 {
		return usageError{errors.New("supervise: want -socket PATH -- AGENT [ARGS...]")}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	s := &supervisor{argv: fs.Args(), log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("subsystem", "nkharness")}
	return s.run(ctx, *sock)
}

// run starts the agent, serves requests on sock until ctx is done, then
// stops the agent.
func (s *supervisor) run(ctx context.Context, sock string) error {
	os.Remove(sock) // a killed run's
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := s.start(); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			s.stop()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.serve(conn)
	}
}

// serve answers one request. Requests are served one at a time.
func (s *supervisor) serve(conn net.Conn) {
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return
	}
	verb := strings.TrimSpace(line)
	s.log.Info("systemctl", "verb", verb, "unit", unitName)
	err = nil
	switch verb {
	case "list-units", "is-active":
	case "reset-failed":
		s.mu.Lock()
		if s.state == stateFailed {
			s.state = stateInactive
		}
		s.mu.Unlock()
	case "kill":
		s.signal(syscall.SIGTERM)
	case "stop":
		s.stop()
	case "start":
		err = s.start()
	case "restart":
		s.stop()
		err = s.start()
	default:
		err = fmt.Errorf("unknown request %q", verb)
	}
	if err != nil {
		fmt.Fprintf(conn, "error %v\n", err)
		return
	}
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	fmt.Fprintf(conn, "ok %s\n", st)
}

// start starts the agent unless it runs.
func (s *supervisor) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateActive {
		return nil
	}
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // the services' kubelet.log
	// The agent dies with its supervisor; it stays in the run's process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.state = stateFailed
		return fmt.Errorf("start %s: %w", s.argv[0], err)
	}
	s.log.Info("agent started", "pid", cmd.Process.Pid, "argv", strings.Join(s.argv, " "))
	exit := make(chan struct{})
	s.proc, s.exit, s.state = cmd.Process, exit, stateActive
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.state = exitState(err)
		s.log.Info("agent exited", "pid", cmd.Process.Pid, "err", err, "state", s.state)
		close(exit)
	}()
	return nil
}

// exitState is the unit's state after its process ended with err (from
// Wait): inactive for exit 0 and for the signals systemd counts as a clean
// exit (SIGHUP, SIGINT, SIGTERM, SIGPIPE), failed otherwise.
func exitState(err error) unitState {
	if err == nil {
		return stateInactive
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			switch ws.Signal() {
			case syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE:
				return stateInactive
			}
		}
	}
	return stateFailed
}

// signal sends sig to the running agent, if any.
func (s *supervisor) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateActive {
		s.proc.Signal(sig)
	}
}

// stop sends SIGTERM to the running agent and waits for it to exit, sending
// SIGKILL after stopTimeout.
func (s *supervisor) stop() {
	s.mu.Lock()
	exit, running := s.exit, s.state == stateActive
	s.mu.Unlock()
	if !running {
		return
	}
	s.signal(syscall.SIGTERM)
	select {
	case <-exit:
	case <-time.After(stopTimeout):
		s.signal(syscall.SIGKILL)
		<-exit
	}
}

// writeUnitScripts writes the suite's kubelet into binDir, a script that
// runs harness's supervisor of agentArgv on sock, and the suite's systemctl
// into pathDir, a script that runs harness's systemctl against sock. Both
// agents get the same scripts but for agentArgv.
func writeUnitScripts(binDir, pathDir, harness, sock string, agentArgv []string) error {
	quoted := make([]string, len(agentArgv))
	for i, a := range agentArgv {
		quoted[i] = shellQuote(a)
	}
	if err := writeScript(filepath.Join(binDir, "kubelet"), fmt.Sprintf(
		"# The node e2e suite starts this as its kubelet: the harness's supervisor runs the agent.\nexec %s supervise -socket %s -- %s \"$@\"\n",
		shellQuote(harness), shellQuote(sock), strings.Join(quoted, " "))); err != nil {
		return err
	}
	return writeScript(filepath.Join(pathDir, "systemctl"), fmt.Sprintf(
		"# The suite's systemctl: it knows only the agent's unit (%s).\nNKHARNESS_SOCKET=%s exec %s systemctl \"$@\"\n",
		unitName, shellQuote(sock), shellQuote(harness)))
}

// writeScript writes an executable shell script, replacing what is at path
// (a link included: never the file it points to).
func writeScript(path, body string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// copyExecutable copies this program to dst, for the scripts the suite runs
// (`go run` removes its binary when it exits; the copy is the run's).
func copyExecutable(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
