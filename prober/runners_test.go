package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	utilexec "k8s.io/utils/exec"
)

var _ execer = (*apitest.FakeRuntimeService)(nil)

// runProbe runs r against t with a timeout, as the Manager does. Without one
// it allows 10 s: enough for a loopback answer on a loaded machine, so that
// only the cases that test a timeout ever meet one.
func runProbe(t *testing.T, r Runner, tg Target) (Outcome, string, error, time.Duration) {
	t.Helper()
	if tg.Timeout == 0 {
		tg.Timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(t.Context(), tg.Timeout)
	defer cancel()
	start := time.Now()
	o, msg, err := r.Probe(ctx, tg)
	return o, msg, err, time.Since(start)
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { otherHits.Add(1) }))
	t.Cleanup(other.Close)
	otherPort := other.Listener.Addr().(*net.TCPAddr).Port

	type seen struct{ ua, accept, conn string }
	seenC := make(chan seen, 100)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		seenC <- seen{r.Header.Get("User-Agent"), r.Header.Get("Accept"), r.Header.Get("Connection")}
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		// Same machine, another host name: must not be followed.
		http.Redirect(w, r, fmt.Sprintf("http://localhost:%d/", otherPort), http.StatusMovedPermanently)
	})
	mux.HandleFunc("/moved-ok", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/moved-fail", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/fail", http.StatusFound) })
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	var bigWritten atomic.Int64
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		for {
			n, err := w.Write(buf)
			bigWritten.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	p := NewHTTP()
	tests := []struct {
		path    string
		timeout time.Duration
		want    Outcome
		wantMsg string
	}{
		{"/ok", 0, OutcomeSuccess, ""},
		{"/fail", 0, OutcomeFailure, "statuscode: 500"},
		{"/elsewhere", 0, OutcomeWarning, "redirects"},
		{"/moved-ok", 0, OutcomeSuccess, ""},
		{"/moved-fail", 0, OutcomeFailure, "statuscode: 500"},
		{"/hang", 300 * time.Millisecond, OutcomeFailure, "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"},
		{"/huge", 0, OutcomeSuccess, ""},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			req, err := newHTTPRequest(&httpSpec{scheme: "http", port: port, path: tc.path, header: http.Header{}}, "127.0.0.1", UserAgent)
			if err != nil {
				t.Fatal(err)
			}
			got, msg, err, took := runProbe(t, p, Target{Request: req, Timeout: tc.timeout})
			if err != nil || got != tc.want || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("Probe(%s) = %v, %q, %v; want %v, %q", tc.path, got, msg, err, tc.want, tc.wantMsg)
			}
			// The probe must end at its deadline, not when the server gives up;
			// the bound is loose because a loaded machine may be slow to wake it.
			if tc.timeout > 0 && took > tc.timeout+10*time.Second {
				t.Errorf("Probe(%s) took %v, past its %v timeout", tc.path, took, tc.timeout)
			}
		})
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("redirect to another host was followed %d times", n)
	}
	if n := bigWritten.Load(); n > 64<<20 {
		t.Errorf("huge body: server wrote %d bytes before the probe hung up", n)
	}
	close(seenC)
	for s := range seenC {
		if diff := fmt.Sprint(s); s != (seen{"kube-probe/1.37", "*/*", "close"}) {
			t.Errorf("request headers %s, want kube-probe/1.37, */*, close", diff)
		}
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	req, _ := newHTTPRequest(&httpSpec{scheme: "http", port: port, header: http.Header{}}, "127.0.0.1", UserAgent)
	got, _, err, _ := runProbe(t, NewHTTP(), Target{Request: req})
	if err != nil || got != OutcomeFailure {
		t.Fatalf("Probe = %v, %v; want failure", got, err)
	}
}

// closedPort returns a loopback port that refuses connections for the rest
// of the test. It is held by a TCP socket that is bound but never listens:
// a SYN to it gets a reset, and while the socket is open no other listener
// (a parallel test) and no connect's ephemeral port (TCP self-connect) can
// take the port. The socket is closed when the test ends. Linux-only, as the
// package's tests are.
func closedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// TestClosedPort checks the fixture the refused-connection cases rely on:
// its port refuses connections and cannot be taken while the test runs.
func TestClosedPort(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("dial %s connected, want connection refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
		t.Fatalf("listen on %s succeeded: the port is not held", addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listen on %s: %v, want address in use", addr, err)
	}
}

func TestTCP(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p := NewTCP()
	if got, msg, err, _ := runProbe(t, p, Target{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port}); got != OutcomeSuccess || err != nil {
		t.Errorf("accepting listener: %v %q %v", got, msg, err)
	}
	if got, _, err, _ := runProbe(t, p, Target{Host: "127.0.0.1", Port: closedPort(t)}); got != OutcomeFailure || err != nil {
		t.Errorf("refusing port: %v %v, want failure", got, err)
	}
}

func TestGRPC(t *testing.T) {
	t.Parallel()
	start := func(withHealth bool) (int, *health.Server) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		hs := health.NewServer()
		if withHealth {
			healthpb.RegisterHealthServer(s, hs)
		}
		go s.Serve(l)
		t.Cleanup(s.Stop)
		return l.Addr().(*net.TCPAddr).Port, hs
	}
	port, hs := start(true)
	bare, _ := start(false)
	p := NewGRPC()
	check := func(name string, port int, service string, want Outcome, wantMsg string) {
		t.Helper()
		got, msg, err, _ := runProbe(t, p, Target{Host: "127.0.0.1", Port: port, Service: service})
		if err != nil || got != want || !strings.Contains(msg, wantMsg) {
			t.Errorf("%s: %v %q %v, want %v %q", name, got, msg, err, want, wantMsg)
		}
	}
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	check("server", port, "", OutcomeSuccess, "")
	check("db serving", port, "db", OutcomeSuccess, "")
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	check("db not serving", port, "db", OutcomeFailure, "NOT_SERVING")
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	check("db serving again", port, "db", OutcomeSuccess, "")
	check("unknown service", port, "nope", OutcomeFailure, "NotFound")
	check("no health service", bare, "", OutcomeFailure, "does not implement")
	check("refused", closedPort(t), "", OutcomeFailure, "")
}

