package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupHelper is the test binary as a stand-in of ginkgo and the suite:
// "leader-wait" and "leader-die" start a "listener" child (the suite's
// services: a loopback port, SIGTERM ignored as a stuck process would) and
// print its port; leader-wait then runs until interrupted, leader-die kills
// itself with SIGKILL.
func groupHelper(role string) {
	switch role {
	case "listener":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		fmt.Println(l.Addr().(*net.TCPAddr).Port, syscall.Getpgrp())
		select {}
	case "leader-wait", "leader-die":
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "NKCONF_TEST_AS=listener")
		out, err := child.StdoutPipe()
		if err != nil {
			os.Exit(1)
		}
		if err := child.Start(); err != nil {
			os.Exit(1)
		}
		port, _ := bufio.NewReader(out).ReadString('\n')
		fmt.Print(port)
		if role == "leader-die" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		child.Wait() // until SIGINT ends this process
	}
	os.Exit(2)
}

// TestRunGroupEndsTheRun: whether ginkgo is interrupted (the driver's
// SIGINT) or killed, nothing of its process group is left once runGroup
// returns (a descendant that ignores SIGTERM included), and the port it held
// is free.
func TestRunGroupEndsTheRun(t *testing.T) {
	for _, role := range []string{"leader-wait", "leader-die"} {
		t.Run(role, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), "NKCONF_TEST_AS="+role)
			cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close() // after runGroup, which hands it to the helper
			cmd.Stdout = w
			done := make(chan error, 1)
			go func() { done <- runGroup(cmd, 100*time.Millisecond) }()
			line, err := bufio.NewReader(r).ReadString('\n')
			if err != nil {
				t.Fatalf("no port from the helper: %v", err)
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("the helper printed %q, want its port and group", line)
			}
			port, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			pgid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			// Whatever runGroup does, the test leaves none of its processes.
			t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
			if role == "leader-wait" {
				cancel() // the driver interrupted
			}
			select {
			case err := <-done:
				t.Logf("runGroup: %v", err)
			case <-t.Context().Done():
				t.Fatal("runGroup did not return")
			}
			if left := groupMembers(pgid); len(left) > 0 {
				t.Errorf("processes %v of the group are left", left)
			}
			// The group is gone; the kernel closes a dead process's
			// listener as the process is torn down, which under load can
			// lag its leaving /proc's group: allow it a few seconds.
			var l net.Listener
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Errorf("port %d is still held: %v", port, err)
			} else {
				l.Close()
			}
		})
	}
}
