package prober

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// GRPC runs grpc probes: grpc.health.v1.Health/Check over plaintext HTTP/2,
// one connection per run; only SERVING is success. Safe for concurrent use.
type GRPC struct {
	dialer *net.Dialer
}

// NewGRPC returns the gRPC probe runner.
func NewGRPC() *GRPC { return &GRPC{dialer: newDialer()} }

// Probe checks t.Service at t.Host:t.Port.
func (p *GRPC) Probe(ctx context.Context, t Target) (Outcome, string, error) {
	addr := net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return p.dialer.DialContext(ctx, "tcp", a)
		}),
	)
	if err != nil {
		return OutcomeUnknown, "", fmt.Errorf("grpc client for %s: %w", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: t.Service})
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented:
			return OutcomeFailure, fmt.Sprintf("%s does not implement the grpc health protocol (grpc.health.v1.Health)", addr), nil
		case codes.DeadlineExceeded:
			return OutcomeFailure, fmt.Sprintf("timeout: health rpc to %s did not complete within %v", addr, t.Timeout), nil
		}
		return OutcomeFailure, fmt.Sprintf("health rpc to %s: %v", addr, err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return OutcomeFailure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus()), nil
	}
	return OutcomeSuccess, "", nil
}
