package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// serveConfig are serve's flags.
type serveConfig struct {
	HTTP, TCP, GRPC string
	FailFile        string
}

// probes are the switches /control sets.
var probes = []string{"liveness", "readiness", "startup", "tcp"}

// state holds which probes fail. Every method is safe for concurrent use.
type state struct {
	failFile string
	mu       sync.Mutex      // guards failing and tcp
	failing  map[string]bool // by probe name
	tcp      *tcpPort        // nil without --tcp
}

func newState(failFile string) *state {
	return &state{failFile: failFile, failing: map[string]bool{}}
}

// ok reports whether probe passes: not switched to fail and, for liveness,
// the fail file absent.
func (s *state) ok(probe string) bool {
	s.mu.Lock()
	failing := s.failing[probe]
	s.mu.Unlock()
	if probe == "liveness" && s.failFile != "" {
		if _, err := os.Stat(s.failFile); err == nil {
			return false
		}
	}
	return !failing
}

// set switches probe to fail or back; for tcp it closes or reopens the port
// before it returns.
func (s *state) set(probe string, fail bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if probe == "tcp" && s.tcp != nil {
		if err := s.tcp.set(!fail); err != nil {
			return err
		}
	}
	s.failing[probe] = fail
	return nil
}

func (s *state) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, p := range probes {
		v := "ok"
		if s.failing[p] {
			v = "fail"
		}
		parts = append(parts, p+"="+v)
	}
	return strings.Join(parts, " ")
}

// handler serves /healthz, /readyz, /startupz and /control.
func (s *state) handler() http.Handler {
	mux := http.NewServeMux()
	for path, probe := range map[string]string{"/healthz": "liveness", "/readyz": "readiness", "/startupz": "startup"} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			if !s.ok(probe) {
				http.Error(w, probe+" failing", http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	mux.HandleFunc("GET /control", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, s) })
	mux.HandleFunc("POST /control/{setting}", func(w http.ResponseWriter, r *http.Request) {
		probe, v, _ := strings.Cut(r.PathValue("setting"), "=")
		if !slices.Contains(probes, probe) || (v != "fail" && v != "ok") {
			http.Error(w, fmt.Sprintf("want /control/PROBE=fail or =ok, PROBE one of %s", strings.Join(probes, ", ")), http.StatusBadRequest)
			return
		}
		if err := s.set(probe, v == "fail"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, s)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		host, _ := os.Hostname()
		fmt.Fprintf(w, "testbox on %s\n", host)
	})
	return mux
}

// healthServer answers grpc.health.v1 Check: the service "" and "liveness"
// follow liveness, "readiness" and "startup" their probes.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	s *state
}

func (h healthServer) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	probe := req.GetService()
	switch probe {
	case "":
		probe = "liveness"
	case "liveness", "readiness", "startup":
	default:
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	st := healthpb.HealthCheckResponse_SERVING
	if !h.s.ok(probe) {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// tcpPort is a TCP listener that accepts and closes connections while open;
// closed, connections are refused.
type tcpPort struct {
	addr string
	ln   net.Listener   // nil while closed; guarded by state.mu
	wg   sync.WaitGroup // the accept loop
}

func (p *tcpPort) set(open bool) error {
	switch {
	case open && p.ln == nil:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return err
		}
		p.ln = ln
		p.addr = ln.Addr().String() // port 0 reopens on the same port
		p.wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		})
	case !open && p.ln != nil:
		err := p.ln.Close()
		p.wg.Wait()
		p.ln = nil
		return err
	}
	return nil
}

// hostPort makes "8080" ":8080".
func hostPort(addr string) string {
	if !strings.Contains(addr, ":") {
		return ":" + addr
	}
	return addr
}

// serve runs the servers of cfg until ctx ends.
func serve(ctx context.Context, cfg serveConfig, stdout io.Writer) error {
	s := newState(cfg.FailFile)
	httpLn, err := net.Listen("tcp", hostPort(cfg.HTTP))
	if err != nil {
		return err
	}
	var grpcLn net.Listener
	if cfg.GRPC != "" {
		if grpcLn, err = net.Listen("tcp", hostPort(cfg.GRPC)); err != nil {
			return errors.Join(err, httpLn.Close())
		}
	}
	if cfg.TCP != "" {
		s.tcp = &tcpPort{addr: hostPort(cfg.TCP)}
		if err := s.set("tcp", false); err != nil {
			err = errors.Join(err, httpLn.Close())
			if grpcLn != nil {
				err = errors.Join(err, grpcLn.Close())
			}
			return err
		}
		fmt.Fprintf(stdout, "tcp on %s\n", s.tcp.ln.Addr())
	}
	g, ctx := errgroup.WithContext(ctx)
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	g.Go(func() error { return ignoreClosed(hs.Serve(httpLn)) })
	fmt.Fprintf(stdout, "http on %s\n", httpLn.Addr())
	var gs *grpc.Server
	if grpcLn != nil {
		gs = grpc.NewServer()
		healthpb.RegisterHealthServer(gs, healthServer{s: s})
		g.Go(func() error { return gs.Serve(grpcLn) })
		fmt.Fprintf(stdout, "grpc on %s\n", grpcLn.Addr())
	}
	g.Go(func() error {
		<-ctx.Done() // stopped, or one server failed
		err := hs.Close()
		if gs != nil {
			gs.Stop()
		}
		if s.tcp != nil {
			err = errors.Join(err, s.set("tcp", true))
		}
		return err
	})
	return g.Wait()
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
