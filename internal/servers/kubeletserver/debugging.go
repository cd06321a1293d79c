package kubeletserver

import (
	"errors"
	"log/slog"
	"net/http"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Debugging is the kubelet API's debugging handlers: /containerLogs (read
// from the CRI log files), /exec, /attach and /portForward (proxied to the
// CRI runtime's streaming server). It is one implementation for the two
// servers that serve them: Server, behind authentication and authorization,
// and the agent's root-only unix socket (LocalHandler). It keeps no state of
// its own besides the transport to the runtime's streaming server, and is
// safe for concurrent use.
type Debugging struct {
	pods  func() []*v1.Pod
	rt    Runtime
	log   *slog.Logger
	clock clock.WithTicker

	streamTransport *http.Transport // to the runtime's streaming server
}

// DebuggingDeps are the debugging handlers' collaborators: Pods and Runtime
// as in Deps (required), Clock and Logger may be nil (the real clock; logs
// discarded).
type DebuggingDeps struct {
	Pods    func() []*v1.Pod
	Runtime Runtime
	Clock   clock.WithTicker
	Logger  *slog.Logger
}

// NewDebugging returns the debugging handlers over deps.
func NewDebugging(deps DebuggingDeps) (*Debugging, error) {
	if deps.Pods == nil {
		return nil, errors.New("kubeletserver: DebuggingDeps.Pods is nil")
	}
	if deps.Runtime == nil {
		return nil, errors.New("kubeletserver: DebuggingDeps.Runtime is nil")
	}
	d := &Debugging{pods: deps.Pods, rt: deps.Runtime, log: deps.Logger, clock: deps.Clock, streamTransport: newStreamTransport()}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.clock == nil {
		d.clock = clock.RealClock{}
	}
	return d, nil
}

// LocalHandler serves GET and POST /containerLogs/{namespace}/{pod}/{container}
// and /exec/{namespace}/{pod}[/{uid}]/{container}, as the kubelet API does,
// without checking who asks: it must be served only where who can connect
// is already restricted (the agent's unix socket, mode 0600, root's), never
// on a TCP port. Attach and port-forward are left to the kubelet API.
func (d *Debugging) LocalHandler() http.Handler {
	mux := http.NewServeMux()
	for _, m := range []string{"GET", "POST"} {
		d.logsAndExec(mux, m)
	}
	return mux
}

// logsAndExec adds the logs and exec routes for method m to mux.
func (d *Debugging) logsAndExec(mux *http.ServeMux, m string) {
	mux.HandleFunc(m+" /containerLogs/{namespace}/{pod}/{container}", d.containerLogs)
	mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", d.exec)
	mux.HandleFunc(m+" /exec/{namespace}/{pod}/{uid}/{container}", d.exec)
}

// routes adds every debugging route to mux, for the kubelet API.
func (d *Debugging) routes(mux *http.ServeMux) {
	for _, m := range []string{"GET", "POST"} {
		d.logsAndExec(mux, m)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{container}", d.attach)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{uid}/{container}", d.attach)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}", d.portForward)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}/{uid}", d.portForward)
	}
}
