// Command testbox is nodekeeper's test workload, one static binary whose
// subcommands do what example pods and end-to-end tests need:
//
//	testbox serve [--http ADDR] [--tcp ADDR] [--grpc ADDR] [--fail-file PATH]
//	    HTTP /healthz, /readyz, /startupz; a TCP port; gRPC health
//	    (grpc.health.v1). POST /control/PROBE=fail|ok makes liveness,
//	    readiness, startup or tcp fail or recover; while PATH exists,
//	    liveness fails. ADDR is "PORT" or "HOST:PORT"; --http defaults to 8080.
//	testbox check PATH         exit 1 if PATH exists, else 0 (exec probes)
//	testbox alloc MIB          allocate MIB MiB, touch it, hold it
//	testbox fill PATH SIZE     write SIZE bytes (e.g. 64Mi) to PATH, keep it
//	testbox spawn [--alloc MIB] N   start N child processes (sleeping, or each
//	                           allocating MIB MiB) and keep them
//	testbox exit [--after D] CODE   exit with CODE after D (default 0s)
//	testbox env                print the environment, sorted
//	testbox print [--every D] [--count N] TEXT   print "TEXT 1" to "TEXT N",
//	                           one line every D, then exit 0 (container logs)
//	testbox sleep [D]          sleep for D, or until stopped
//
// Every long-running subcommand ends with exit status 0 on SIGTERM or SIGINT
// (testbox often runs as PID 1 of its container, which gets no default
// signal handling), or with TESTBOX_STOP_EXIT's status when that is set (143
// is what a shell killed by SIGTERM exits with): a pod whose containers exit
// 0 when stopped ends Succeeded even when evicted or preempted, as with the
// kubelet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCode asks run to exit with a status.
type exitCode int

func (e exitCode) Error() string { return "exit " + strconv.Itoa(int(e)) }

// stopExitEnv names the exit status for a subcommand ended by a signal.
const stopExitEnv = "TESTBOX_STOP_EXIT"

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, environ, stdout)
	var code exitCode
	var usage usageError
	switch {
	case err == nil && ctx.Err() != nil:
		return stopExit(environ)
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "testbox: %v\nusage: testbox serve|check|alloc|fill|spawn|exit|env|print|sleep ...\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "testbox: %v\n", err)
		return 1
	}
}

// stopExit is the exit status after a stopping signal: TESTBOX_STOP_EXIT's,
// else 0.
func stopExit(environ []string) int {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, stopExitEnv+"="); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 255 {
				return n
			}
		}
	}
	return 0
}

func dispatch(ctx context.Context, args, environ []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("no subcommand")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	parse := func(nargs int) ([]string, error) {
		if err := fs.Parse(args[1:]); err != nil {
			return nil, usagef("%s: %v", args[0], err)
		}
		if fs.NArg() != nargs {
			return nil, usagef("%s: want %d arguments, got %q", args[0], nargs, fs.Args())
		}
		return fs.Args(), nil
	}
	switch args[0] {
	case "serve":
		var cfg serveConfig
		fs.StringVar(&cfg.HTTP, "http", "8080", "HTTP address")
		fs.StringVar(&cfg.TCP, "tcp", "", "TCP address (none if empty)")
		fs.StringVar(&cfg.GRPC, "grpc", "", "gRPC health address (none if empty)")
		fs.StringVar(&cfg.FailFile, "fail-file", "", "liveness fails while this path exists")
		if _, err := parse(0); err != nil {
			return err
		}
		return serve(ctx, cfg, stdout)
	case "check":
		a, err := parse(1)
		if err != nil {
			return err
		}
		if _, err := os.Stat(a[0]); err == nil {
			fmt.Fprintf(stdout, "failing: %s exists\n", a[0])
			return exitCode(1)
		}
		return nil
	case "alloc":
		a, err := parse(1)
		if err != nil {
			return err
		}
		mib, err := strconv.Atoi(a[0])
		if err != nil || mib < 0 {
			return usagef("alloc: %q: want a number of MiB", a[0])
		}
		held := alloc(mib)
		fmt.Fprintf(stdout, "allocated %d MiB\n", len(held))
		<-ctx.Done()
		return nil
	case "fill":
		a, err := parse(2)
		if err != nil {
			return err
		}
		size, err := parseSize(a[1])
		if err != nil {
			return usagef("fill: %v", err)
		}
		if err := fill(a[0], size); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d bytes to %s\n", size, a[0])
		<-ctx.Done()
		return nil
	case "spawn":
		allocMiB := fs.Int("alloc", 0, "the children allocate this many MiB each (alloc) instead of sleeping")
		a, err := parse(1)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(a[0])
		if err != nil || n < 0 {
			return usagef("spawn: %q: want a number of processes", a[0])
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		child := []string{self, "sleep"}
		if *allocMiB > 0 {
			child = []string{self, "alloc", strconv.Itoa(*allocMiB)}
		}
		return spawn(ctx, n, child, stdout)
	case "exit":
		after := fs.Duration("after", 0, "delay before exiting")
		once := fs.String("once", "", "exit only if this file does not exist (and create it); else sleep until stopped")
		a, err := parse(1)
		if err != nil {
			return err
		}
		code, err := strconv.Atoi(a[0])
		if err != nil || code < 0 || code > 255 {
			return usagef("exit: %q: want a status from 0 to 255", a[0])
		}
		if *once != "" {
			f, err := os.OpenFile(*once, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if errors.Is(err, os.ErrExist) {
				<-ctx.Done() // exited once already: run until stopped
				return nil
			}
			if err != nil {
				return err
			}
			f.Close()
		}
		select {
		case <-time.After(*after):
			return exitCode(code)
		case <-ctx.Done():
			return nil
		}
	case "env":
		if _, err := parse(0); err != nil {
			return err
		}
		env := slices.Clone(environ)
		slices.Sort(env)
		_, err := fmt.Fprintln(stdout, strings.Join(env, "\n"))
		return err
	case "print":
		every := fs.Duration("every", 0, "time between two lines")
		count := fs.Int("count", 1, "number of lines")
		a, err := parse(1)
		if err != nil {
			return err
		}
		for i := 1; i <= *count; i++ {
			if i > 1 {
				select {
				case <-time.After(*every):
				case <-ctx.Done():
					return nil
				}
			}
			if _, err := fmt.Fprintf(stdout, "%s %d\n", a[0], i); err != nil {
				return err
			}
		}
		return nil
	case "sleep":
		if err := fs.Parse(args[1:]); err != nil {
			return usagef("sleep: %v", err)
		}
		switch fs.NArg() {
		case 0:
			<-ctx.Done()
			return nil
		case 1:
			d, err := time.ParseDuration(fs.Arg(0))
			if err != nil {
				return usagef("sleep: %v", err)
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return nil
		}
		return usagef("sleep: want at most one duration, got %q", fs.Args())
	}
	return usagef("unknown subcommand %q", args[0])
}
