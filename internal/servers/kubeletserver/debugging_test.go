package kubeletserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
)

// serveLocal serves d.LocalHandler on a unix socket as the agent does
// (localpods.ServeUnix), with readTimeout, until the test ends; it returns
// a client whose every request goes to the socket.
func serveLocal(t *testing.T, d *Debugging, readTimeout time.Duration) *http.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- localpods.ServeUnix(ctx, localpods.UnixConfig{Path: sock, ReadTimeout: readTimeout, Logger: testLogger(t)}, d.LocalHandler(), ready)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// TestLocalHandler serves logs and exec on the unix socket, by the same
// handlers as the kubelet API (same answers), and nothing else.
func TestLocalHandler(t *testing.T) {
	t.Parallel()
	f := newLogFixture(t, nil)
	d, err := NewDebugging(DebuggingDeps{Pods: f.deps.Pods, Runtime: f.deps.Runtime, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := serveLocal(t, d, 0)
	for _, tc := range []struct {
		method, path string
		wantCode     int
		want         string
	}{
		{"GET", "/containerLogs/ns/web/app?tailLines=2", 200, "ee\nfour\n"},
		{"GET", "/containerLogs/ns/web/app?previous=true", 200, "old one\nold crash\n"},
		{"GET", "/containerLogs/ns/nope/app", 404, `pod "nope" does not exist`},
		{"POST", "/exec/ns/nope/app?command=true&output=1", 404, "pod does not exist"},
		{"GET", "/exec/ns/web/waiting?command=true&output=1", 404, `container not found ("waiting")`},
		{"GET", "/attach/ns/web/app?output=1", 404, "404 page not found\n"},
		{"GET", "/portForward/ns/web", 404, "404 page not found\n"},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, "http://localhost"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.wantCode || string(b) != tc.want {
			t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, resp.StatusCode, b, tc.wantCode, tc.want)
		}
	}
}
