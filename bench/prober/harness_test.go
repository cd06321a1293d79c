package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every phase of the benchmark for a few seconds against
// in-process loopback servers.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	var addrs []string
	for range 4 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		t.Cleanup(s.Close)
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	var out strings.Builder
	err := report(t.Context(), &out, addrs, options{
		probes: 200, period: time.Second, duration: 2500 * time.Millisecond, bareDuration: 500 * time.Millisecond,
		searchMax: true, maxStep: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	m := regexp.MustCompile(`engine: 200 HTTP probes, period 1s, [^:]+: (\d+) runs, \d+ probes/s, (\d+) failed`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no engine line in the report")
	}
	if m[2] != "0" {
		t.Errorf("%s probes failed against healthy servers", m[2])
	}
	if !strings.Contains(out.String(), "highest sustained:") {
		t.Errorf("no -max result in the report")
	}
}
