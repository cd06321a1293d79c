// Package podresources serves the kubelet's pod-resources API v1
// (k8s.io/kubelet/pkg/apis/podresources/v1: List, Get,
// GetAllocatableResources) and v1alpha1 (List) on a Unix socket, the kubelet's
// <root-dir>/pod-resources/kubelet.sock, so that monitoring agents (GPU
// exporters, topology exporters) that read the kubelet's work unchanged.
//
// The answers come from the same state the agent acts on: the active pods and
// the device manager's assignments. nodekeeper has no CPU or memory manager,
// so cpu_ids and memory are always empty, and no dynamic resources are
// reported.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	podresourcesv1alpha1 "k8s.io/kubelet/pkg/apis/podresources/v1alpha1"

	promreg "github.com/nodekeeper/nodekeeper/internal/base/metrics"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Dir and SocketName place the socket under the root directory as the
// kubelet does (/var/lib/kubelet/pod-resources/kubelet.sock).
const (
	Dir        = "pod-resources"
	SocketName = "kubelet.sock"
)

// Devices is what the server asks of the device manager;
// devicemanager.Manager implements it.
type Devices interface {
	// ContainerDevices returns the devices assigned to the container.
	ContainerDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices
	// AllocatableDevices returns the healthy devices the plugins reported.
	AllocatableDevices() []*podresourcesapi.ContainerDevices
}

// Config holds the server's settings.
type Config struct {
	// Socket is the Unix socket's path; its directory is created (0750).
	Socket string
	// QPS and Burst limit the unary calls (List, GetAllocatableResources,
	// Get) to QPS a second with bursts of Burst, as the kubelet's
	// DefaultQPS and DefaultBurstTokens do (0: 100 and 10); a call over the
	// limit fails with ErrLimitExceeded.
	QPS   float64
	Burst int
}

// The kubelet's pod-resources rate limit.
const (
	DefaultQPS   = 100
	DefaultBurst = 10
)

// ErrLimitExceeded is a call's error over the rate limit: the kubelet's
// (codes.ResourceExhausted, "rejected by rate limit"), which clients
// compare with errors.Is.
var ErrLimitExceeded = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// limitUnary returns the interceptor that refuses a unary call when
// limiter has no token for it.
func limitUnary(limiter *rate.Limiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !limiter.Allow() {
			return nil, ErrLimitExceeded
		}
		return handler(ctx, req)
	}
}

// Deps are the server's sources.
type Deps struct {
	// ActivePods returns the pods admitted and not yet terminated: the pods
	// List reports and Get finds. Required.
	ActivePods func() []*v1.Pod
	// Devices, when set, gives the pods' devices and the allocatable ones;
	// nil reports none.
	Devices Devices
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Registerer, when set, gets the kubelet's pod-resources request metrics.
	Registerer prometheus.Registerer
}

// Server serves the pod-resources API. Create it with New, run it with Run.
type Server struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	cfg     Config
	deps    Deps
	log     *slog.Logger
	ready   chan struct{}
	runOnce sync.Once

	requests, list, get, allocatable, getErrors *prometheus.CounterVec
}

