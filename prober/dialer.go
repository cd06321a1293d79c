package prober

import (
	"net"
	"syscall"
)

// newDialer returns the dialer of network probes. It turns SO_LINGER on
// with a zero timeout on every socket, so closing a probe connection resets
// it instead of leaving a socket in TIME-WAIT for a minute on the node (TCP
// probes close first) or in the pod (HTTP probes send Connection: close, so
// the server closes first; the reset then also ends its FIN-WAIT/TIME-WAIT).
// The kubelet sets a one-second linger instead (kubernetes#115143), which
// on Linux does not shorten TIME-WAIT after an orderly close; see
// docs/prober.md for the measurements. TCP keep-alive is off: a probe
// connection lives for one exchange, and turning it on costs four
// setsockopt calls per connection.
func newDialer() *net.Dialer {
	return &net.Dialer{Control: setLinger, KeepAlive: -1}
}

func setLinger(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = setsockoptLinger(fd)
	}); err != nil {
		return err
	}
	return serr
}
