package prober

import (
	"github.com/prometheus/client_golang/prometheus"

	promreg "github.com/nodekeeper/nodekeeper/internal/base/metrics"
)

// The values of prober_probe_total's result label, as the kubelet's.
const (
	resultSuccessful = "successful"
	resultFailed     = "failed"
	resultUnknown    = "unknown"
)

// metrics are the kubelet's prober metrics.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	r := promreg.NewRegistrar(reg, "prober")
	total := r.CounterVec(prometheus.CounterOpts{
		Subsystem: "prober",
		Name:      "probe_total",
		Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
	}, "probe_type", "result", "container", "pod", "namespace", "pod_uid")
	duration := r.HistogramVec(prometheus.HistogramOpts{
		Subsystem: "prober",
		Name:      "probe_duration_seconds",
		Help:      "Duration in seconds for a probe response.",
		Buckets:   prometheus.DefBuckets,
	}, "probe_type", "container", "pod", "namespace")
	if err := r.Err(); err != nil {
		return nil, err
	}
	return &metrics{total: total, duration: duration}, nil
}

// probeMetrics are one probe's series, resolved once at AddPod so a run
// does no label lookups.
type probeMetrics struct {
	successful, failed, unknown prometheus.Counter
	duration                    prometheus.Observer
}

func (m *metrics) forProbe(k probeKey, pod, namespace string) probeMetrics {
	pt, uid := k.probeType.String(), string(k.podUID)
	return probeMetrics{
		successful: m.total.WithLabelValues(pt, resultSuccessful, k.container, pod, namespace, uid),
		failed:     m.total.WithLabelValues(pt, resultFailed, k.container, pod, namespace, uid),
		unknown:    m.total.WithLabelValues(pt, resultUnknown, k.container, pod, namespace, uid),
		duration:   m.duration.WithLabelValues(pt, k.container, pod, namespace),
	}
}

func (m *metrics) deleteProbe(k probeKey, pod, namespace string) {
	pt, uid := k.probeType.String(), string(k.podUID)
	for _, r := range []string{resultSuccessful, resultFailed, resultUnknown} {
		m.total.DeleteLabelValues(pt, r, k.container, pod, namespace, uid)
	}
	m.duration.DeleteLabelValues(pt, k.container, pod, namespace)
}
