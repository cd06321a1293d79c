package localpods

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// MaxBodyBytes bounds a POST /pods body.
const MaxBodyBytes = 4 << 20

// SocketName is the unix socket's name in the state directory.
const SocketName = "nodekeeper.sock"

// Content types a POST /pods body may have. Anything else is refused (415):
// a second guard, should the handler ever be reachable from a browser,
// which sends other content types only after a CORS preflight, never
// answered here.
var bodyTypes = []string{"application/yaml", "application/x-yaml", "application/json", "text/yaml"}

// Handler serves the store's changes:
//
//   - POST /pods creates the pods of a manifest in the body (YAML or JSON;
//     Content-Type one of application/yaml, application/x-yaml, text/yaml,
//     application/json; ?filename=NAME names it in errors): 201 with a v1
//     PodList of the stored pods; 400 for a bad manifest, 409 when a pod
//     exists, each with a metav1.Status whose message is one line.
//   - DELETE /pods/{namespace}/{name}[?gracePeriodSeconds=N] deletes a pod
//     gracefully and answers 200 with the pod, marked deleted, once it is gone;
//     404 when there is no such pod.
//
// It must be served only where root alone reaches it: the root-only unix
// socket (ServeUnix). Nothing here is authenticated, so no TCP port serves it,
// not even on the loopback, which every local user and every hostNetwork pod
// reaches.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pods", s.create)
	mux.HandleFunc("DELETE /pods/{namespace}/{name}", s.delete)
	return mux
}

func (s *Store) create(w http.ResponseWriter, r *http.Request) {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || !slices.Contains(bodyTypes, ct) {
		writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("Content-Type %q: want one of %s", r.Header.Get("Content-Type"), strings.Join(bodyTypes, ", ")))
		return
	}
	name := r.URL.Query().Get("filename")
	if name == "" {
		name = "request body"
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
				fmt.Sprintf("%s: larger than %d bytes", name, MaxBodyBytes))
			return
		}
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("%s: %v", name, err))
		return
	}
	pods, err := s.Create(r.Context(), name, data)
	if err != nil {
		s.writeError(w, err)
		return
	}
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: make([]v1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	writeJSON(w, http.StatusCreated, &list)
}

func (s *Store) delete(w http.ResponseWriter, r *http.Request) {
	var grace *int64
	if v := r.URL.Query().Get("gracePeriodSeconds"); v != "" {
		g, err := strconv.ParseInt(v, 10, 64)
		if err != nil || g < 0 {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("gracePeriodSeconds: %q: want a whole number of seconds, 0 or more", v))
			return
		}
		grace = &g
	}
	p, err := s.Delete(r.Context(), r.PathValue("namespace"), r.PathValue("name"), grace)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// writeError answers err with its status code.
func (s *Store) writeError(w http.ResponseWriter, err error) {
	msg := strings.NewReplacer("\r\n", " ", "\n", " ").Replace(err.Error())
	switch {
	case errors.Is(err, decode.ErrBadInput):
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, msg)
	case errors.Is(err, ErrExists):
		writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, msg)
	case errors.Is(err, ErrNotFound):
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, msg)
	default:
		s.log.Error("Local pods request failed", "err", err)
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, msg)
	}
}

// writeStatus answers a metav1.Status failure.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// Timeouts of the socket's connections when UnixConfig leaves them zero: as
// the read-only port's (internal/servers/server). There is no write timeout: a DELETE
// answers once the pod is gone, after its grace period, and a CPU profile
// after the seconds asked for.
const (
	DefaultSocketReadHeaderTimeout = 10 * time.Second
	DefaultSocketReadTimeout       = time.Minute
	DefaultSocketIdleTimeout       = 2 * time.Minute
)

