package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serveFiles serves path → file from the examples, as a running agent would.
func serveFiles(t *testing.T, files map[string]string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for path, file := range files {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, file) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// explain eviction gives the same answer from URLs as from the files.
func TestExplainReadsURLs(t *testing.T) {
	t.Parallel()
	const pods, summary = "../../examples/eviction/memory/pods.json", "../../examples/eviction/memory/summary.json"
	srv := serveFiles(t, map[string]string{"/pods": pods, "/stats/summary": summary})
	code, want, errOut := runCLI(t, "explain", "eviction", "--pods", pods, "--summary", summary)
	if code != 0 {
		t.Fatalf("from files: exit %d: %s", code, errOut)
	}
	code, got, errOut := runCLI(t, "explain", "eviction", "--pods", srv.URL+"/pods", "--summary", srv.URL+"/stats/summary")
	if code != 0 {
		t.Fatalf("from URLs: exit %d: %s", code, errOut)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("output from URLs (-files +URLs):\n%s", diff)
	}
}

func TestURLInputErrors(t *testing.T) {
	t.Parallel()
	const pods = "../../examples/eviction/memory/pods.json"
	srv := serveFiles(t, map[string]string{"/pods": pods})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /endless", func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 4096))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("GET /broken", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "stats not ready", http.StatusServiceUnavailable)
	})
	odd := httptest.NewServer(mux)
	t.Cleanup(odd.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/stats/summary"
	ln.Close()
	for _, tc := range []struct {
		name    string
		summary string
		want    string
	}{
		{"not found", srv.URL + "/stats/summary", "nodekeeper: GET " + srv.URL + "/stats/summary: 404 Not Found\n"},
		{"unavailable", odd.URL + "/broken", "nodekeeper: GET " + odd.URL + "/broken: 503 Service Unavailable\n"},
		{"too large", odd.URL + "/endless", "nodekeeper: " + odd.URL + "/endless: larger than the input size limit of 64Ki (65536 bytes; see --max-input-size)\n"},
		{"refused", closed, "nodekeeper: GET " + closed + ": dial tcp " + strings.TrimPrefix(strings.TrimSuffix(closed, "/stats/summary"), "http://") + ": connect: connection refused\n"},
		{"bad URL", "http://[::1", `nodekeeper: http://[::1: parse "http://[::1": missing ']' in host` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, "--max-input-size", "64Ki", "explain", "eviction", "--pods", srv.URL+"/pods", "--summary", tc.summary)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if diff := cmp.Diff(tc.want, errOut); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// A server that never answers: readURL gives up after its timeout, or when
// ctx ends, whichever is first.
func TestReadURLTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	// hang returns a server whose handler reports each request on entered,
	// then waits for the client to go away.
	hang := func(entered chan<- struct{}) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-r.Context().Done()
		}))
		t.Cleanup(srv.Close)
		return srv
	}

	// The timeout holds whether or not the request reached the handler
	// before it (on a busy machine it may not have).
	slow := hang(make(chan struct{}))
	_, err := readURL(t.Context(), slow.URL, 0, 50*time.Millisecond)
	if want := "GET " + slow.URL + ": no complete answer within 50ms"; err == nil || err.Error() != want {
		t.Errorf("timeout: %v, want %s", err, want)
	}

	entered := make(chan struct{}, 1)
	srv := hang(entered)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := readURL(ctx, srv.URL, 0, time.Hour)
		done <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("readURL did not return after ctx ended")
	}
}
