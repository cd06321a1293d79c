package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

// runHealthz runs h until the test ends and checks that Run returns nil
// once its context is cancelled.
func runHealthz(t *testing.T, h *healthz) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after its context ended")
		}
	})
}

func waitListening(t *testing.T, h *healthz) string {
	t.Helper()
	select {
	case <-h.Listening():
	case <-time.After(10 * time.Second):
		t.Fatal("healthz did not listen")
	}
	return h.Addr()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestHealthzServesTheChecks: GET /healthz on the healthz listener answers
// "ok" while the sync loop check passes and 500 naming it when it fails.
func TestHealthzServesTheChecks(t *testing.T) {
	t.Parallel()
	var stalled atomic.Bool
	checks := []server.Check{{Name: "syncloop", Check: func(context.Context) error {
		if stalled.Load() {
			return errors.New("the runtime was last listed 5m0s ago")
		}
		return nil
	}}}
	h, err := newHealthz("127.0.0.1", 0, checks, 0, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	runHealthz(t, h)
	addr := waitListening(t, h)
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("healthy: %d %q, want 200 \"ok\"", code, body)
	}
	stalled.Store(true)
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusInternalServerError ||
		body != "[-]syncloop failed: the runtime was last listed 5m0s ago\nhealthz check failed\n" {
		t.Errorf("stalled: %d %q, want 500 naming syncloop", code, body)
	}
	if code, _ := get(t, "http://"+addr+"/pods"); code != http.StatusNotFound {
		t.Errorf("GET /pods: %d, want 404: the healthz port serves only /healthz", code)
	}
}

// errorSignal is a slog handler that signals each error record.
type errorSignal struct {
	slog.Handler
	errs chan string
}

func (h errorSignal) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		select {
		case h.errs <- r.Message:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

// TestHealthzRetriesATakenPort: when the port is taken the agent keeps
// running; the listener logs why and listens once the port is free.
func TestHealthzRetriesATakenPort(t *testing.T) {
	t.Parallel()
	blocker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := blocker.Addr().(*net.TCPAddr).Port
	errs := make(chan string, 1)
	log := slog.New(errorSignal{slog.NewTextHandler(t.Output(), nil), errs})
	h, err := newHealthz("127.0.0.1", port, nil, 10*time.Millisecond, log)
	if err != nil {
		t.Fatal(err)
	}
	runHealthz(t, h)
	select {
	case msg := <-errs:
		if msg != "Healthz not served; trying again" {
			t.Errorf("logged %q", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error logged for the taken port")
	}
	if a := h.Addr(); a != "" {
		t.Errorf("Addr() = %q while the port is taken", a)
	}
	blocker.Close()
	addr := waitListening(t, h)
	if addr != net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) {
		t.Errorf("listens on %s, want port %d", addr, port)
	}
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("%d %q, want 200 \"ok\"", code, body)
	}
}

func TestHealthzBadAddress(t *testing.T) {
	t.Parallel()
	if _, err := newHealthz("localhost", 10248, nil, 0, nil); err == nil {
		t.Error("newHealthz accepted a host name as the address")
	}
}

// Listening is closed the first time the listener is up (Addr is then set).
func (h *healthz) Listening() <-chan struct{} { return h.listening }

// Addr is the address served, "" while it is not listening.
func (h *healthz) Addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addr
}
