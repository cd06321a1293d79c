// Package server is nodekeeper's HTTP endpoints. Run serves the counterpart
// of the kubelet's read-only port on TCP: /healthz (and /healthz/NAME for one
// check), /metrics, /pods, /stats/summary, /metrics/resource,
// /metrics/cadvisor and nodekeeper's /node, reads only, to requests whose
// Host names this node. Handler adds what only root may see or do, /configz,
// /debug/pprof/, a standalone node's /events, the local pod changes, container logs
// and exec, for the root-only unix socket (localpods.ServeUnix) and for the authenticated
// kubelet API (internal/servers/kubeletserver). It serves what its Deps
// return and keeps no state of its own.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
)

// DefaultAddress is the address Run listens on when Config.Address is empty:
// the loopback, as nothing here is authenticated.
const DefaultAddress = "127.0.0.1"

// Timeouts used when the Config leaves them zero.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = 4 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 5 * time.Second
)

// maxHeaderBytes bounds a request's header.
const maxHeaderBytes = 1 << 20

// Config is where and how the server listens.
type Config struct {
	// Address is the IP to listen on; empty means DefaultAddress.
	Address string
	// Port is the TCP port; 0 picks a free one (see Addr).
	Port int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are
	// net/http.Server's; zero means the Default... value.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown when Run's ctx ends; the
	// connections still open then are closed. Zero means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// HostNames are the names, besides IP literals and "localhost", that the
	// Host header of a request to Run's port may carry (the node's name,
	// the machine's hostname); compared without case and trailing dot.
	// Requests naming any other host are refused (421), so that a web page
	// cannot reach the port through a DNS name it rebinds to this machine.
	HostNames []string
	// AnyHost turns that check off, for a server of /healthz alone (the
	// kubelet's healthz port), which tells a rebinding page nothing.
	AnyHost bool
}

// Check is one health check of /healthz.
type Check struct {
	Name string
	// Check returns nil when healthy. It is called on every /healthz
	// request, concurrently with other requests, and must honour ctx.
	Check func(ctx context.Context) error
}

// Deps are the server's sources. Each function is called per request, from
// the request's goroutine, so it must be safe for concurrent use; the values
// it returns are only read. A nil source leaves its path unserved (404).
type Deps struct {
	// Pods returns the pods with their statuses, for /pods.
	Pods func() []*v1.Pod
	// Summary returns the node's stats, for /stats/summary and
	// /metrics/resource.
	Summary func(ctx context.Context) (*statsapi.Summary, error)
	// Containers reads every running container and pod sandbox, for
	// /metrics/cadvisor; it is called once per scrape.
	Containers func(ctx context.Context) ([]stats.ContainerSample, error)
	// NodeFilesystems reads the node's block-device filesystems, the root
	// container's ("/") fs series of /metrics/cadvisor; nil: none.
	NodeFilesystems func() ([]stats.NodeFilesystem, error)
	// Node returns the node's Node object (conditions, capacity,
	// allocatable), for /node.
	Node func(ctx context.Context) (*v1.Node, error)
	// Configz returns the configuration in use, for /configz, served as the
	// kubelet's: {"kubeletconfig": ...}; by Handler only, never on Run's
	// port (the kubelet serves it only on its authenticated port).
	Configz func() any
	// Gatherer is served at /metrics.
	Gatherer prometheus.Gatherer
	// Healthz are the checks of /healthz, run in order; with none it
	// answers "ok".
	Healthz []Check
	// Local, when set, serves POST /pods and DELETE /pods/{namespace}/{name}
	// (pod changes) by Handler only: nothing changes through Run's port.
	Local http.Handler
	// Events returns the events a standalone node keeps (eventring), for
	// GET /events, served as a v1 EventList by Handler only; nil: none (in
	// a cluster they are the API server's).
	Events func() []v1.Event
	// Debugging, when set, serves /containerLogs/ and /exec/ (a container's
	// log, a command run in it: kubeletserver.Debugging's LocalHandler) by
	// Handler only, never on Run's port: they reach into the containers.
	Debugging http.Handler
	// Logger receives the server's errors; nil discards them.
	Logger *slog.Logger
	// Profiling serves Go's runtime profiles under /debug/pprof/ (the
	// kubelet's enableProfilingHandler) by Handler only, never on Run's port.
	Profiling bool
}

// Server serves the endpoints. Build it with New and run it with Run, once.
type Server struct {
	cfg      Config
	deps     Deps
	log      *slog.Logger
	ready    chan struct{} // closed when Run has listened or failed to
	mu       sync.Mutex    // guards addr
	addr     net.Addr      // set once, when listening
	router   http.Handler  // every endpoint: Handler
	readOnly http.Handler  // the read-only port's endpoints, Host checked: Run
	hosts    map[string]bool
}

