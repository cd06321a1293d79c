package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkHTTPProbe is one HTTP probe run against a loopback server: a new
// connection, the request, the answer, the reset. Its CPU includes the
// server's; allocs/op is the runner's and the server's.
//
//	go test -run '^$' -bench HTTPProbe -benchmem ./prober
func BenchmarkHTTPProbe(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Accept", "*/*")
	h := NewHTTP()
	t := Target{Request: req, Timeout: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), t.Timeout)
		out, msg, err := h.Probe(ctx, t)
		cancel()
		if err != nil || out != OutcomeSuccess {
			b.Fatalf("probe: %v %s %v", out, msg, err)
		}
	}
}
