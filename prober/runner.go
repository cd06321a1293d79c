package prober

import (
	"context"
	"net/http"
	"time"
)

// UserAgent is the User-Agent of HTTP and gRPC probes unless a probe sets
// its own: the kubelet's, for the Kubernetes minor matching the k8s.io/api
// version nodekeeper is built with (v0.37 → 1.37), so applications that
// recognise kubelet probes recognise ours.
const UserAgent = "kube-probe/1.37"

// maxOutput caps what is read of a probe's response body or command output.
const maxOutput = 10 << 10

// Target is one probe run's target: the fields its mechanism needs, resolved
// by the Manager. Targets are shared and must not be modified.
type Target struct {
	// ContainerID is the container's ID as the pod status reports it
	// ("containerd://..." or bare).
	ContainerID string
	// Command is the exec probe's command, env vars expanded.
	Command []string
	// Request is the HTTP probe's GET request, with headers. Shared across
	// runs: runners use Request.WithContext and never modify it.
	Request *http.Request
	// Host and Port are the TCP or gRPC probe's address.
	Host string
	Port int
	// Service is the gRPC probe's service name ("" for the server).
	Service string
	// Timeout bounds the run; ctx carries the same deadline.
	Timeout time.Duration
}

// Runner runs one probe mechanism once. It returns the outcome and a short
// message for logs. An error means the mechanism could not run the probe at
// all (the outcome is then OutcomeUnknown); the Manager retries those, up to
// three tries, and drops the run if all of them fail. An unhealthy or
// unresponsive target is OutcomeFailure with a nil error, and is not retried.
// Runners are called concurrently from many goroutines.
type Runner interface {
	Probe(ctx context.Context, t Target) (Outcome, string, error)
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, t Target) (Outcome, string, error)

// Probe calls f.
func (f RunnerFunc) Probe(ctx context.Context, t Target) (Outcome, string, error) { return f(ctx, t) }
