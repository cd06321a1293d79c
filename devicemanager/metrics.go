package devicemanager

import (
	"github.com/prometheus/client_golang/prometheus"

	promreg "github.com/nodekeeper/nodekeeper/internal/metrics"
)

// metrics uses the kubelet's metric names so existing dashboards work.
type metrics struct {
	registrations *prometheus.CounterVec
	allocDuration *prometheus.HistogramVec
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
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
