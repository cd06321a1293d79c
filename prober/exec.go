package prober

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilexec "k8s.io/utils/exec"
)

// execer is the part of the CRI runtime service exec probes use; the CRI
// client and cri-api's FakeRuntimeService satisfy it.
type execer interface {
	// ExecSync runs cmd in the container and waits at most timeout. A
	// non-zero exit is an error implementing k8s.io/utils/exec.ExitError.
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout []byte, stderr []byte, err error)
}

// Exec runs exec probes through the container runtime. Each run forks a
// process in the container (runc exec): by far the dearest mechanism; prefer
// HTTP, TCP or gRPC probes where the application allows. Safe for
// concurrent use if the runtime is.
type Exec struct {
	rt execer
}

// NewExec returns the exec probe runner over rt.
func NewExec(rt execer) *Exec { return &Exec{rt: rt} }

// Probe runs t.Command in the container with t.Timeout: exit 0 is success,
// another exit code or a timeout is failure; any other error is an error
// (retried by the Manager).
func (e *Exec) Probe(ctx context.Context, t Target) (Outcome, string, error) {
	id := t.ContainerID
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+3:]
	}
	stdout, stderr, err := e.rt.ExecSync(ctx, id, t.Command, t.Timeout)
	out := string(stdout) + string(stderr)
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	if err == nil {
		return OutcomeSuccess, out, nil
	}
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		if exit.ExitStatus() == 0 {
			return OutcomeSuccess, out, nil
		}
		return OutcomeFailure, fmt.Sprintf("command exited with %d: %s", exit.ExitStatus(), out), nil
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return OutcomeFailure, fmt.Sprintf("command timed out after %v", t.Timeout), nil
	}
	return OutcomeUnknown, "", fmt.Errorf("exec in container %s: %w", id, err)
}