// New validates cfg and returns a server that is not yet listening.
func New(cfg Config, deps Deps) (*Server, error) {
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if net.ParseIP(cfg.Address) == nil {
		return nil, fmt.Errorf("server: address %q: not an IP address", cfg.Address)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("server: port %d: want 0 to 65535", cfg.Port)
	}
	for _, d := range []*time.Duration{&cfg.ReadHeaderTimeout, &cfg.ReadTimeout, &cfg.WriteTimeout, &cfg.IdleTimeout, &cfg.ShutdownTimeout} {
		if *d < 0 {
			return nil, fmt.Errorf("server: negative timeout %v", *d)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&cfg.ReadTimeout, DefaultReadTimeout)
	def(&cfg.WriteTimeout, DefaultWriteTimeout)
	def(&cfg.IdleTimeout, DefaultIdleTimeout)
	def(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	for i, c := range deps.Healthz {
		if c.Name == "" || c.Check == nil {
			return nil, fmt.Errorf("server: Healthz[%d]: want a name and a check function", i)
		}
	}
	hosts := map[string]bool{"localhost": true}
	for i, h := range cfg.HostNames {
		h = normalHost(h)
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			return nil, fmt.Errorf("server: HostNames[%d] %q: not a host name", i, cfg.HostNames[i])
		}
		hosts[h] = true
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, deps: deps, log: log, ready: make(chan struct{}), hosts: hosts}
	s.router = s.routes(true)
	s.readOnly = s.routes(false)
	if !cfg.AnyHost {
		s.readOnly = s.checkHost(s.readOnly)
	}
	return s, nil
}

// Handler returns every endpoint of Deps: the reads Run serves, and /configz,
// /debug/pprof/ (Profiling), the pod changes (Local) and logs and exec
// (Debugging). It checks neither
// credentials nor the Host header, so it must be served only where who can
// connect is already restricted: the root-only unix socket, or behind the
// kubelet API's authentication and authorization. Safe for concurrent use.
func (s *Server) Handler() http.Handler { return s.router }

// routes builds the endpoints; all adds those that Handler serves and Run
// does not.
func (s *Server) routes(all bool) http.Handler {
	mux := http.NewServeMux()
	// A "GET" pattern also answers HEAD; other methods get 405 with Allow.
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /healthz/{check}", s.healthzOne)
	if s.deps.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			ErrorHandling: promhttp.ContinueOnError,
		}))
	}
	if s.deps.Pods != nil {
		mux.HandleFunc("GET /pods", s.pods)
	}
	if s.deps.Node != nil {
		mux.HandleFunc("GET /node", s.node)
	}
	if all && s.deps.Configz != nil {
		mux.HandleFunc("GET /configz", s.configz)
	}
	if all && s.deps.Local != nil {
		mux.Handle("POST /pods", s.deps.Local)
		mux.Handle("DELETE /pods/{namespace}/{name}", s.deps.Local)
	}
	if all && s.deps.Events != nil {
		mux.HandleFunc("GET /events", s.events)
	}
	if all && s.deps.Debugging != nil {
		mux.Handle("/containerLogs/", s.deps.Debugging)
		mux.Handle("/exec/", s.deps.Debugging)
	}
	if all && s.deps.Profiling {
		mux.Handle("/debug/pprof/", profilingHandler())
	}
	if s.deps.Summary != nil {
		// The kubelet answers POST here as well.
		mux.HandleFunc("GET /stats/summary", s.summary)
		mux.HandleFunc("POST /stats/summary", s.summary)
		mux.HandleFunc("GET /metrics/resource", s.resourceMetrics)
	}
	if s.deps.Containers != nil {
		mux.HandleFunc("GET /metrics/cadvisor", s.cadvisorMetrics)
	}
	return mux
}

// Ready is closed once Run listens (Addr is then set) or has failed to.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the server listens on ("127.0.0.1:10255"), or "" before
// it listens.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr == nil {
		return ""
	}
	return s.addr.String()
}

