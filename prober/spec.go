package prober

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ErrInvalidProbe classes probe specs the Manager refuses at AddPod.
var ErrInvalidProbe = errors.New("invalid probe")

// The API's defaults for unset (zero) probe fields.
const (
	defaultTimeoutSeconds   = 1
	defaultPeriodSeconds    = 10
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

type handlerKind int

const (
	handlerExec handlerKind = iota
	handlerHTTP
	handlerTCP
	handlerGRPC
)

// spec is a validated probe with defaults applied and ports resolved.
// Immutable once built.
type spec struct {
	initialDelay int32
	period       time.Duration
	timeout      time.Duration
	th           thresholds
	tgps         *int64

	kind    handlerKind
	command []string // exec, after $(VAR) expansion
	http    httpSpec
	host    string // tcp: explicit host, "" for the pod IP
	port    int    // tcp, grpc
	service string // grpc
}

type httpSpec struct {
	scheme string
	host   string // "" for the pod IP
	port   int
	path   string
	header http.Header
}

// compileProbe validates p, a probe of type pt on container c, applies the
// API's defaults to unset fields and resolves named ports.
func compileProbe(pt ProbeType, p *v1.Probe, c *v1.Container) (*spec, error) {
	s := &spec{
		initialDelay: p.InitialDelaySeconds,
		tgps:         p.TerminationGracePeriodSeconds,
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format, a...))
	}
	orDefault := func(field string, v, def int32) int32 {
		if v < 0 {
			bad("%s must not be negative, got %d", field, v)
		}
		if v <= 0 {
			return def
		}
		return v
	}
	if p.InitialDelaySeconds < 0 {
		bad("initialDelaySeconds must not be negative, got %d", p.InitialDelaySeconds)
	}
	s.period = time.Duration(orDefault("periodSeconds", p.PeriodSeconds, defaultPeriodSeconds)) * time.Second
	s.timeout = time.Duration(orDefault("timeoutSeconds", p.TimeoutSeconds, defaultTimeoutSeconds)) * time.Second
	s.th.Success = int(orDefault("successThreshold", p.SuccessThreshold, defaultSuccessThreshold))
	s.th.Failure = int(orDefault("failureThreshold", p.FailureThreshold, defaultFailureThreshold))
	if pt != Readiness && s.th.Success != 1 {
		bad("successThreshold must be 1 for %s probes, got %d", strings.ToLower(pt.String()), s.th.Success)
	}
	if p.TerminationGracePeriodSeconds != nil {
		if pt == Readiness {
			bad("terminationGracePeriodSeconds must not be set for readiness probes")
		} else if *p.TerminationGracePeriodSeconds < 1 {
			bad("terminationGracePeriodSeconds must be at least 1, got %d", *p.TerminationGracePeriodSeconds)
		}
	}

	var handlers []string
	if p.Exec != nil {
		handlers = append(handlers, "exec")
		s.kind = handlerExec
		if len(p.Exec.Command) == 0 {
			bad("exec.command must not be empty")
		}
		s.command = expandCommand(p.Exec.Command, c.Env)
	}
	if p.HTTPGet != nil {
		handlers = append(handlers, "httpGet")
		s.kind = handlerHTTP
		h := p.HTTPGet
		s.http.scheme = strings.ToLower(string(h.Scheme))
		if s.http.scheme == "" {
			s.http.scheme = "http"
		}
		if s.http.scheme != "http" && s.http.scheme != "https" {
			bad("httpGet.scheme must be HTTP or HTTPS, got %q", h.Scheme)
		}
		s.http.host = h.Host
		port, err := resolvePort(h.Port, c)
		if err != nil {
			bad("httpGet.port: %w", err)
		}
		s.http.port = port
		s.http.path = h.Path
		s.http.header = make(http.Header, len(h.HTTPHeaders)+2)
		for _, hd := range h.HTTPHeaders {
			s.http.header.Add(hd.Name, hd.Value)
		}
	}
	if p.TCPSocket != nil {
		handlers = append(handlers, "tcpSocket")
		s.kind = handlerTCP
		s.host = p.TCPSocket.Host
		port, err := resolvePort(p.TCPSocket.Port, c)
		if err != nil {
			bad("tcpSocket.port: %w", err)
		}
		s.port = port
	}
	if p.GRPC != nil {
		handlers = append(handlers, "grpc")
		s.kind = handlerGRPC
		if p.GRPC.Port < 1 || p.GRPC.Port > 65535 {
			bad("grpc.port must be between 1 and 65535, got %d", p.GRPC.Port)
		}
		s.port = int(p.GRPC.Port)
		if p.GRPC.Service != nil {
			s.service = *p.GRPC.Service
		}
	}
	switch len(handlers) {
	case 0:
		bad("no handler: one of exec, httpGet, tcpSocket or grpc must be set")
	case 1:
	default:
		bad("%d handlers (%s): exactly one must be set", len(handlers), strings.Join(handlers, ", "))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidProbe, errors.Join(errs...))
	}
	return s, nil
}

// resolvePort turns a port number or a container port name into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := int(p.IntVal)
	if p.Type == intstr.String {
		port = -1
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port = int(cp.ContainerPort)
				break
			}
		}
		if port == -1 {
			// As the kubelet: a name no port declares may be a number written as a
			// string.
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				return 0, fmt.Errorf("container %q declares no port named %q", c.Name, p.StrVal)
			}
			port = n
		}
	}
	if port < 1 || port > 65535 {
		return 0, fmt.Errorf("port must be between 1 and 65535, got %d", port)
	}
	return port, nil
}

// expandCommand replaces $(VAR) in the command with the values of the
// container's literal env vars, as the kubelet does for exec probes: $$
// escapes a $, and references to unknown variables stay as written.
func expandCommand(cmd []string, env []v1.EnvVar) []string {
	vars := make(map[string]string, len(env))
	for _, e := range env {
		if e.ValueFrom == nil {
			vars[e.Name] = expandString(e.Value, vars)
		}
	}
	out := make([]string, len(cmd))
	for i, arg := range cmd {
		out[i] = expandString(arg, vars)
	}
	return out
}

func expandString(s string, vars map[string]string) string {
	return nodeapi.ExpandVars(s, func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	})
}

// newHTTPRequest builds the GET request of an HTTP probe against podIP (used
// when the probe names no host). The request is shared by every run of the
// probe until the pod IP changes, so it must not be modified.
func newHTTPRequest(h *httpSpec, podIP, userAgent string) (*http.Request, error) {
	host := h.host
	if host == "" {
		host = podIP
	}
	if host == "" {
		return nil, errors.New("pod has no IP yet")
	}
	u, err := url.Parse(h.path)
	if err != nil {
		u = &url.URL{Path: h.path} // pass an odd path through as the kubelet does
	}
	u.Scheme = h.scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(h.port))
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build probe request: %w", err)
	}
	req.Header = h.header.Clone()
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", userAgent)
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	}
	if hh := req.Header.Get("Host"); hh != "" {
		req.Host = hh
	}
	return req, nil
}
