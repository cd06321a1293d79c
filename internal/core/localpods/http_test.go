package localpods

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// unixClient returns a client whose every request goes to the socket.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

type reply struct {
	code   int
	reason metav1.StatusReason
	msg    string
	pods   []string
}

func do(t *testing.T, c *http.Client, method, url, ctype, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{code: resp.StatusCode}
	var head metav1.TypeMeta
	_ = json.Unmarshal(b, &head)
	switch head.Kind {
	case "Status":
		var st metav1.Status
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		r.reason, r.msg = st.Reason, st.Message
	case "PodList":
		var l v1.PodList
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			r.pods = append(r.pods, p.Namespace+"/"+p.Name+" "+string(p.UID))
		}
	case "Pod":
		var p v1.Pod
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		r.pods = []string{p.Namespace + "/" + p.Name + " " + string(p.UID)}
	default:
		t.Fatalf("%s %s: unexpected body %q", method, url, b)
	}
	return r
}

// The handler's answers, over a real unix socket (mode 0600).
func TestHandler(t *testing.T) {
	t.Parallel()
	sockDir, err := os.MkdirTemp("", "nk-lp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, SocketName)
	ag := &fakeAgent{}
	s, _ := started(t, filepath.Join(t.TempDir(), FileName), ag, nil)
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- ServeUnix(ctx, UnixConfig{Path: sock}, s.Handler(), ready) }()
	<-ready
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v, want a socket with mode 0600", fi, err)
	}

	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: c, image: i}]}\n"
	for _, tt := range []struct {
		name                     string
		c                        *http.Client
		method, url, ctype, body string
		want                     reply
	}{
		{"create over the socket", unixClient(sock), "POST", "http://local/pods", "application/yaml", strings.Replace(pod, "%s", "a", 1),
			reply{code: 201, pods: []string{"default/a uid-1"}}},
		{"create JSON", unixClient(sock), "POST", "http://local/pods", "application/json",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"x"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
			reply{code: 201, pods: []string{"x/b uid-2"}}},
		{"duplicate", unixClient(sock), "POST", "http://local/pods", "application/yaml", strings.Replace(pod, "%s", "a", 1),
			reply{code: 409, reason: metav1.StatusReasonAlreadyExists, msg: `pod "default/a": already exists`}},
		{"bad field", unixClient(sock), "POST", "http://local/pods?filename=my.yaml", "application/yaml",
			"apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: c, image: i, cpu: 1}]}\n",
			reply{code: 400, reason: metav1.StatusReasonBadRequest,
				msg: `my.yaml: document 1: pod "c": unknown field "spec.containers[0].cpu"`}},
		{"form post refused", unixClient(sock), "POST", "http://local/pods", "text/plain", strings.Replace(pod, "%s", "d", 1),
			reply{code: 415, reason: metav1.StatusReasonUnsupportedMediaType}},
		{"bad grace", unixClient(sock), "DELETE", "http://local/pods/default/a?gracePeriodSeconds=-1", "", "",
			reply{code: 400, reason: metav1.StatusReasonBadRequest, msg: `gracePeriodSeconds: "-1": want a whole number of seconds, 0 or more`}},
		{"delete", unixClient(sock), "DELETE", "http://local/pods/default/a?gracePeriodSeconds=3", "", "",
			reply{code: 200, pods: []string{"default/a uid-1"}}},
		{"delete missing", unixClient(sock), "DELETE", "http://local/pods/default/a", "", "",
			reply{code: 404, reason: metav1.StatusReasonNotFound, msg: `pod "default/a": not found`}},
	} {
		got := do(t, tt.c, tt.method, tt.url, tt.ctype, tt.body)
		if tt.want.code == 415 {
			got.msg = "" // names the types
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(reply{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	if len(ag.kills) != 1 || *ag.kills[0].GracePeriodOverride != 3 {
		t.Errorf("kills: %+v, want one with grace 3", ag.kills)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// A stale socket is replaced; another file is not touched.
func TestServeUnixReplacesOnlySockets(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "nk-lp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- ServeUnix(ctx, UnixConfig{Path: stale}, http.NotFoundHandler(), ready) }()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("stale socket: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "file")
	if err := os.WriteFile(plain, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = ServeUnix(t.Context(), UnixConfig{Path: plain}, http.NotFoundHandler(), nil)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("on a regular file: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Errorf("regular file changed: %q", b)
	}
}

// serveUnix serves h on a socket in a new directory (mode 0700) with cfg until
// the test ends and returns the socket's path.
func serveUnix(t *testing.T, cfg UnixConfig, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nk-lp-")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Path = filepath.Join(dir, SocketName)
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- ServeUnix(ctx, cfg, h, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
	})
	select {
	case <-ready:
	case err := <-served:
		t.Fatal(err)
	}
	return cfg.Path
}

// A client that sends a header and then holds its body open is cut off after
// ReadTimeout, and so is one that never finishes its header after
// ReadHeaderTimeout: neither holds a connection (and a handler) forever.
func TestServeUnixReadTimeouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  UnixConfig
		send string
	}{
		{"body held open", UnixConfig{ReadTimeout: 200 * time.Millisecond},
			"POST /pods HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\napiVersion: v1\n"},
		{"header held open", UnixConfig{ReadHeaderTimeout: 200 * time.Millisecond}, "POST /pods HTTP/1.1\r\nHost: localhost\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			read := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				read <- err
			})
			sock := serveUnix(t, tc.cfg, h)
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.send); err != nil {
				t.Fatal(err)
			}
			// Without the timeouts the server would wait as long as the
			// client: the defaults are a minute and ten seconds.
			if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(conn)
			if err != nil {
				t.Fatalf("read %q, %v; want the server to close the connection", b, err)
			}
			if tc.cfg.ReadTimeout != 0 {
				if err := <-read; err == nil {
					t.Error("the handler read the whole body of a request cut off")
				}
			}
		})
	}
}

