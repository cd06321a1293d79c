package prober

import (
	"context"
	"net"
	"strconv"
)

// TCP runs tcpSocket probes: success when a connection is accepted within
// the timeout. Safe for concurrent use.
type TCP struct {
	dialer *net.Dialer
}

// NewTCP returns the TCP probe runner.
func NewTCP() *TCP { return &TCP{dialer: newDialer()} }

// Probe dials t.Host:t.Port and closes the connection at once.
func (p *TCP) Probe(ctx context.Context, t Target) (Outcome, string, error) {
	conn, err := p.dialer.DialContext(ctx, "tcp", net.JoinHostPort(t.Host, strconv.Itoa(t.Port)))
	if err != nil {
		return OutcomeFailure, err.Error(), nil
	}
	if err := conn.Close(); err != nil {
		return OutcomeSuccess, "close: " + err.Error(), nil
	}
	return OutcomeSuccess, "", nil
}
