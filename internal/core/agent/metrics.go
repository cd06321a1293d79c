package agent

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/metrics"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
)

// Worker operation labels of kubelet_pod_worker_duration_seconds, the
// kubelet's sync types.
const (
	opCreate = "create"
	opUpdate = "update"
	opSync   = "sync"
	opKill   = "kill"
)

// agentMetrics are the agent's metrics under the kubelet's names. Every
// field is safe for concurrent use.
type agentMetrics struct {
	workerDuration *prometheus.HistogramVec // operation_type
	startDuration  *prometheus.HistogramVec // no labels
	relistDuration *prometheus.HistogramVec // no labels
	runningPods    prometheus.Gauge
	runningCtrs    *prometheus.GaugeVec // container_state
}

// podStartBuckets reach from half a second to an hour, as the kubelet's do
// for pod start times.
var podStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

func newMetrics(reg prometheus.Registerer) (*agentMetrics, error) {
	r := metrics.NewRegistrar(reg, "agent")
	m := &agentMetrics{
		workerDuration: r.HistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_worker_duration_seconds",
			Help:    "Duration in seconds of one pod worker operation (create, update, sync or kill of one pod).",
			Buckets: prometheus.DefBuckets,
		}, "operation_type"),
		startDuration: r.HistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_start_duration_seconds",
			Help:    "Duration in seconds from the agent first seeing a pod to the pod running.",
			Buckets: podStartBuckets,
		}),
		relistDuration: r.HistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pleg_relist_duration_seconds",
			Help:    "Duration in seconds of one relist of the runtime's pods.",
			Buckets: prometheus.DefBuckets,
		}),
		runningPods: r.Gauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "running_pods",
			Help: "Number of pods whose sandbox is ready.",
		}),
		runningCtrs: r.GaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "running_containers",
			Help: "Number of containers by state.",
		}, "container_state"),
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// containerStates are the container_state label values, the CRI states in
// lower case without their prefix.
var containerStates = []runtimeapi.ContainerState{
	runtimeapi.ContainerState_CONTAINER_CREATED, runtimeapi.ContainerState_CONTAINER_RUNNING,
	runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_UNKNOWN,
}

func containerStateLabel(s runtimeapi.ContainerState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CONTAINER_"))
}

// setRunning sets the running pods and containers gauges from one relist.
func (m *agentMetrics) setRunning(statuses map[types.UID]*podruntime.PodStatus) {
	pods := 0
	ctrs := map[runtimeapi.ContainerState]int{}
	for _, st := range statuses {
		if sandboxReady(st) {
			pods++
		}
		for _, c := range st.Containers {
			if c != nil {
				ctrs[c.State]++
			}
		}
	}
	m.runningPods.Set(float64(pods))
	for _, s := range containerStates {
		m.runningCtrs.WithLabelValues(containerStateLabel(s)).Set(float64(ctrs[s]))
	}
}
