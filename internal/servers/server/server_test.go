package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func testLogger(t *testing.T) *slog.Logger {
	out := &testOutput{w: t.Output()}
	// Registered first, so it runs last: after the servers' cleanups have
	// stopped them. The lock orders a handler's last write before the
	// test's end for the race detector, which sees no order through the
	// loopback connection the handler answered.
	t.Cleanup(func() {
		out.mu.Lock()
		defer out.mu.Unlock()
		out.ended = true
	})
	return slog.New(slog.NewTextHandler(out, nil))
}

// testOutput is a test's output for the servers' loggers: writes after the
// test's cleanups are dropped.
type testOutput struct {
	mu    sync.Mutex
	w     io.Writer
	ended bool
}

func (o *testOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return len(p), nil
	}
	return o.w.Write(p)
}

// start runs a server for t on a free loopback port and returns its base URL.
// The server stops, and Run's error is checked, when t ends.
func start(t *testing.T, cfg Config, deps Deps) string {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready")
	}
	if s.Addr() == "" {
		t.Fatalf("not listening: %v", <-done)
	}
	return "http://" + s.Addr()
}

var (
	start1 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	u64    = func(v uint64) *uint64 { return &v }
)

func fullSummary() *statsapi.Summary {
	cpu := &statsapi.CPUStats{Time: start1, UsageNanoCores: u64(5)}
	mem := &statsapi.MemoryStats{Time: start1, WorkingSetBytes: u64(100)}
	fs := &statsapi.FsStats{Time: start1, UsedBytes: u64(7)}
	return &statsapi.Summary{
		Node: statsapi.NodeStats{
			NodeName: "n1", StartTime: start1, CPU: cpu, Memory: mem, Fs: fs,
			Rlimit:           &statsapi.RlimitStats{Time: start1, NumOfRunningProcesses: ptr(int64(3))},
			SystemContainers: []statsapi.ContainerStats{{Name: "kubelet", StartTime: start1, CPU: cpu, Memory: mem, Logs: fs}},
		},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "p", Namespace: "default", UID: "u1"}, StartTime: start1, CPU: cpu, Memory: mem,
			EphemeralStorage: fs, VolumeStats: []statsapi.VolumeStats{{Name: "v", FsStats: *fs}},
			Containers: []statsapi.ContainerStats{{Name: "c", StartTime: start1, CPU: cpu, Memory: mem, Rootfs: fs}},
		}},
	}
}

func ptr[T any](v T) *T { return &v }

