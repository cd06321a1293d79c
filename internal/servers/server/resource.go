package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's resource metrics (/metrics/resource), the endpoint
// metrics-server scrapes: CPU, memory and swap of the node, its pods and
// their containers, taken from one Summary per scrape, each sample stamped
// with the time of the stats it came from.
var (
	descNodeCPU       = prometheus.NewDesc("node_cpu_usage_seconds_total", "CPU time the node has used, in core-seconds.", nil, nil)
	descNodeMemory    = prometheus.NewDesc("node_memory_working_set_bytes", "The node's memory working set, in bytes.", nil, nil)
	descNodeSwap      = prometheus.NewDesc("node_swap_usage_bytes", "Swap the node uses, in bytes.", nil, nil)
	podLabels         = []string{"pod", "namespace"}
	descPodCPU        = prometheus.NewDesc("pod_cpu_usage_seconds_total", "CPU time the pod has used, in core-seconds.", podLabels, nil)
	descPodMemory     = prometheus.NewDesc("pod_memory_working_set_bytes", "The pod's memory working set, in bytes.", podLabels, nil)
	descPodSwap       = prometheus.NewDesc("pod_swap_usage_bytes", "Swap the pod uses, in bytes.", podLabels, nil)
	ctrLabels         = []string{"container", "pod", "namespace"}
	descCtrCPU        = prometheus.NewDesc("container_cpu_usage_seconds_total", "CPU time the container has used, in core-seconds.", ctrLabels, nil)
	descCtrMemory     = prometheus.NewDesc("container_memory_working_set_bytes", "The container's memory working set, in bytes.", ctrLabels, nil)
	descCtrSwap       = prometheus.NewDesc("container_swap_usage_bytes", "Swap the container uses, in bytes.", ctrLabels, nil)
	descCtrStart      = prometheus.NewDesc("container_start_time_seconds", "When the container started, in seconds since the Unix epoch.", ctrLabels, nil)
	descScrapeFailed  = prometheus.NewDesc("resource_scrape_error", "1 if reading the stats for this scrape failed, else 0.", nil, nil)
	resourceMetricSet = []*prometheus.Desc{descNodeCPU, descNodeMemory, descNodeSwap, descPodCPU, descPodMemory, descPodSwap,
		descCtrCPU, descCtrMemory, descCtrSwap, descCtrStart, descScrapeFailed}
)

// resourceSeries sends the resource metrics of one Summary.
func resourceSeries(ch chan<- prometheus.Metric, sum *statsapi.Summary) {
	emitUsage(ch, descNodeCPU, descNodeMemory, descNodeSwap, sum.Node.CPU, sum.Node.Memory, sum.Node.Swap)
	for _, p := range sum.Pods {
		pod := []string{p.PodRef.Name, p.PodRef.Namespace}
		emitUsage(ch, descPodCPU, descPodMemory, descPodSwap, p.CPU, p.Memory, p.Swap, pod...)
		for _, ctr := range p.Containers {
			labels := append([]string{ctr.Name}, pod...)
			emitUsage(ch, descCtrCPU, descCtrMemory, descCtrSwap, ctr.CPU, ctr.Memory, ctr.Swap, labels...)
			if !ctr.StartTime.IsZero() {
				start := ctr.StartTime.Time
				ch <- prometheus.NewMetricWithTimestamp(start,
					prometheus.MustNewConstMetric(descCtrStart, prometheus.GaugeValue, float64(start.UnixNano())/float64(time.Second), labels...))
			}
		}
	}
}

// emitUsage sends the CPU, memory and swap samples the stats have, each
// with its stats' time.
func emitUsage(ch chan<- prometheus.Metric, cpu, mem, swap *prometheus.Desc, c *statsapi.CPUStats, m *statsapi.MemoryStats, s *statsapi.SwapStats, labels ...string) {
	if c != nil && c.UsageCoreNanoSeconds != nil {
		ch <- prometheus.NewMetricWithTimestamp(c.Time.Time,
			prometheus.MustNewConstMetric(cpu, prometheus.CounterValue, float64(*c.UsageCoreNanoSeconds)/float64(time.Second), labels...))
	}
	if m != nil && m.WorkingSetBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(m.Time.Time,
			prometheus.MustNewConstMetric(mem, prometheus.GaugeValue, float64(*m.WorkingSetBytes), labels...))
	}
	if s != nil && s.SwapUsageBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(s.Time.Time,
			prometheus.MustNewConstMetric(swap, prometheus.GaugeValue, float64(*s.SwapUsageBytes), labels...))
	}
}

// resourceMetrics serves /metrics/resource from a Summary read for the
// request.
func (s *Server) resourceMetrics(w http.ResponseWriter, r *http.Request) {
	s.serveScrape(w, r, scrapeCollector[*statsapi.Summary]{
		ctx: r.Context(), descs: resourceMetricSet, failed: descScrapeFailed,
		read: s.deps.Summary, emit: resourceSeries,
		log: s.log, failMsg: "Resource metrics: reading the stats failed",
	})
}
