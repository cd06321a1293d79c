package daemon

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// listener is a TCP listener the agent will open and without which it
// cannot run: the configuration field that sets its port, for the error.
type listener struct {
	field string // the configuration field that sets the port
	what  string // what listens there, for the error
	addr  string // host:port
}

// fatalListeners returns the TCP listeners whose port, when taken, stops the
// agent: the read-only port (readOnlyPort, when not 0) and, in a cluster,
// the kubelet API (port, when enableServer). The healthz port is not among
// them: its listener logs and tries again every 5 s while the agent runs,
// as the kubelet's does (healthz.go).
func (r *root) fatalListeners() []listener {
	var ls []listener
	if p := r.ac.ReadOnlyPort; p != 0 {
		ls = append(ls, listener{field: "readOnlyPort", what: "the read-only port", addr: net.JoinHostPort(r.ac.Address, strconv.Itoa(int(p)))})
	}
	if c := r.o.Config.Cluster; r.o.Kubeconfig != "" && c.EnableServer {
		ls = append(ls, listener{field: "port", what: "the kubelet API (served with --kubeconfig)", addr: net.JoinHostPort(c.Address, strconv.Itoa(int(c.Port)))})
	}
	return ls
}

// checkListeners listens on each of ls and closes it at once, so that a taken
// port ends `run` before containerd starts or images are imported (the
// kubelet finds out only when it serves, and exits 1). The error names the
// configuration file, the field, the port and the address; it is a runtime
// error (exit 1), not bad input: the file is valid, the machine is busy.
func checkListeners(file string, ls []listener) error {
	for _, l := range ls {
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			_ = ln.Close()
			continue
		}
		_, port, _ := net.SplitHostPort(l.addr)
		why := err.Error()
		if errors.Is(err, syscall.EADDRINUSE) {
			why = "another process listens there"
		}
		return fmt.Errorf("%s: %s %s: cannot listen on %s for %s: %s; set %s to a free port in a copy of the file and pass it with --config",
			file, l.field, port, l.addr, l.what, why, l.field)
	}
	return nil
}