func cpuMemSummary() *statsapi.Summary {
	cpu := &statsapi.CPUStats{Time: start1, UsageNanoCores: u64(5)}
	mem := &statsapi.MemoryStats{Time: start1, WorkingSetBytes: u64(100)}
	return &statsapi.Summary{
		Node: statsapi.NodeStats{
			NodeName: "n1", StartTime: start1, CPU: cpu, Memory: mem,
			SystemContainers: []statsapi.ContainerStats{{Name: "kubelet", StartTime: start1, CPU: cpu, Memory: mem}},
		},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "p", Namespace: "default", UID: "u1"}, StartTime: start1, CPU: cpu, Memory: mem,
			Containers: []statsapi.ContainerStats{{Name: "c", StartTime: start1, CPU: cpu, Memory: mem}},
		}},
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "nodekeeper_test_total", Help: "A test counter."}))
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Status:     v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.2"},
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{
		Conditions: []v1.NodeCondition{{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue}}}}
	healthy := start(t, Config{}, Deps{
		Pods:     func() []*v1.Pod { return []*v1.Pod{pod} },
		Summary:  func(context.Context) (*statsapi.Summary, error) { return fullSummary(), nil },
		Gatherer: reg,
		Healthz:  []Check{{Name: "syncloop", Check: func(context.Context) error { return nil }}},
		Node:     func(context.Context) (*v1.Node, error) { return node, nil },
		Configz:  func() any { return map[string]int{"maxPods": 5} },
	})
	broken := start(t, Config{}, Deps{
		Pods:    func() []*v1.Pod { return nil },
		Summary: func(context.Context) (*statsapi.Summary, error) { return nil, errors.New("no stats yet") },
		Node:    func(context.Context) (*v1.Node, error) { return nil, errors.New("no capacity yet") },
		Healthz: []Check{
			{Name: "ping", Check: func(context.Context) error { return nil }},
			{Name: "syncloop", Check: func(context.Context) error { return errors.New("sync loop stalled for 2m0s") }},
		},
	})
	podList := jsonOf(t, v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []v1.Pod{*pod}})
	for _, tc := range []struct {
		name, base, method, path string
		status                   int
		contentType              string
		body                     string // exact, unless contains is set
		contains                 string
		allow                    string
	}{
		{name: "healthz ok", base: healthy, method: "GET", path: "/healthz", status: 200, contentType: "text/plain; charset=utf-8", body: "ok"},
		{name: "healthz verbose", base: healthy, method: "GET", path: "/healthz?verbose", status: 200, body: "[+]syncloop ok\nhealthz check passed\n"},
		{name: "healthz HEAD", base: healthy, method: "HEAD", path: "/healthz", status: 200},
		{name: "healthz failing", base: broken, method: "GET", path: "/healthz", status: 500,
			body: "[+]ping ok\n[-]syncloop failed: sync loop stalled for 2m0s\nhealthz check failed\n"},
		{name: "one check ok", base: broken, method: "GET", path: "/healthz/ping", status: 200, body: "ok"},
		{name: "one check failing", base: broken, method: "GET", path: "/healthz/syncloop", status: 500,
			body: "[-]syncloop failed: sync loop stalled for 2m0s\nhealthz check failed\n"},
		{name: "unknown check", base: broken, method: "GET", path: "/healthz/log", status: 404},
		{name: "healthz POST", base: healthy, method: "POST", path: "/healthz", status: 405, allow: "GET, HEAD"},
		{name: "pods", base: healthy, method: "GET", path: "/pods", status: 200, contentType: "application/json", body: podList},
		{name: "no pods is an empty list", base: broken, method: "GET", path: "/pods", status: 200,
			body: `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`},
		{name: "pods DELETE", base: healthy, method: "DELETE", path: "/pods", status: 405, allow: "GET, HEAD"},
		{name: "summary", base: healthy, method: "GET", path: "/stats/summary", status: 200, contentType: "application/json", body: jsonOf(t, fullSummary())},
		{name: "summary POST", base: healthy, method: "POST", path: "/stats/summary", status: 200, body: jsonOf(t, fullSummary())},
		{name: "summary cpu and memory", base: healthy, method: "GET", path: "/stats/summary?only_cpu_and_memory=true", status: 200, body: jsonOf(t, cpuMemSummary())},
		{name: "summary only_cpu_and_memory=false", base: healthy, method: "GET", path: "/stats/summary?only_cpu_and_memory=false", status: 200, body: jsonOf(t, fullSummary())},
		{name: "summary error", base: broken, method: "GET", path: "/stats/summary", status: 500, body: "Internal Error: no stats yet\n"},
		{name: "summary PUT", base: healthy, method: "PUT", path: "/stats/summary", status: 405, allow: "GET, HEAD, POST"},
		{name: "metrics", base: healthy, method: "GET", path: "/metrics", status: 200, contains: "nodekeeper_test_total 0\n"},
		{name: "no gatherer, no metrics", base: broken, method: "GET", path: "/metrics", status: 404},
		{name: "node", base: healthy, method: "GET", path: "/node", status: 200, contentType: "application/json", body: jsonOf(t, node)},
		{name: "node error", base: broken, method: "GET", path: "/node", status: 500, body: "Internal Error: no capacity yet\n"},
		{name: "configz not on the read-only port", base: healthy, method: "GET", path: "/configz", status: 404},
		{name: "unknown path", base: healthy, method: "GET", path: "/spec", status: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), tc.method, tc.base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tc.status, b)
			}
			if tc.contentType != "" && resp.Header.Get("Content-Type") != tc.contentType {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tc.contentType)
			}
			if tc.allow != "" && resp.Header.Get("Allow") != tc.allow {
				t.Errorf("Allow %q, want %q", resp.Header.Get("Allow"), tc.allow)
			}
			switch {
			case tc.contains != "":
				if !strings.Contains(string(b), tc.contains) {
					t.Errorf("body lacks %q:\n%s", tc.contains, b)
				}
			case tc.body != "":
				if diff := cmp.Diff(tc.body, string(b)); diff != "" {
					t.Errorf("body (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A client that never finishes its header is cut off after ReadHeaderTimeout.
func TestReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	base := start(t, Config{ReadHeaderTimeout: 100 * time.Millisecond}, Deps{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	// Without the timeout the server would wait a minute (ReadTimeout).
	if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = bufio.NewReader(conn).ReadString('\n')
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read = %v, want EOF: the server closes the connection", err)
	}
}

// A request in flight when Run's context ends completes; Run returns after it.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	s, err := New(Config{}, Deps{Logger: testLogger(t), Summary: func(ctx context.Context) (*statsapi.Summary, error) {
		close(entered)
		<-release
		return &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "n1"}}, ctx.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()
	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/stats/summary")
		if err != nil {
			got <- result{err: err}
			return
		}
		resp.Body.Close()
		got <- result{status: resp.StatusCode}
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned with a request in flight: %v", err)
	default:
	}
	close(release)
	if r := <-got; r.err != nil || r.status != 200 {
		t.Errorf("request in flight: status %d, err %v; want 200", r.status, r.err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// A request outliving ShutdownTimeout is cut off: its context ends and Run
// returns.
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	s, err := New(Config{ShutdownTimeout: 50 * time.Millisecond}, Deps{Logger: testLogger(t), Summary: func(ctx context.Context) (*statsapi.Summary, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()
	go func() {
		if resp, err := http.Get("http://" + s.Addr() + "/stats/summary"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the shutdown timeout")
	}
}

func TestRunListenError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Port: ln.Addr().(*net.TCPAddr).Port}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Run = %v, want address already in use", err)
	}
	select {
	case <-s.Ready():
	default:
		t.Error("Ready not closed after a failed listen")
	}
	if s.Addr() != "" {
		t.Errorf("Addr = %q after a failed listen", s.Addr())
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		deps  Deps
		error string
	}{
		{"hostname", Config{Address: "localhost"}, Deps{}, `server: address "localhost": not an IP address`},
		{"port", Config{Port: 70000}, Deps{}, "server: port 70000: want 0 to 65535"},
		{"negative port", Config{Port: -1}, Deps{}, "server: port -1: want 0 to 65535"},
		{"timeout", Config{ReadTimeout: -time.Second}, Deps{}, "server: negative timeout -1s"},
		{"check without name", Config{}, Deps{Healthz: []Check{{Check: func(context.Context) error { return nil }}}}, "server: Healthz[0]: want a name and a check function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.cfg, tc.deps)
			if err == nil || err.Error() != tc.error {
				t.Errorf("New = %v, want %s", err, tc.error)
			}
		})
	}
}

// Stopped before it listens, Run returns nil.
func TestRunStoppedBeforeListening(t *testing.T) {
	t.Parallel()
	s, err := New(Config{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// The read-only port, even on the loopback where every local user and every
// hostNetwork pod reaches it, changes no pod and serves neither /configz nor
// profiles, logs or exec, whatever Deps hold; Handler, for the root-only
// socket, serves them all.
func TestReadOnlyPortServesNoMore(t *testing.T) {
	t.Parallel()
	changes := make(chan string, 10)
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		changes <- r.Method + " " + r.URL.Path
		w.WriteHeader(http.StatusCreated)
	})
	debugging := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	deps := Deps{
		Pods: func() []*v1.Pod { return nil }, Local: local, Profiling: true, Debugging: debugging,
		Configz: func() any { return map[string]int{"maxPods": 5} },
		Events:  func() []v1.Event { return nil },
	}
	base := start(t, Config{Address: "127.0.0.1"}, deps)
	type answer struct {
		Method, Path string
		Code         int
	}
	var port, socket []answer
	s, err := New(Config{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path string }{
		{"POST", "/pods"}, {"DELETE", "/pods/default/web"}, {"PUT", "/pods"},
		{"GET", "/configz"}, {"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/cmdline"}, {"GET", "/debug/pprof/goroutine?debug=1"},
		{"GET", "/events"},
		{"GET", "/containerLogs/default/web/app"}, {"POST", "/exec/default/web/app?command=true"},
	} {
		req, err := http.NewRequestWithContext(t.Context(), r.method, base+r.path, strings.NewReader("apiVersion: v1\nkind: Pod\n"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/yaml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		port = append(port, answer{r.method, r.path, resp.StatusCode})
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(r.method, r.path, strings.NewReader("x")))
		socket = append(socket, answer{r.method, r.path, rec.Code})
	}
	wantPort := []answer{
		{"POST", "/pods", 405}, {"DELETE", "/pods/default/web", 404}, {"PUT", "/pods", 405},
		{"GET", "/configz", 404}, {"GET", "/debug/pprof/", 404}, {"GET", "/debug/pprof/cmdline", 404}, {"GET", "/debug/pprof/goroutine?debug=1", 404},
		{"GET", "/events", 404},
		{"GET", "/containerLogs/default/web/app", 404}, {"POST", "/exec/default/web/app?command=true", 404},
	}
	if diff := cmp.Diff(wantPort, port); diff != "" {
		t.Errorf("read-only port (-want +got):\n%s", diff)
	}
	wantSocket := []answer{
		{"POST", "/pods", 201}, {"DELETE", "/pods/default/web", 201}, {"PUT", "/pods", 405},
		{"GET", "/configz", 200}, {"GET", "/debug/pprof/", 200}, {"GET", "/debug/pprof/cmdline", 200}, {"GET", "/debug/pprof/goroutine?debug=1", 200},
		{"GET", "/events", 200},
		{"GET", "/containerLogs/default/web/app", 202}, {"POST", "/exec/default/web/app?command=true", 202},
	}
	if diff := cmp.Diff(wantSocket, socket); diff != "" {
		t.Errorf("Handler (-want +got):\n%s", diff)
	}
	close(changes)
	var got []string
	for c := range changes {
		got = append(got, c)
	}
	if diff := cmp.Diff([]string{"POST /pods", "DELETE /pods/default/web"}, got); diff != "" {
		t.Errorf("changes reaching Deps.Local, all through Handler (-want +got):\n%s", diff)
	}
}

// The read-only port answers only requests addressed to an IP, localhost or
// the node's names: a page whose DNS name was rebound to 127.0.0.1 is refused.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	base := start(t, Config{HostNames: []string{"Node-1", "build.example.org."}}, Deps{Pods: func() []*v1.Pod { return nil }})
	port := base[strings.LastIndex(base, ":"):]
	for _, tc := range []struct {
		host string
		code int
	}{
		{"attacker.example", http.StatusMisdirectedRequest},
		{"attacker.example" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1.attacker.example", http.StatusMisdirectedRequest},
		{"localhost.attacker.example", http.StatusMisdirectedRequest},
		{"127.0.0.1" + port, 200},
		{"127.0.0.1", 200},
		{"[::1]" + port, 200},
		{"[::1]", 200},
		{"10.1.2.3", 200},
		{"localhost" + port, 200},
		{"LOCALHOST.", 200},
		{"node-1" + port, 200},
		{"build.example.org", 200},
		{"node-2", http.StatusMisdirectedRequest},
	} {
		t.Run(tc.host, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), "GET", base+"/pods", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("Host %q: %d %q, want %d", tc.host, resp.StatusCode, b, tc.code)
			}
			if tc.code != 200 && !strings.Contains(string(b), fmt.Sprintf("Host %q: not this node", tc.host)) {
				t.Errorf("Host %q: body %q does not say why", tc.host, b)
			}
		})
	}
	anyHost := start(t, Config{AnyHost: true}, Deps{})
	req, err := http.NewRequestWithContext(t.Context(), "GET", anyHost+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("AnyHost: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, err := New(Config{HostNames: []string{"evil.example:80"}}, Deps{}); err == nil {
		t.Error("New accepted a host name with a port")
	}
}

// GET /events serves Deps.Events as a v1 EventList, on Handler only.
func TestEventsEndpoint(t *testing.T) {
	t.Parallel()
	want := []v1.Event{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web.1"}, Reason: "BackOff", Count: 3,
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}}}
	s, err := New(Config{}, Deps{Events: func() []v1.Event { return want }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/events", nil))
	var got v1.EventList
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("%d %q: %v", rec.Code, rec.Body, err)
	}
	if got.Kind != "EventList" || got.APIVersion != "v1" {
		t.Errorf("type %s %s", got.APIVersion, got.Kind)
	}
	if diff := cmp.Diff(want, got.Items); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
