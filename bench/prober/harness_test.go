package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// maxEnv turns on the -max phase in TestSmoke. The search raises the probe
// rate until this machine falls behind, so it keeps every core busy for
// several seconds: too much for the default test run, where it slows the
// real-time tests of other packages.
const maxEnv = "BENCH_PROBER_MAX"

// TestSmoke runs every phase of the benchmark briefly against in-process
// loopback servers and checks that each one did its work: the engine ran
// every probe without failures and measured start lateness, the paced bare
// loop made all its requests, the back-to-back loop made some. The -max
// search runs only with BENCH_PROBER_MAX=1.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	searchMax := os.Getenv(maxEnv) == "1"
	var probeHits, bareHits atomic.Int64
	var addrs []string
	for range 4 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The engine sends the kubelet's User-Agent; the bare loops
			// send Go's default.
			if strings.HasPrefix(r.UserAgent(), "kube-probe/") {
				probeHits.Add(1)
			} else {
				bareHits.Add(1)
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(s.Close)
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	const probes = 200
	var out strings.Builder
	err := report(t.Context(), &out, addrs, options{
		// A generous timeout: the smoke test checks that every phase works, not
		// how fast; on a loaded 2-core machine a 1s probe timeout can expire.
		probes: probes, period: time.Second, timeout: 20 * time.Second, duration: 2 * time.Second, bareDuration: 300 * time.Millisecond,
		searchMax: searchMax, maxStep: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	text := out.String()
	atoi := func(s string) int {
		t.Helper()
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	m := regexp.MustCompile(`engine: 200 HTTP probes, period 1s, [^:]+: (\d+) runs, \d+ probes/s, (\d+) failed/unknown, .*, start lateness p50 [\d.]+ ms p99 [\d.]+ ms max ([\d.]+) ms`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no engine line in the report")
	}
	// With a 1s period and a first run within the first second, every
	// probe runs at least once in 2s.
	if runs := atoi(m[1]); runs < probes {
		t.Errorf("engine: %d runs, want at least one per probe (%d)", runs, probes)
	}
	if m[2] != "0" {
		t.Errorf("engine: %s probes failed against healthy servers", m[2])
	}
	if m[3] == "0.00" {
		t.Errorf("engine: no start lateness measured")
	}
	if n := probeHits.Load(); n < probes {
		t.Errorf("servers saw %d probe requests, want at least %d", n, probes)
	}

	// Paced at 200 req/s for 300ms: one request per 5ms slot, 60 slots.
	m = regexp.MustCompile(`bare loop, paced at 200 req/s for 300ms: (\d+) requests \((\d+) errors\)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no paced bare-loop line in the report")
	}
	if got := atoi(m[1]); got != 60 {
		t.Errorf("paced bare loop: %d requests, want 60", got)
	}
	if m[2] != "0" {
		t.Errorf("paced bare loop: %s errors against healthy servers", m[2])
	}
	m = regexp.MustCompile(`bare loop, back to back \(\d+ goroutines\) for 300ms: (\d+) req/s`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no back-to-back bare-loop line in the report")
	}
	if atoi(m[1]) == 0 {
		t.Errorf("back-to-back bare loop made no requests")
	}
	if n := bareHits.Load(); n <= 60 {
		t.Errorf("servers saw %d bare-loop requests, want more than the paced loop's 60", n)
	}

	if got := strings.Contains(text, "highest sustained:"); got != searchMax {
		t.Errorf("-max result in the report: %v, want %v (%s=%q)", got, searchMax, maxEnv, os.Getenv(maxEnv))
	}
}