// New checks cfg and deps and registers the metrics.
func New(cfg Config, deps Deps) (*Server, error) {
	if !filepath.IsAbs(cfg.Socket) {
		return nil, fmt.Errorf("pod-resources socket %q: must be an absolute path", cfg.Socket)
	}
	if deps.ActivePods == nil {
		return nil, errors.New("pod-resources: ActivePods is required")
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := promreg.NewRegistrar(deps.Registerer, "podresources")
	counter := func(name, help string) *prometheus.CounterVec {
		return r.CounterVec(prometheus.CounterOpts{Name: name, Help: help}, "server_api_version")
	}
	s := &Server{
		cfg: cfg, deps: deps, log: log.With("subsystem", "podresources"), ready: make(chan struct{}),
		requests:    counter("kubelet_pod_resources_endpoint_requests_total", "Requests to the pod-resources endpoint, by API version."),
		list:        counter("kubelet_pod_resources_endpoint_requests_list", "List requests to the pod-resources endpoint, by API version."),
		get:         counter("kubelet_pod_resources_endpoint_requests_get", "Get requests to the pod-resources endpoint, by API version."),
		allocatable: counter("kubelet_pod_resources_endpoint_requests_get_allocatable", "GetAllocatableResources requests to the pod-resources endpoint, by API version."),
		getErrors:   counter("kubelet_pod_resources_endpoint_errors_get", "Get requests to the pod-resources endpoint that failed, by API version."),
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

// Ready is closed once the socket accepts connections.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run listens on the socket (replacing a stale one; the socket is 0600 in a
// 0750 directory) and serves until ctx ends, then removes the socket. It
// returns after the server stopped. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	ran := false
	var err error
	s.runOnce.Do(func() { ran, err = true, s.run(ctx) })
	if !ran {
		return errors.New("pod-resources: Run called twice")
	}
	return err
}

func (s *Server) run(ctx context.Context) error {
	sock := s.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		return fmt.Errorf("pod-resources: %w", err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pod-resources: remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("pod-resources: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("pod-resources: %w", err)
	}
	qps, burst := s.cfg.QPS, s.cfg.Burst
	if qps == 0 {
		qps = DefaultQPS
	}
	if burst == 0 {
		burst = DefaultBurst
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(limitUnary(rate.NewLimiter(rate.Limit(qps), burst))))
	podresourcesapi.RegisterPodResourcesListerServer(srv, s)
	podresourcesv1alpha1.RegisterPodResourcesListerServer(srv, alphaServer{s: s})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	close(s.ready)
	s.log.Info("Pod resources API listening", "socket", sock)
	var runErr error
	select {
	case <-ctx.Done():
		srv.Stop()
		<-served
	case err := <-served:
		runErr = fmt.Errorf("pod-resources: serve %s: %w", sock, err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		runErr = errors.Join(runErr, fmt.Errorf("pod-resources: remove %s: %w", sock, err))
	}
	return runErr
}

const apiVersion = "v1"

// List returns the resources of every active pod.
func (s *Server) List(_ context.Context, _ *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	s.requests.WithLabelValues(apiVersion).Inc()
	s.list.WithLabelValues(apiVersion).Inc()
	pods := s.deps.ActivePods()
	out := &podresourcesapi.ListPodResourcesResponse{PodResources: make([]*podresourcesapi.PodResources, 0, len(pods))}
	for _, p := range pods {
		out.PodResources = append(out.PodResources, s.podResources(p))
	}
	return out, nil
}

// Get returns the resources of one active pod; a pod that is not active is
// NotFound.
func (s *Server) Get(_ context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	s.requests.WithLabelValues(apiVersion).Inc()
	s.get.WithLabelValues(apiVersion).Inc()
	for _, p := range s.deps.ActivePods() {
		if p.Name == req.PodName && p.Namespace == req.PodNamespace {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: s.podResources(p)}, nil
		}
	}
	s.getErrors.WithLabelValues(apiVersion).Inc()
	return nil, status.Errorf(codes.NotFound, "pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// GetAllocatableResources returns the healthy devices the plugins reported.
func (s *Server) GetAllocatableResources(_ context.Context, _ *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	s.requests.WithLabelValues(apiVersion).Inc()
	s.allocatable.WithLabelValues(apiVersion).Inc()
	out := &podresourcesapi.AllocatableResourcesResponse{}
	if s.deps.Devices != nil {
		out.Devices = s.deps.Devices.AllocatableDevices()
	}
	return out, nil
}

// podResources describes pod: its restartable (sidecar) init containers,
// then its containers, as the kubelet lists them.
func (s *Server) podResources(p *v1.Pod) *podresourcesapi.PodResources {
	out := &podresourcesapi.PodResources{Name: p.Name, Namespace: p.Namespace}
	add := func(c *v1.Container) {
		cr := &podresourcesapi.ContainerResources{Name: c.Name}
		if s.deps.Devices != nil {
			cr.Devices = s.deps.Devices.ContainerDevices(string(p.UID), c.Name)
		}
		out.Containers = append(out.Containers, cr)
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		if nodeapi.IsSidecar(c) {
			add(c)
		}
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i])
	}
	return out
}
