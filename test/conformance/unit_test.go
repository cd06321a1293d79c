package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary be the driver's binary, as the scripts the
// driver writes run it (supervise, systemctl), and a helper process for the
// process-group tests.
func TestMain(m *testing.M) {
	switch os.Getenv("NKCONF_TEST_AS") {
	case "main":
		main()
		os.Exit(0)
	case "":
	default:
		groupHelper(os.Getenv("NKCONF_TEST_AS"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestParseSystemctl: the commands the suite runs are accepted on the one
// unit, with or without .service; any other unit, verb or option is refused
// with an error naming it.
func TestParseSystemctl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    unitRequest
		wantErr string
	}{
		{"list running", []string{"list-units", "*kubelet*", "--state=running"}, unitRequest{verb: "list-units", pattern: "*kubelet*", onlyState: "running"}, ""},
		{"list all", []string{"list-units", "*kubelet*"}, unitRequest{verb: "list-units", pattern: "*kubelet*"}, ""},
		{"reset-failed short name", []string{"reset-failed", "kubelet-nkharness"}, unitRequest{verb: "reset-failed"}, ""},
		{"kill", []string{"kill", "kubelet-nkharness"}, unitRequest{verb: "kill"}, ""},
		{"restart full name", []string{"restart", "kubelet-nkharness.service"}, unitRequest{verb: "restart"}, ""},
		{"is-active quiet", []string{"is-active", "--quiet", "kubelet-nkharness"}, unitRequest{verb: "is-active", quiet: true}, ""},
		{"other unit", []string{"restart", "kubelet.service"}, unitRequest{}, `unit "kubelet.service" not found`},
		{"containerd", []string{"stop", "containerd"}, unitRequest{}, `unit "containerd" not found`},
		{"two units", []string{"stop", "kubelet-nkharness", "containerd"}, unitRequest{}, "want exactly one unit"},
		{"no unit", []string{"kill"}, unitRequest{}, "want exactly one unit"},
		{"other verb", []string{"mask", "--now", "locksmithd"}, unitRequest{}, `option "--now"`},
		{"daemon-reload", []string{"daemon-reload"}, unitRequest{}, `command "daemon-reload"`},
		{"kill with a signal", []string{"kill", "-s", "SIGKILL", "kubelet-nkharness"}, unitRequest{}, `option "-s"`},
		{"bad state", []string{"list-units", "--state=exited"}, unitRequest{}, "--state=exited"},
		{"nothing", nil, unitRequest{}, "no command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseSystemctl(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestListUnitsSuiteRegexp: the suite finds the unit with its regexp
// exactly while the agent runs, for --state=running.
func TestListUnitsSuiteRegexp(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`(kubelet-\w+)`)
	running := unitRequest{verb: "list-units", pattern: "*kubelet*", onlyState: "running"}
	any := unitRequest{verb: "list-units", pattern: "*kubelet*"}
	other := unitRequest{verb: "list-units", pattern: "*containerd*"}
	for _, tc := range []struct {
		r    unitRequest
		st   unitState
		want string
	}{
		{running, stateActive, "kubelet-nkharness"},
		{running, stateFailed, ""},
		{running, stateInactive, ""},
		{any, stateFailed, "kubelet-nkharness"},
		{any, stateInactive, "kubelet-nkharness"},
		{other, stateActive, ""},
	} {
		got := re.FindString(listUnits(tc.r, tc.st))
		if got != tc.want {
			t.Errorf("%+v in state %s: the suite's regexp finds %q, want %q", tc.r, tc.st, got, tc.want)
		}
	}
}

// TestUnitRestart drives the harness as the suite does, through the scripts
// the driver writes: the suite's kubelet script starts the supervisor of an
// agent; `sudo systemctl ...` on the driver's PATH lists it, kills it,
// restarts it with the config file as it is now, stops and starts it; other
// units are refused; SIGTERM to the supervisor (the services' kill) ends the
// agent with it.
func TestUnitRestart(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	binDir, pathDir := filepath.Join(dir, "bin"), filepath.Join(dir, "path")
	for _, d := range []string{binDir, pathDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fifo, cfg := filepath.Join(dir, "starts"), filepath.Join(dir, "kubelet-config")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, "v1")
	// The agent reports its pid and the config it read at start, then runs.
	agent := filepath.Join(dir, "agent")
	if err := writeScript(agent, fmt.Sprintf("[ \"$1\" = --config ] || exit 2\necho \"$$ $(cat \"$2\")\" > %s\nexec sleep 1000\n", shellQuote(fifo))); err != nil {
		t.Fatal(err)
	}
	// The harness binary is this test binary acting as the driver's.
	harness := filepath.Join(dir, "nkharness")
	if err := writeScript(harness, fmt.Sprintf("NKCONF_TEST_AS=main exec %s \"$@\"\n", shellQuote(self))); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "unit.sock")
	if err := writeUnitScripts(binDir, pathDir, harness, sock, []string{agent}); err != nil {
		t.Fatal(err)
	}
	// pathWithout's sudo, on the same PATH.
	sudo := filepath.Join(dir, "sudopath")
	if _, err := pathWithout(sudo, "systemctl", "systemd-run", "sudo"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(sudo, "sudo"), filepath.Join(pathDir, "sudo")); err != nil {
		t.Fatal(err)
	}
	path := pathDir + ":" + os.Getenv("PATH")

	ctx := t.Context()
	// Read and write, the fifo never blocks this open and never reads EOF
	// between two agents' lines (a writer's close after its line would).
	lines, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lines.Close() }) // ends the reader
	starts := make(chan string)
	go func() { // each start's line; the agent blocks until its line is written
		r := bufio.NewReader(lines)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case starts <- strings.TrimSpace(line):
			case <-ctx.Done():
				return
			}
		}
	}()
	nextStart := func(wantConfig string) int {
		t.Helper()
		select {
		case line := <-starts:
			pid, conf, _ := strings.Cut(line, " ")
			if conf != wantConfig {
				t.Fatalf("the agent started with config %q, want %q", conf, wantConfig)
			}
			n, err := strconv.Atoi(pid)
			if err != nil {
				t.Fatal(err)
			}
			return n
		case <-ctx.Done():
			t.Fatal("the agent did not start")
			return 0
		}
	}
	systemctl := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(pathDir, "sudo"), append([]string{"systemctl"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+path)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	mustSystemctl := func(args ...string) string {
		t.Helper()
		out, code := systemctl(args...)
		if code != 0 {
			t.Fatalf("systemctl %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return out
	}
	findRunning := func() string {
		t.Helper()
		return regexp.MustCompile(`(kubelet-\w+)`).FindString(mustSystemctl("list-units", "*kubelet*", "--state=running"))
	}

	sup := exec.Command(filepath.Join(binDir, "kubelet"), "--config", cfg)
	supLog, err := os.Create(filepath.Join(dir, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	sup.Stdout, sup.Stderr = supLog, supLog
	sup.Env = append(os.Environ(), "PATH="+path)
	// A group of its own: whatever fails, the test ends the supervisor and
	// its agent.
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-sup.Process.Pid, syscall.SIGKILL)
		sup.Wait()
		b, _ := os.ReadFile(supLog.Name())
		t.Logf("the supervisor's log:\n%s", b)
		supLog.Close()
	})
	pid1 := nextStart("v1")
	unit := findRunning()
	if unit != "kubelet-nkharness" {
		t.Fatalf("the suite's regexp finds %q while the agent runs, want kubelet-nkharness", unit)
	}

	// mustStopKubelet: reset-failed, kill, wait for the agent to be gone.
	mustSystemctl("reset-failed", unit)
	mustSystemctl("kill", unit)
	waitExit(t, pid1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The supervisor reaps the agent on its own goroutine: it answers
		// "failed" once it has.
		if _, code := systemctl("is-active", unit); code == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unit is still active 10 s after its agent died")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := findRunning(); got != "" {
		t.Errorf("after kill, list-units --state=running finds %q", got)
	}
	// The suite writes the new config, then restarts.
	writeFile(t, cfg, "v2")
	mustSystemctl("restart", unit)
	pid2 := nextStart("v2")
	if pid2 == pid1 {
		t.Fatalf("restart: the same pid %d", pid2)
	}
	if out := mustSystemctl("is-active", unit); strings.TrimSpace(out) != "active" {
		t.Errorf("is-active after restart: %q", out)
	}
	// A restart of a running agent stops it first.
	writeFile(t, cfg, "v3")
	mustSystemctl("restart", unit+".service")
	pid3 := nextStart("v3")
	waitExit(t, pid2)
	mustSystemctl("stop", unit)
	waitExit(t, pid3)
	if out, code := systemctl("is-active", unit); code != 3 || strings.TrimSpace(out) != "inactive" {
		t.Errorf("is-active after stop: exit %d, %q; want 3, inactive", code, out)
	}
	mustSystemctl("start", unit)
	pid4 := nextStart("v3")

	for _, args := range [][]string{{"restart", "kubelet.service"}, {"stop", "containerd"}, {"daemon-reload"}} {
		if out, code := systemctl(args...); code == 0 || !strings.Contains(out, "nodekeeper conformance harness") {
			t.Errorf("systemctl %s: exit %d, %q; want a refusal", strings.Join(args, " "), code, out)
		}
	}

	// The services' kill: SIGTERM to the suite's kubelet.
	if err := sup.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := sup.Wait(); err != nil {
		t.Errorf("the supervisor after SIGTERM: %v", err)
	}
	waitExit(t, pid4)
	if out, code := systemctl("is-active", unit); code != 1 || !strings.Contains(out, "the supervisor is not there") {
		t.Errorf("systemctl with no supervisor: exit %d, %q", code, out)
	}
}

// waitExit waits, without polling, for process pid to exit (a pidfd is
// readable then).
func waitExit(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	deadline, ok := t.Context().Deadline()
	ms := 60_000
	if ok {
		ms = int(time.Until(deadline).Milliseconds())
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("process %d is still running", pid)
		}
		return
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestExitState: systemd's clean exits leave the unit inactive; an exit
// code or SIGKILL fails it.
func TestExitState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		script string
		want   unitState
	}{
		{"exit 0", stateInactive},
		{"kill -TERM $$", stateInactive},
		{"exit 3", stateFailed},
		{"kill -KILL $$", stateFailed},
	} {
		err := exec.Command("sh", "-c", tc.script).Run()
		if got := exitState(err); got != tc.want {
			t.Errorf("%s (%v): %s, want %s", tc.script, err, got, tc.want)
		}
	}
}
