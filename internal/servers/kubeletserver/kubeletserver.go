// Package kubeletserver serves the kubelet API on the node's secure port
// (10250 by default): HTTPS with client authentication and authorization as
// KubeletConfiguration.authentication and .authorization set them, the
// streaming endpoints (/exec, /attach, /portForward, proxied to the CRI
// runtime's streaming server), /containerLogs read from the CRI log files,
// and the read-only endpoints (/pods, /stats/summary, /metrics,
// /metrics/resource, /metrics/cadvisor, /healthz, /configz) shared with
// internal/servers/server.
//
// Authentication is by x509 client certificate (against a client CA bundle
// file, reloaded when it changes), by bearer token (a TokenReview, cached),
// or anonymous; authorization by SubjectAccessReview (cached) or
// AlwaysAllow. The request attributes are the kubelet's: resource "nodes",
// the node's name, a subresource by path and the verb by method. This is
// our own small code on k8s.io/api's review types, not k8s.io/apiserver's
// delegating authenticator and authorizer, whose dependencies (CEL,
// OpenTelemetry, OpenAPI, component-base metrics) would add about 10 MB to
// the agent's binary.
package kubeletserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// DefaultPort is the kubelet's secure port.
const DefaultPort = 10250

// DefaultAddress is the address served when Config.Address is empty: every
// interface, as the kubelet's.
const DefaultAddress = "0.0.0.0"

// Timeouts used when the Config leaves them zero. Read and write timeouts are
// the kubelet's 4h: exec, attach and port-forward sessions and followed logs
// run for as long as the client wants.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultStreamTimeout     = 4 * time.Hour
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 5 * time.Second
)

// Config is where and how the server listens and whom it lets in.
type Config struct {
	// NodeName is the node's name: the name in every authorization request.
	NodeName string
	// Address is the IP to listen on; empty means DefaultAddress.
	Address string
	// Port is the TCP port; 0 picks a free one (see Addr).
	Port int
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate (with
	// its chain) and key (tlsCertFile, tlsPrivateKeyFile). When both are
	// empty the server uses a self-signed certificate in CertDir.
	TLSCertFile, TLSPrivateKeyFile string
	// CertDir holds the self-signed certificate kubelet.crt and its key
	// kubelet.key (<rootDir>/pki): made on the first start, reused after.
	// Needed only without TLSCertFile.
	CertDir string
	// Hostname and NodeIPs are the self-signed certificate's subject
	// alternative names. An empty Hostname means os.Hostname().
	Hostname string
	NodeIPs  []net.IP
	// TLSMinVersion is tlsMinVersion ("VersionTLS12", "VersionTLS13"); empty
	// means TLS 1.2. Older versions are refused.
	TLSMinVersion string
	// TLSCipherSuites is tlsCipherSuites (IANA names); empty means Go's
	// defaults.
	TLSCipherSuites []string
	// Authentication and Authorization are the KubeletConfiguration's
	// fields; a nil pointer inside takes the kubelet's default (anonymous
	// off, webhook on with a 2m cache; mode Webhook with 5m/30s caches).
	Authentication kubeletv1beta1.KubeletAuthentication
	Authorization  kubeletv1beta1.KubeletAuthorization
	// ReadHeaderTimeout, StreamTimeout (the read and write timeout) and
	// IdleTimeout are net/http.Server's; zero means the Default... value.
	ReadHeaderTimeout, StreamTimeout, IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown of plain requests when
	// Run's ctx ends; streaming sessions are cut at once. Zero means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// DisableDebuggingHandlers leaves out logs, exec, attach and
	// port-forward (the kubelet's enableDebuggingHandlers: false).
	DisableDebuggingHandlers bool
}

// Deps are the server's collaborators. Functions are called per request,
// from the request's goroutine, and must be safe for concurrent use.
type Deps struct {
	// Pods returns the agent's pods with their statuses; pods are looked up
	// in it by namespace and name, containers by the status' container IDs.
	// The pods are only read. Required.
	Pods func() []*v1.Pod
	// Runtime is the CRI runtime: container statuses (log paths), sandboxes
	// and the streaming calls. Required.
	Runtime Runtime
	// Shared serves /pods, /stats/summary, /metrics, /metrics/resource,
	// /metrics/cadvisor, /healthz (and /healthz/NAME) and /configz, after
	// this server authorized the request: internal/servers/server's Handler. Nil
	// leaves those paths unserved.
	Shared http.Handler
	// TokenReviews and SubjectAccessReviews are the API server's, for
	// webhook authentication and authorization; each is needed only when
	// its webhook is enabled.
	TokenReviews         TokenReviewer
	SubjectAccessReviews SubjectAccessReviewer
	// Authenticator and Authorizer, when set, replace the ones Config
	// describes (tests, or an embedding with its own policy).
	Authenticator authenticator.Request
	Authorizer    authorizer.UnconditionalAuthorizer
	// Clock may be nil: the real clock. It gives sinceSeconds its origin,
	// paces followed logs and dates the serving certificate's check at New.
	// It is injected because the tests step it while the server answers
	// over real TLS sockets, which a synctest bubble cannot hold (the auth
	// caches and the client CA reload use the time package: their tests run
	// in a bubble).
	Clock clock.WithTicker
	// Logger may be nil: logs are discarded.
	Logger *slog.Logger
}

// Server serves the kubelet API. Build it with New and run it with Run, once.
type Server struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	clock clock.WithTicker
	tls   *tls.Config
	auth  *auth
	ready chan struct{} // closed when Run has listened or failed to

	mu   sync.Mutex // guards addr and conns
	addr net.Addr   // set once, when listening
	// conns are the connections whose requests are being handled, with the
	// number of handlers on each; Run closes them at shutdown, which ends
	// hijacked streaming sessions.
	conns map[net.Conn]int

	handlers sync.WaitGroup // one per request being handled
	router   http.Handler
	debug    *Debugging
}

