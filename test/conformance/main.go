// Command conformance runs the Kubernetes project's node e2e suite
// (e2e_node.test of the release hack/kube pins) against the real kubelet and
// against nodekeeper, one after the other on one containerd it manages, and
// writes what each passed to docs/conformance.md.
//
//	go run ./test/conformance run [-agents kubelet,nodekeeper] [-focus RE]... [-procs N]
//	go run ./test/conformance report
//
// `make conformance` runs both. The suite runs in its services mode: it
// starts etcd, kube-apiserver and a namespace controller in its own process,
// then starts <k8s-bin-dir>/kubelet with the kubelet's flags and config file.
// For nodekeeper that is a two-line script running `nodekeeper run "$@"`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance run|report [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(ctx, os.Args[2:])
	case "report":
		err = reportCmd(os.Args[2:])
	case "supervise": // the suite's kubelet, for both agents (unit.go)
		err = superviseCmd(os.Args[2:])
	case "systemctl": // the suite's systemctl (unit.go)
		os.Exit(systemctlCmd(os.Args[2:]))
	default:
		err = usageError{fmt.Errorf("unknown command %q: want run or report", os.Args[1])}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }
