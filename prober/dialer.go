package prober

import (
	"net"
	"syscall"
)

// newDialer returns the dialer of network probes. It sets SO_LINGER to one
// second on every socket, as the kubelet does since kubernetes#115143, so
// that the sockets of thousands of short probe connections do not stay in
// TIME-WAIT for a minute each and exhaust ephemeral ports and conntrack.
func newDialer() *net.Dialer {
	return &net.Dialer{Control: setLinger}
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