// checkHost refuses (421) a request whose Host header names neither an IP
// address, localhost nor one of Config.HostNames, then passes it to next.
// Browsers always send the Host they resolved, so a page of another site
// that rebinds its name to 127.0.0.1 is refused here.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = normalHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if host != "" && net.ParseIP(host) == nil && !s.hosts[host] {
			http.Error(w, fmt.Sprintf("Host %q: not this node: the read-only port answers requests addressed to an IP address, localhost or the node's name",
				r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// normalHost is a host name in lower case without a trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// Run listens on Config's TCP address and serves ReadOnlyHandler until ctx
// ends, then shuts down gracefully and returns nil: requests in flight get up to ShutdownTimeout to finish; after
// that their contexts are cancelled and their connections closed, and Run
// returns without waiting for their handlers. It returns an error if it
// cannot listen (nil if ctx ended first) or serving fails. Run may be called
// once.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.cfg.Address, strconv.Itoa(s.cfg.Port)))
	if err != nil {
		close(s.ready)
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("server: %w", err)
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	close(s.ready)
	// Requests get a context that outlives ctx by the shutdown grace, so
	// those in flight when ctx ends may finish.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           s.readOnly,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Requests outlived the grace: cut them off.
		s.log.Warn("HTTP server shutdown timed out; closing connections", "err", err)
		cancelBase()
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// healthz answers "ok" when every check passes (the kubelet's /healthz); otherwise 500 listing each
// check, the failed ones with their errors. ?verbose lists them when healthy.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	failed := false
	for _, c := range s.deps.Healthz {
		if err := c.Check(r.Context()); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, err)
			s.log.Info("healthz check failed", "check", c.Name, "err", err)
			continue
		}
		fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch {
	case failed:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "%shealthz check failed\n", b.String())
	case r.URL.Query().Has("verbose"):
		fmt.Fprintf(w, "%shealthz check passed\n", b.String())
	default:
		fmt.Fprint(w, "ok")
	}
}

// healthzOne runs the one check named in the path: "ok", or 500 with its
// error; 404 for an unknown name.
func (s *Server) healthzOne(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("check")
	for _, c := range s.deps.Healthz {
		if c.Name != name {
			continue
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if err := c.Check(r.Context()); err != nil {
			s.log.Info("healthz check failed", "check", c.Name, "err", err)
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "[-]%s failed: %v\nhealthz check failed\n", c.Name, err)
			return
		}
		fmt.Fprint(w, "ok")
		return
	}
	http.NotFound(w, r)
}

// profilingHandler serves net/http/pprof's index, named profiles, cmdline,
// CPU profile, symbol lookup and execution trace under /debug/pprof/.
func profilingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also the named profiles: heap, goroutine...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// pods answers a v1 PodList of Deps.Pods, as the kubelet's read-only /pods.
func (s *Server) pods(w http.ResponseWriter, _ *http.Request) {
	pods := s.deps.Pods()
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: make([]v1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	s.writeJSON(w, &list)
}

// events answers Deps.Events: a v1 EventList.
func (s *Server) events(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, &v1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"}, Items: s.deps.Events()})
}

// node answers Deps.Node: a v1 Node.
func (s *Server) node(w http.ResponseWriter, r *http.Request) {
	n, err := s.deps.Node(r.Context())
	if err != nil {
		s.log.Error("Node status failed", "err", err)
		http.Error(w, fmt.Sprintf("Internal Error: %v", err), http.StatusInternalServerError)
		return
	}
	s.writeJSON(w, n)
}

// configz answers Deps.Configz as the kubelet's /configz does.
func (s *Server) configz(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, map[string]any{"kubeletconfig": s.deps.Configz()})
}

// summary answers Deps.Summary; with only_cpu_and_memory=true, only the
// node's, system containers', pods' and containers' cpu and memory (and
// swap) stats, as the kubelet's.
func (s *Server) summary(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, fmt.Sprintf("/stats/summary: %v", err), http.StatusBadRequest)
		return
	}
	sum, err := s.deps.Summary(r.Context())
	if err != nil {
		s.log.Error("Summary stats failed", "err", err)
		http.Error(w, fmt.Sprintf("Internal Error: %v", err), http.StatusInternalServerError)
		return
	}
	if v := r.Form["only_cpu_and_memory"]; len(v) == 1 && v[0] == "true" {
		sum = cpuAndMemory(sum)
	}
	s.writeJSON(w, sum)
}

// cpuAndMemory returns the cpu, memory and swap parts of sum.
func cpuAndMemory(sum *statsapi.Summary) *statsapi.Summary {
	ctr := func(cs []statsapi.ContainerStats) []statsapi.ContainerStats {
		var out []statsapi.ContainerStats
		for _, c := range cs {
			out = append(out, statsapi.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory, Swap: c.Swap})
		}
		return out
	}
	n := sum.Node
	out := &statsapi.Summary{Node: statsapi.NodeStats{
		NodeName: n.NodeName, StartTime: n.StartTime, CPU: n.CPU, Memory: n.Memory, Swap: n.Swap,
		SystemContainers: ctr(n.SystemContainers),
	}}
	for _, p := range sum.Pods {
		out.Pods = append(out.Pods, statsapi.PodStats{
			PodRef: p.PodRef, StartTime: p.StartTime, CPU: p.CPU, Memory: p.Memory, Swap: p.Swap,
			Containers: ctr(p.Containers),
		})
	}
	return out
}

func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("Encode response failed", "err", err)
		http.Error(w, fmt.Sprintf("Internal Error: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
