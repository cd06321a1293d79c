package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

// Runtime is the part of CRI the server uses. Its method set is a subset of
// cri-api's RuntimeService, so the cri-api fake satisfies it; the streaming
// calls return the URL of the runtime's streaming server, which the server
// proxies the client's upgraded connection to.
type Runtime interface {
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// podUIDLabel is the label that carries the pod UID on CRI sandboxes.
const podUIDLabel = "io.kubernetes.pod.uid"

// findPod returns the pod namespace/name of Deps.Pods, nil if there is none.
func (s *Debugging) findPod(namespace, name string) *v1.Pod {
	for _, p := range s.pods() {
		if p != nil && p.Namespace == namespace && p.Name == name {
			return p
		}
	}
	return nil
}

// containerSpec returns the pod's container (init, regular or ephemeral)
// named name, nil if there is none.
func containerSpec(pod *v1.Pod, name string) *v1.Container {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if c := &pod.Spec.EphemeralContainers[i]; c.Name == name {
			return (*v1.Container)(&c.EphemeralContainerCommon)
		}
	}
	return nil
}

// containerStatus returns the status of the pod's container named name.
func containerStatus(pod *v1.Pod, name string) (v1.ContainerStatus, bool) {
	for _, ss := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range ss {
			if st.Name == name {
				return st, true
			}
		}
	}
	return v1.ContainerStatus{}, false
}

// runtimeID is the runtime's ID in a status' "TYPE://ID" container ID.
func runtimeID(containerID string) string {
	if _, id, ok := strings.Cut(containerID, "://"); ok {
		return id
	}
	return containerID
}

// runningContainer returns the runtime ID of the running container name of
// pod, "" if it is not running.
func runningContainer(pod *v1.Pod, name string) string {
	st, ok := containerStatus(pod, name)
	if !ok || st.State.Running == nil || st.ContainerID == "" {
		return ""
	}
	return runtimeID(st.ContainerID)
}

// streamOptions are the stream query parameters of exec and attach, named as
// the API server sends them to a kubelet: input, output, error and tty.
type streamOptions struct {
	stdin, stdout, stderr, tty bool
}

// queryBool reports whether the query parameter is set to "1" or "true".
func queryBool(q url.Values, name string) bool {
	v := q.Get(name)
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// parseStreamOptions reads the stream options of r; with tty, stderr is
// merged into stdout. At least one stream is needed.
func parseStreamOptions(q url.Values) (streamOptions, error) {
	o := streamOptions{stdin: queryBool(q, v1.ExecStdinParam), stdout: queryBool(q, v1.ExecStdoutParam),
		stderr: queryBool(q, v1.ExecStderrParam), tty: queryBool(q, v1.ExecTTYParam)}
	if o.tty && o.stderr {
		o.stderr = false
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, fmt.Errorf("you must specify at least 1 of stdin, stdout, stderr")
	}
	return o, nil
}

// exec runs the command query parameters in the container through CRI Exec
// and proxies the client's connection to the runtime's stream.
func (s *Debugging) exec(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := r.PathValue("container")
	pod := s.findPod(r.PathValue("namespace"), r.PathValue("pod"))
	if pod == nil {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	id := runningContainer(pod, name)
	if uid := r.PathValue("uid"); id == "" || (uid != "" && types.UID(uid) != pod.UID) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container not found (%q)", name))
		return
	}
	cmd := r.URL.Query()["command"]
	resp, err := s.rt.Exec(r.Context(), &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: cmd, Tty: opts.tty, Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr,
	})
	if err != nil {
		s.streamError(w, "exec", pod, name, err)
		return
	}
	s.proxyStream(w, r, resp.GetUrl(), opts)
}

// attach attaches to the container's main process through CRI Attach; tty is
// the container spec's.
func (s *Debugging) attach(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := r.PathValue("container")
	pod := s.findPod(r.PathValue("namespace"), r.PathValue("pod"))
	if pod == nil {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	full := pod.Name + "_" + pod.Namespace
	spec := containerSpec(pod, name)
	id := runningContainer(pod, name)
	if uid := r.PathValue("uid"); spec == nil || id == "" || (uid != "" && types.UID(uid) != pod.UID) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %s not found in pod %s", name, full))
		return
	}
	opts.tty = spec.TTY
	if opts.tty {
		opts.stderr = false
	}
	resp, err := s.rt.Attach(r.Context(), &runtimeapi.AttachRequest{
		ContainerId: id, Tty: opts.tty, Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr,
	})
	if err != nil {
		s.streamError(w, "attach", pod, name, err)
		return
	}
	s.proxyStream(w, r, resp.GetUrl(), opts)
}