// New validates cfg, loads (or makes and writes) the serving certificate and
// the client CA, and returns a server that is not yet listening.
func New(cfg Config, deps Deps) (*Server, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("kubeletserver: Config.NodeName is empty")
	}
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if net.ParseIP(cfg.Address) == nil {
		return nil, fmt.Errorf("kubeletserver: address %q: not an IP address", cfg.Address)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("kubeletserver: port %d: want 0 to 65535", cfg.Port)
	}
	for _, d := range []*time.Duration{&cfg.ReadHeaderTimeout, &cfg.StreamTimeout, &cfg.IdleTimeout, &cfg.ShutdownTimeout} {
		if *d < 0 {
			return nil, fmt.Errorf("kubeletserver: negative timeout %v", *d)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&cfg.StreamTimeout, DefaultStreamTimeout)
	def(&cfg.IdleTimeout, DefaultIdleTimeout)
	def(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	if deps.Pods == nil {
		return nil, errors.New("kubeletserver: Deps.Pods is nil")
	}
	if deps.Runtime == nil {
		return nil, errors.New("kubeletserver: Deps.Runtime is nil")
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("subsystem", "kubeletserver")
	s := &Server{cfg: cfg, deps: deps, log: log, clock: deps.Clock, ready: make(chan struct{}), conns: map[net.Conn]int{}}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	var err error
	if s.debug, err = NewDebugging(DebuggingDeps{Pods: deps.Pods, Runtime: deps.Runtime, Clock: s.clock, Logger: log}); err != nil {
		return nil, err
	}
	var files *certFiles
	if s.tls, files, err = tlsConfig(cfg, log, s.clock.Now()); err != nil {
		return nil, err
	}
	if s.auth, err = newAuth(cfg, deps, log); err != nil {
		return nil, err
	}
	if files != nil {
		s.auth.runs = append(s.auth.runs, files.Run)
	}
	s.router = s.routes()
	return s, nil
}

// Ready is closed once Run listens (Addr is then set) or has failed to.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the server listens on ("0.0.0.0:10250"), or "" before
// it listens.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr == nil {
		return ""
	}
	return s.addr.String()
}

type connKey struct{}

// Run listens and serves HTTPS until ctx ends, then shuts down and returns
// nil: request contexts are cancelled (followed logs end), plain requests
// get up to ShutdownTimeout to finish, and the connections of streaming
// sessions still open are closed; Run returns once every handler has
// returned. It returns an error if it cannot listen (nil if ctx ended first)
// or serving fails. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.cfg.Address, strconv.Itoa(s.cfg.Port)))
	if err != nil {
		close(s.ready)
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kubeletserver: %w", err)
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	close(s.ready)

	var bg sync.WaitGroup // the background loops (client CA and serving certificate reloads)
	bgCtx, stopBG := context.WithCancel(ctx)
	for _, run := range s.auth.runs {
		bg.Go(func() { run(bgCtx) })
	}
	defer func() { stopBG(); bg.Wait() }()

	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           s.track(s.router),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.StreamTimeout,
		WriteTimeout:      s.cfg.StreamTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, s.tls)) }()
	select {
	case err := <-served:
		s.closeConns()
		s.handlers.Wait()
		return fmt.Errorf("kubeletserver: %w", err)
	case <-ctx.Done():
	}
	cancelBase()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("Kubelet API server shutdown timed out; closing connections", "err", err)
		_ = srv.Close()
	}
	// Hijacked connections (exec, attach, port-forward) are not the
	// http.Server's any more: close them so their handlers return.
	s.closeConns()
	s.handlers.Wait()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kubeletserver: %w", err)
	}
	return nil
}

// track counts the handlers in flight and records their connections.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		if c != nil {
			s.mu.Lock()
			s.conns[c]++
			s.mu.Unlock()
			defer func() {
				s.mu.Lock()
				if s.conns[c]--; s.conns[c] <= 0 {
					delete(s.conns, c)
				}
				s.mu.Unlock()
			}()
		}
		h.ServeHTTP(w, r)
	})
}

// closeConns closes the connections of the requests being handled.
func (s *Server) closeConns() {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// routes is the kubelet API's path table, behind authentication and
// authorization.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	if !s.cfg.DisableDebuggingHandlers {
		s.debug.routes(mux)
	}
	if h := s.deps.Shared; h != nil {
		// Only reads: a pod change (POST /pods) is never taken here.
		for _, p := range []string{"GET /pods", "GET /stats/summary", "POST /stats/summary", "GET /metrics", "GET /metrics/resource", "GET /metrics/cadvisor", "GET /healthz", "GET /healthz/{check}", "GET /configz"} {
			mux.Handle(p, h)
		}
	}
	return s.auth.filter(s.log, s.cfg.NodeName, mux)
}
