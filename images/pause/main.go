// Command pause is nodekeeper's sandbox image program: the first process of
// every pod sandbox, holding the pod's namespaces. It reaps the zombies that
// are reparented to it (as PID 1 of the pod's PID namespace) and sleeps until
// SIGINT or SIGTERM, then exits 0. It closes its stdout once it handles
// those signals.
//
// It is built static (CGO_ENABLED=0, -ldflags "-s -w") by images/mkimage.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: pause (takes no arguments)")
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// Outside a PID namespace of its own, take the orphans of its
	// descendants all the same.
	_ = setChildSubreaper()
	reap() // children that exited before Notify
	// pause has nothing to say; closing stdout tells a supervisor (the
	// tests) that the signal handlers are in place.
	_ = os.Stdout.Close()
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking. Signals
// coalesce, so one SIGCHLD may stand for several exits.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

func setChildSubreaper() error {
	const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