// portForward forwards the pod's ports through CRI PortForward on its ready
// sandbox. The ports come in the client's streams (SPDY) or, for WebSocket
// clients, are tunnelled to the runtime's SPDY server.
func (s *Debugging) portForward(w http.ResponseWriter, r *http.Request) {
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	var ports []int32
	if !tunnel {
		for _, p := range r.URL.Query()["port"] {
			for _, one := range strings.Split(p, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(one), 10, 16)
				if err != nil || n == 0 {
					writeError(w, http.StatusBadRequest, fmt.Sprintf("unable to parse %q as a port: want 1 to 65535", one))
					return
				}
				ports = append(ports, int32(n))
			}
		}
	}
	pod := s.findPod(r.PathValue("namespace"), r.PathValue("pod"))
	if pod == nil {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if uid := r.PathValue("uid"); uid != "" && types.UID(uid) != pod.UID {
		writeError(w, http.StatusNotFound, "pod not found")
		return
	}
	full := pod.Name + "_" + pod.Namespace
	sbs, err := s.rt.ListPodSandbox(r.Context(), &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{podUIDLabel: string(pod.UID)},
	})
	if err != nil {
		s.streamError(w, "port-forward", pod, "", err)
		return
	}
	if len(sbs) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod not found (%q)", full))
		return
	}
	newest := sbs[0]
	for _, sb := range sbs[1:] {
		if sb.GetCreatedAt() > newest.GetCreatedAt() {
			newest = sb
		}
	}
	resp, err := s.rt.PortForward(r.Context(), &runtimeapi.PortForwardRequest{PodSandboxId: newest.GetId(), Port: ports})
	if err != nil {
		s.streamError(w, "port-forward", pod, "", err)
		return
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		s.streamError(w, "port-forward", pod, "", fmt.Errorf("runtime streaming URL %q: %w", resp.GetUrl(), err))
		return
	}
	if tunnel {
		s.tunnelPortForward(w, r, u)
		return
	}
	s.proxyUpgrade(w, r, u)
}

// proxyStream proxies the upgraded connection of r to the runtime's
// streaming URL; a WebSocket client speaking the v5 channel protocol is
// translated to the runtime's SPDY.
func (s *Debugging) proxyStream(w http.ResponseWriter, r *http.Request, rawURL string, opts streamOptions) {
	u, err := url.Parse(rawURL)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("runtime streaming URL %q: %v", rawURL, err))
		return
	}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		s.translateStream(w, r, u, opts)
		return
	}
	s.proxyUpgrade(w, r, u)
}

// proxyUpgrade proxies r, an upgrade to SPDY or WebSocket, to target, the
// runtime's streaming URL, and then the upgraded connection both ways until
// either side ends it. As with the kubelet's proxy, a request that asks for
// no upgrade is refused, and so is a runtime's answer that neither switches
// protocols nor is an error.
func (s *Debugging) proxyUpgrade(w http.ResponseWriter, r *http.Request, target *url.URL) {
	if !httpstream.IsUpgradeRequest(r) {
		s.proxyError(w, r, errors.New("Upgrade request required"))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := *target
			pr.Out.URL, pr.Out.Host = &u, ""
		},
		Transport: s.streamTransport,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode < 400 {
				return fmt.Errorf("invalid upgrade response: status code %d", resp.StatusCode)
			}
			return nil
		},
		ErrorHandler: s.proxyError,
		ErrorLog:     slog.NewLogLogger(s.log.Handler(), slog.LevelError),
	}
	rp.ServeHTTP(w, r)
}

// newStreamTransport is the transport to the runtime's streaming server: a
// direct connection (no proxy from the environment) and none kept idle, as
// each upgraded one is handed over to its session.
func newStreamTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
	}
}

// streamError answers a failed CRI streaming call with its error and the
// kubelet's status for it (streamStatus).
func (s *Debugging) streamError(w http.ResponseWriter, op string, pod *v1.Pod, container string, err error) {
	s.log.Error("Streaming request failed", "op", op, "pod", pod.Namespace+"/"+pod.Name, "containerName", container, "err", err)
	writeError(w, streamStatus(err), err.Error())
}

// streamStatus is the HTTP status of a failed CRI streaming call: 404 when
// the runtime has no such container or sandbox, 429 when it has too many
// streams in flight, else 500.
func streamStatus(err error) int {
	switch {
	case errors.Is(err, cri.ErrNotFound), status.Code(err) == codes.NotFound:
		return http.StatusNotFound
	case status.Code(err) == codes.ResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// proxyError answers a request that could not be proxied to the runtime.
func (s *Debugging) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("Error while proxying request", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, err.Error())
}
