package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/events"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubenode"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/servers/kubeletserver"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// eventComponent is the source component of the node's events, as the
// kubelet's: tools and tests select the node's events by it.
const eventComponent = "kubelet"

// newClient builds the API client from the client configuration of a
// kubeconfig (kubeclient.LoadKubeconfig), which it does not modify, with the
// configuration's rate limits, speaking protobuf as the kubelet does. A
// timeout bounds each request (0: none, as watches need); the kubelet's
// heartbeat client has one of nodeStatusUpdateFrequency.
func newClient(kubeconfig *rest.Config, c config.Cluster, version string, timeout time.Duration) (*kubeclient.Clientset, error) {
	rc := rest.CopyConfig(kubeconfig)
	rc.QPS, rc.Burst = float32(c.KubeAPIQPS), int(c.KubeAPIBurst)
	if c.KubeAPIQPS == 0 {
		rc.QPS = -1 // no client-side limit, as the kubelet's kubeAPIQPS 0
	}
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.Timeout = timeout
	rc.UserAgent = fmt.Sprintf("nodekeeper/%s (%s/%s)", version, runtime.GOOS, runtime.GOARCH)
	cs, err := kubeclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return cs, nil
}

// eventRecorder returns a recorder that sends events to sink, the API
// server or, standalone, the ring of the socket's /events (rate-limited by
// eventRecordQPS and eventBurst, aggregated as client-go does), and also
// logs them, and the events recorder whose Run writes them.
func eventRecorder(sink events.Sink, nodeName string, c config.Cluster, log nodeapi.LogRecorder) (nodeapi.Recorder, *events.Recorder) {
	scheme, err := kubeclient.NewScheme()
	if err != nil { // the scheme's types are fixed: a programmer's error
		panic(fmt.Sprintf("kubeclient scheme: %v", err))
	}
	rec := events.New(sink, events.Options{
		Source: v1.EventSource{Component: eventComponent, Host: nodeName},
		Scheme: scheme,
		QPS:    float32(c.EventRecordQPS), // 0: no limit
		Burst:  int(c.EventBurst),
		Logger: log.Logger,
	})
	return teeRecorder{rec, log}, rec
}

// eventSink writes the recorder's events to their namespaces.
type eventSink struct{ client kubeclient.Interface }

func (s eventSink) Create(ctx context.Context, e *v1.Event) (*v1.Event, error) {
	return s.client.Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
}

func (s eventSink) Patch(ctx context.Context, e *v1.Event, data []byte) (*v1.Event, error) {
	return s.client.Events(e.Namespace).Patch(ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}

// teeRecorder records each event with both recorders.
type teeRecorder [2]nodeapi.Recorder

func (t teeRecorder) Event(o apiruntime.Object, eventtype, reason, message string) {
	for _, r := range t {
		r.Event(o, eventtype, reason, message)
	}
}

func (t teeRecorder) Eventf(o apiruntime.Object, eventtype, reason, format string, args ...any) {
	for _, r := range t {
		r.Eventf(o, eventtype, reason, format, args...)
	}
}

func (t teeRecorder) AnnotatedEventf(o apiruntime.Object, ann map[string]string, eventtype, reason, format string, args ...any) {
	for _, r := range t {
		r.AnnotatedEventf(o, ann, eventtype, reason, format, args...)
	}
}

// nodeStatus is the Node controller's duty: register the Node, keep its
// status and renew its Lease (through the heartbeat client, whose requests
// time out), the runtime's name and version in its node info, and watch the
// Node (through watcher, the main client) for admission.
func nodeStatus(ctx context.Context, o Options, heartbeat, watcher kubenode.Client, rt runtimeVersioner, nodeIP string,
	status func(time.Time) (*v1.Node, error), recorder nodeapi.Recorder, log *slog.Logger) (*kubenode.Controller, error) {
	info, err := kubenode.ReadSystemInfo("")
	if err != nil {
		log.Warn("node info incomplete", "err", err) // the files it could read are in info
	}
	v, err := rt.Version(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("runtime version: %w", err)
	}
	info.ContainerRuntimeVersion = v.RuntimeName + "://" + v.RuntimeVersion
	c := o.Config.Cluster
	kn, err := kubenode.New(kubenode.Config{
		NodeName: o.NodeName, NodeIP: nodeIP, RegisterWithTaints: c.RegisterWithTaints, KubeletPort: c.Port,
		SystemInfo: info, Version: o.Version, StatusUpdateFrequency: c.NodeStatusUpdateFrequency,
		StatusReportFrequency: c.NodeStatusReportFrequency, LeaseDurationSeconds: c.NodeLeaseDurationSeconds,
	}, kubenode.Deps{Client: heartbeat, WatchClient: watcher, Status: status, Recorder: recorder, Logger: log.With("subsystem", "node-status")})
	if err != nil {
		return nil, ConfigError{err}
	}
	return kn, nil
}

// runtimeVersioner is the CRI call nodeStatus needs.
type runtimeVersioner interface {
	Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error)
}

// kubeletAPI builds the kubelet API server (port 10250 over TLS): the shared
// reads of the read-only port, and logs, exec, attach and port-forward through
// the runtime's streaming server, behind the configured authentication and
// authorization (TokenReview and SubjectAccessReview through client).
func kubeletAPI(o Options, nodeIP string, shared server.Deps, pods func() []*v1.Pod, rt kubeletserver.Runtime,
	client kubeclient.Interface, log *slog.Logger) (*kubeletserver.Server, error) {
	reads, err := server.New(server.Config{}, shared)
	if err != nil {
		return nil, err
	}
	cfg := kubeletserver.ConfigFrom(&o.Config.Kubelet, o.NodeName, o.RootDir, o.NodeName, []net.IP{net.ParseIP(nodeIP)})
	cfg.Address = o.Config.Cluster.Address
	ks, err := kubeletserver.New(cfg, kubeletserver.Deps{
		Pods: pods, Runtime: rt, Shared: reads.Handler(), Logger: log.With("subsystem", "kubelet-api"),
		TokenReviews: client.TokenReviews(), SubjectAccessReviews: client.SubjectAccessReviews(),
	})
	if err != nil {
		return nil, ConfigError{err}
	}
	return ks, nil
}