// UnixConfig is where and how ServeUnix serves.
type UnixConfig struct {
	// Path is the socket's path. Its directory must belong to this
	// process's user and be writable by no other: anyone who could write
	// there could replace the socket.
	Path string
	// ReadHeaderTimeout bounds the reading of a request's header,
	// ReadTimeout that of the whole request, body included; IdleTimeout how
	// long a kept-alive connection waits for the next request. Zero means
	// the DefaultSocket... value.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// Logger receives the server's errors; nil discards them.
	Logger *slog.Logger
}

// ServeUnix serves h on a unix socket at cfg.Path, mode 0600 (its user
// alone: root for the agent), until ctx ends; then it shuts down (requests
// in flight get five seconds, then their connections are closed; the
// contexts of hijacked ones, exec sessions, end), waits up to five seconds
// more for every handler to return, removes the socket and returns nil. A stale
// socket at the path is replaced; any other file there, or a directory that
// another user may write, is an error. ready, when not nil, is closed once it
// listens.
func ServeUnix(ctx context.Context, cfg UnixConfig, h http.Handler, ready chan<- struct{}) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&cfg.ReadHeaderTimeout, DefaultSocketReadHeaderTimeout},
		{&cfg.ReadTimeout, DefaultSocketReadTimeout},
		{&cfg.IdleTimeout, DefaultSocketIdleTimeout},
	} {
		if *d.v < 0 {
			return fmt.Errorf("localpods: socket %s: negative timeout %v", cfg.Path, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	path := cfg.Path
	dir := filepath.Dir(path)
	if err := privateDir(dir); err != nil {
		return fmt.Errorf("localpods: socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return fmt.Errorf("localpods: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("localpods: %w", err)
		}
	}
	// Listen in a directory of our own (mode 0700), restrict the socket,
	// then move it in place: no one else can connect before its mode is
	// 0600, whatever the umask.
	tmp, err := os.MkdirTemp(dir, ".nodekeeper-sock-")
	if err != nil {
		return fmt.Errorf("localpods: %w", err)
	}
	defer os.RemoveAll(tmp)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", filepath.Join(tmp, "s"))
	if err != nil {
		return fmt.Errorf("localpods: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(filepath.Join(tmp, "s"), 0o600); err != nil {
		_ = ln.Close()
		return fmt.Errorf("localpods: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, "s"), path); err != nil {
		_ = ln.Close()
		return fmt.Errorf("localpods: %w", err)
	}
	defer os.Remove(path)
	// The requests' contexts end when ServeUnix returns: Shutdown neither
	// closes nor waits for hijacked connections (exec, attach and
	// port-forward streams), which end with their request's context.
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var handlers sync.WaitGroup // every handler running, hijacked ones included
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handlers.Add(1)
			defer handlers.Done()
			h.ServeHTTP(w, r)
		}),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout,
		MaxHeaderBytes: 1 << 20,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if ready != nil {
		close(ready)
	}
	select {
	case err := <-served:
		stop()
		waitHandlers(&handlers, log)
		return fmt.Errorf("localpods: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-served
	stop()
	waitHandlers(&handlers, log)
	return nil
}

// handlersGrace bounds how long ServeUnix waits, once the handlers' contexts
// ended, for the handlers to return.
const handlersGrace = 5 * time.Second

// waitHandlers waits for handlers, at most handlersGrace: a handler that
// does not heed its context's end does not hold the agent's shutdown.
func waitHandlers(handlers *sync.WaitGroup, log *slog.Logger) {
	done := make(chan struct{})
	go func() {
		handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(handlersGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("Socket handlers still running after shutdown", "grace", handlersGrace)
	}
}

// privateDir returns an error unless dir is a directory that belongs to this
// process's user and that no other user may write to.
func privateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s: not a directory", dir)
	case !ok:
		return fmt.Errorf("%s: no owner information", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s: owned by uid %d, not by this process's user (uid %d): another user could replace the socket", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s: mode %#o: writable by other users, who could replace the socket", dir, fi.Mode().Perm())
	}
	return nil
}
