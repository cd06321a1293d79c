package apiservertest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is a child process (etcd or kube-apiserver) that dies with this
// process.
type process struct {
	name string
	cmd  *exec.Cmd
	// exited is closed once the process has exited; err is set before.
	exited chan struct{}
	err    error
}

// startProcess starts bin with args, its output appended to logPath. The
// process gets SIGKILL when the thread that started it ends (Pdeathsig), so
// the starting goroutine stays locked to its thread until the process exits.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with this goroutine, after the
		// process has exited.
		defer logf.Close()
		if err := p.cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// stop sends SIGTERM and, if the process has not exited after grace,
// SIGKILL; it returns once the process has exited. It may be called again.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. Its
// user retries with another port when the bind fails (addressInUse).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// addressInUse reports whether the log at path says a port was taken.
func addressInUse(path string) bool {
	b, _ := os.ReadFile(path)
	return bytes.Contains(b, []byte("address already in use"))
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