// The socket is refused in a directory another user may write to (who could
// replace it) or that another user owns, and is served in one of our own.
func TestServeUnixDirectory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		chown bool // to uid 65534
		want  string
	}{
		{"group writable", 0o770, false, "mode 0770: writable by other users"},
		{"world writable", 0o777, false, "mode 0777: writable by other users"},
		{"sticky world writable", 0o1777, false, "mode 0777: writable by other users"},
		{"owned by another user", 0o755, true, "owned by uid 65534"},
		{"ours", 0o755, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.chown && os.Geteuid() != 0 {
				integration.Require(t, "needs root to give the directory away")
			}
			dir, err := os.MkdirTemp("", "nk-lp-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.chown {
				if err := os.Chown(dir, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			ready := make(chan struct{})
			served := make(chan error, 1)
			go func() {
				served <- ServeUnix(ctx, UnixConfig{Path: filepath.Join(dir, SocketName)}, http.NotFoundHandler(), ready)
			}()
			var err2 error
			select {
			case <-ready:
				cancel()
				err2 = <-served
			case err2 = <-served:
				cancel()
			}
			switch {
			case tc.want == "" && err2 != nil:
				t.Errorf("ServeUnix = %v, want it served", err2)
			case tc.want != "" && (err2 == nil || !strings.Contains(err2.Error(), tc.want) || !strings.Contains(err2.Error(), dir)):
				t.Errorf("ServeUnix = %v, want an error naming %s: %s", err2, dir, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left in the directory: %v", entries)
			}
		})
	}
}

// A hijacked connection (an exec session's stream) ends with ServeUnix: its
// request's context ends at the shutdown, and ServeUnix returns only once
// its handler did (issue 29: exec sessions outlived the socket server).
func TestServeUnixEndsHijackedStreams(t *testing.T) {
	t.Parallel()
	hijacked, ended := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer close(ended)
		defer conn.Close()
		close(hijacked)
		<-r.Context().Done() // the stream runs until its context ends
	})
	dir, err := os.MkdirTemp("", "nk-lp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := UnixConfig{Path: filepath.Join(dir, SocketName)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- ServeUnix(ctx, cfg, h, ready) }()
	<-ready
	conn, err := net.Dial("unix", cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /exec/default/web/app HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hijacked:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not hijack the connection")
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ServeUnix did not return")
	}
	select {
	case <-ended:
	default:
		t.Fatal("ServeUnix returned while the hijacked stream's handler still ran")
	}
}
