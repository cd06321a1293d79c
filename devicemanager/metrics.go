package devicemanager

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics uses the kubelet's metric names so existing dashboards work.
type metrics struct {
	registrations *prometheus.CounterVec
	allocDuration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_device_plugin_registration_total",
			Help: "Registration requests received from device plugins, by resource name.",
		}, []string{"resource_name"}),
		allocDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_device_plugin_alloc_duration_seconds",
			Help:    "Time in seconds that a device plugin took to answer an Allocate request, by resource name.",
			Buckets: prometheus.DefBuckets,
		}, []string{"resource_name"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.registrations, m.allocDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register device manager metrics: %w", err)
		}
	}
	return m, nil
}