type execFunc func(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error)

func (f execFunc) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	return f(ctx, id, cmd, timeout)
}

func TestExec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		want    Outcome
		wantErr bool
	}{
		{"exit 0", nil, OutcomeSuccess, false},
		{"exit 1", utilexec.CodeExitError{Err: errors.New("exited"), Code: 1}, OutcomeFailure, false},
		{"timeout", fmt.Errorf("exec: %w", context.DeadlineExceeded), OutcomeFailure, false},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "slow"), OutcomeFailure, false},
		{"runtime error", status.Error(codes.NotFound, "no such container"), OutcomeUnknown, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := apitest.NewFakeRuntimeService()
			if tc.err != nil {
				rt.InjectError("ExecSync", tc.err)
			}
			got, _, err, _ := runProbe(t, NewExec(rt), Target{ContainerID: "containerd://abc", Command: []string{"true"}})
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("Probe = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			if err := rt.AssertCalls([]string{"ExecSync"}); err != nil {
				t.Error(err)
			}
		})
	}
	var gotID string
	var gotTimeout time.Duration
	e := NewExec(execFunc(func(_ context.Context, id string, _ []string, timeout time.Duration) ([]byte, []byte, error) {
		gotID, gotTimeout = id, timeout
		return nil, nil, nil
	}))
	runProbe(t, e, Target{ContainerID: "containerd://abc", Command: []string{"true"}, Timeout: 3 * time.Second})
	if gotID != "abc" || gotTimeout != 3*time.Second {
		t.Errorf("ExecSync got id %q timeout %v, want abc 3s", gotID, gotTimeout)
	}
}

// TestHTTPRedirectsAndTLS: the single-connection client behaves as Go's HTTP
// client with the kubelet's redirect checker: at most ten requests along a
// same-host redirect loop, then failure worded as Go's client words it; a
// custom Host kept through a relative Location, with the previous URL as
// Referer; informational answers skipped; a self-signed HTTPS server probed
// without verification; a probe cancelled while it waits for the answer
// ends (no deadline would end it).
func TestHTTPRedirectsAndTLS(t *testing.T) {
	t.Parallel()
	var loops atomic.Int32
	type seen struct{ host, referer string }
	seenC := make(chan seen, 10)
	mux := http.NewServeMux()
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		loops.Add(1)
		http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/relative", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/landing", http.StatusSeeOther)
	})
	mux.HandleFunc("/landing", func(w http.ResponseWriter, r *http.Request) {
		seenC <- seen{r.Host, r.Header.Get("Referer")}
	})
	mux.HandleFunc("/early-hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusNoContent)
	})
	arrived := make(chan struct{}, 1)
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(mux)
	t.Cleanup(tlsSrv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port

	p := NewHTTP()
	probe := func(scheme string, port int, path string, header http.Header) (Outcome, string) {
		t.Helper()
		if header == nil {
			header = http.Header{}
		}
		req, err := newHTTPRequest(&httpSpec{scheme: scheme, port: port, path: path, header: header}, "127.0.0.1", UserAgent)
		if err != nil {
			t.Fatal(err)
		}
		got, msg, err, _ := runProbe(t, p, Target{Request: req})
		if err != nil {
			t.Fatalf("Probe(%s) error %v", path, err)
		}
		return got, msg
	}

	got, msg := probe("http", port, "/loop", nil)
	wantMsg := fmt.Sprintf(`Get "http://127.0.0.1:%d/loop": stopped after 10 redirects`, port)
	if got != OutcomeFailure || msg != wantMsg {
		t.Errorf("redirect loop: %v %q, want failure %q", got, msg, wantMsg)
	}
	if n := loops.Load(); n != 10 {
		t.Errorf("redirect loop: %d requests, want 10", n)
	}

	if got, msg := probe("http", port, "/relative", http.Header{"Host": {"app.example"}}); got != OutcomeSuccess {
		t.Errorf("relative redirect: %v %q, want success", got, msg)
	}
	if s := <-seenC; s != (seen{"app.example", fmt.Sprintf("http://127.0.0.1:%d/relative", port)}) {
		t.Errorf("after the relative redirect: Host %q, Referer %q; want app.example and the first URL", s.host, s.referer)
	}

	if got, msg := probe("http", port, "/early-hints", nil); got != OutcomeSuccess {
		t.Errorf("103 then 204: %v %q, want success", got, msg)
	}
	if got, msg := probe("https", tlsPort, "/landing", nil); got != OutcomeSuccess {
		t.Errorf("https, self-signed: %v %q, want success", got, msg)
	}
	<-seenC

	req, _ := newHTTPRequest(&httpSpec{scheme: "http", port: port, path: "/hang", header: http.Header{}}, "127.0.0.1", UserAgent)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan string)
	go func() {
		_, msg, _ := p.Probe(ctx, Target{Request: req})
		done <- msg
	}()
	<-arrived // the request is in; the probe waits for the answer
	cancel()
	if msg := <-done; !strings.Contains(msg, "context canceled") {
		t.Errorf("cancelled probe: %q, want context canceled", msg)
	}
}
