package devicemanager

import (
	"github.com/prometheus/client_golang/prometheus"

	promreg "github.com/nodekeeper/nodekeeper/internal/base/metrics"
)

// metrics uses the kubelet's metric names so existing dashboards work.
type metrics struct {
	registrations *prometheus.CounterVec
	allocDuration *prometheus.HistogramVec
	// recoveries and recovered are nodekeeper's own: rebuilding the
	// assignments from the runtime after the checkpoint was unreadable.
	recoveries *prometheus.CounterVec
	recovered  *prometheus.CounterVec
}

// newMetrics registers the metrics on reg (nil: none); a second Manager on
// the same registry shares them.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	r := promreg.NewRegistrar(reg, "devicemanager")
	m := &metrics{
		registrations: r.CounterVec(prometheus.CounterOpts{
			Name: "kubelet_device_plugin_registration_total",
			Help: "Registration requests received from device plugins, by resource name.",
		}, "resource_name"),
		allocDuration: r.HistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_device_plugin_alloc_duration_seconds",
			Help:    "Time in seconds that a device plugin took to answer an Allocate request, by resource name.",
			Buckets: prometheus.DefBuckets,
		}, "resource_name"),
		recoveries: r.CounterVec(prometheus.CounterOpts{
			Name: "nodekeeper_device_checkpoint_recoveries_total",
			Help: "Unreadable device checkpoints whose assignments were rebuilt from the runtime's containers, by result (rebuilt, failed).",
		}, "result"),
		recovered: r.CounterVec(prometheus.CounterOpts{
			Name: "nodekeeper_device_checkpoint_recovered_assignments_total",
			Help: "Device assignments (container and resource) rebuilt from the runtime's containers after the checkpoint was unreadable.",
		}),
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
