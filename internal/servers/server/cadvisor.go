package server

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
)

// The kubelet's /metrics/cadvisor: cadvisor's container series, under its
// names, types and labels, for every running container and each pod's
// sandbox (container "POD"), from one read of their cgroups per scrape.
// Every series carries the kubelet's labels: container, id (the cgroup
// path), image, name (the runtime's container ID), namespace and pod. The
// figures read at scrape time are stamped with that time; the limits
// (container_spec_*) and the start time are not, as cadvisor's are not.

// cadvisorLabels are the labels every series has, in the order the
// samples' values are given.
var cadvisorLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

// cadvisorDesc describes a series with the common labels and extra ones.
func cadvisorDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(slices.Clone(cadvisorLabels), extra...), nil)
}

var (
	cadLastSeen       = cadvisorDesc("container_last_seen", "When the container was last read, in seconds since the Unix epoch.")
	cadStartTime      = cadvisorDesc("container_start_time_seconds", "When the runtime created the container, in seconds since the Unix epoch.")
	cadCPUUsage       = cadvisorDesc("container_cpu_usage_seconds_total", "CPU time the container has used, in seconds (cpu=\"total\": all cpus).", "cpu")
	cadCPUUser        = cadvisorDesc("container_cpu_user_seconds_total", "CPU time the container has used in user mode, in seconds.")
	cadCPUSystem      = cadvisorDesc("container_cpu_system_seconds_total", "CPU time the container has used in kernel mode, in seconds.")
	cadCFSPeriods     = cadvisorDesc("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.")
	cadCFSThrottled   = cadvisorDesc("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.")
	cadCFSThrottledS  = cadvisorDesc("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.")
	cadCFSBursts      = cadvisorDesc("container_cpu_cfs_burst_periods_total", "Number of periods when burst occurs.")
	cadCFSBurstS      = cadvisorDesc("container_cpu_cfs_burst_seconds_total", "Total time duration the container has been bursted.")
	cadPSICPUFull     = cadvisorDesc("container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.")
	cadPSICPUSome     = cadvisorDesc("container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.")
	cadPSIMemFull     = cadvisorDesc("container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.")
	cadPSIMemSome     = cadvisorDesc("container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.")
	cadPSIIOFull      = cadvisorDesc("container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.")
	cadPSIIOSome      = cadvisorDesc("container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.")
	cadMemUsage       = cadvisorDesc("container_memory_usage_bytes", "Memory the container's cgroup is charged for, page cache included, in bytes.")
	cadMemMaxUsage    = cadvisorDesc("container_memory_max_usage_bytes", "The highest memory usage recorded for the container, in bytes.")
	cadMemWorkingSet  = cadvisorDesc("container_memory_working_set_bytes", "The container's memory working set (usage less inactive file pages), in bytes.")
	cadMemRSS         = cadvisorDesc("container_memory_rss", "The container's anonymous memory (RSS), in bytes.")
	cadMemCache       = cadvisorDesc("container_memory_cache", "The container's page cache, in bytes.")
	cadMemMapped      = cadvisorDesc("container_memory_mapped_file", "The container's memory-mapped files, in bytes.")
	cadMemSwap        = cadvisorDesc("container_memory_swap", "Swap the container uses, in bytes.")
	cadMemFailcnt     = cadvisorDesc("container_memory_failcnt", "How many times the container's memory usage hit its limit.")
	cadMemFailures    = cadvisorDesc("container_memory_failures_total", "Page faults of the container (scope container) or of it and its descendants (scope hierarchy).", "failure_type", "scope")
	cadOOMEvents      = cadvisorDesc("container_oom_events_total", "Processes of the container the OOM killer killed.")
	cadSpecCPUPeriod  = cadvisorDesc("container_spec_cpu_period", "The container's CFS period, in microseconds.")
	cadSpecCPUQuota   = cadvisorDesc("container_spec_cpu_quota", "The container's CFS quota per period, in microseconds (absent when it has none).")
	cadSpecCPUShares  = cadvisorDesc("container_spec_cpu_shares", "The container's cpu shares.")
	cadSpecMemLimit   = cadvisorDesc("container_spec_memory_limit_bytes", "The container's memory limit, in bytes; 0 when it has none.")
	cadSpecMemResv    = cadvisorDesc("container_spec_memory_reservation_limit_bytes", "The container's memory reservation (soft limit), in bytes; 0 when it has none.")
	cadSpecSwapLimit  = cadvisorDesc("container_spec_memory_swap_limit_bytes", "The container's memory and swap limit, in bytes; 0 when it has none.")
	cadProcesses      = cadvisorDesc("container_processes", "Processes in the container.")
	cadThreads        = cadvisorDesc("container_threads", "Threads in the container.")
	cadThreadsMax     = cadvisorDesc("container_threads_max", "The most threads the container may have; 0 when unlimited.")
	cadFDs            = cadvisorDesc("container_file_descriptors", "File descriptors the container's processes have open.")
	cadSockets        = cadvisorDesc("container_sockets", "Sockets the container's processes have open.")
	cadUlimits        = cadvisorDesc("container_ulimits_soft", "Soft resource limits of the container's first process; -1 when unlimited.", "ulimit")
	cadBlkio          = cadvisorDesc("container_blkio_device_usage_total", "Bytes of block I/O the container did, by device and operation.", "device", "major", "minor", "operation")
	cadFsReadBytes    = cadvisorDesc("container_fs_reads_bytes_total", "Bytes the container read from block devices.", "device")
	cadFsWriteBytes   = cadvisorDesc("container_fs_writes_bytes_total", "Bytes the container wrote to block devices.", "device")
	cadFsReads        = cadvisorDesc("container_fs_reads_total", "Reads the container issued to block devices.", "device")
	cadFsWrites       = cadvisorDesc("container_fs_writes_total", "Writes the container issued to block devices.", "device")
	cadFsUsage        = cadvisorDesc("container_fs_usage_bytes", "Bytes the container's writable layer uses on its filesystem.", "device")
	cadFsLimit        = cadvisorDesc("container_fs_limit_bytes", "Bytes the filesystem can hold.", "device")
	cadFsInodes       = cadvisorDesc("container_fs_inodes_total", "Inodes of the filesystem.", "device")
	cadFsInodesFree   = cadvisorDesc("container_fs_inodes_free", "Free inodes of the filesystem.", "device")
	cadFsReadsMerged  = cadvisorDesc("container_fs_reads_merged_total", "Reads of the device merged with adjacent ones.", "device")
	cadFsSectorReads  = cadvisorDesc("container_fs_sector_reads_total", "Sectors read from the device.", "device")
	cadFsReadSeconds  = cadvisorDesc("container_fs_read_seconds_total", "Time spent reading from the device, in seconds.", "device")
	cadFsWritesMerged = cadvisorDesc("container_fs_writes_merged_total", "Writes to the device merged with adjacent ones.", "device")
	cadFsSectorWrites = cadvisorDesc("container_fs_sector_writes_total", "Sectors written to the device.", "device")
	cadFsWriteSeconds = cadvisorDesc("container_fs_write_seconds_total", "Time spent writing to the device, in seconds.", "device")
	cadFsIOCurrent    = cadvisorDesc("container_fs_io_current", "I/O operations in flight on the device now.", "device")
	cadFsIOTime       = cadvisorDesc("container_fs_io_time_seconds_total", "Time the device was busy, in seconds.", "device")
	cadFsIOWeighted   = cadvisorDesc("container_fs_io_time_weighted_seconds_total", "Time the device was busy weighted by the operations in flight, in seconds.", "device")
	cadNetRxBytes     = cadvisorDesc("container_network_receive_bytes_total", "Bytes received on the interface.", "interface")
	cadNetRxPackets   = cadvisorDesc("container_network_receive_packets_total", "Packets received on the interface.", "interface")
	cadNetRxErrors    = cadvisorDesc("container_network_receive_errors_total", "Errors receiving on the interface.", "interface")
	cadNetRxDropped   = cadvisorDesc("container_network_receive_packets_dropped_total", "Packets dropped receiving on the interface.", "interface")
	cadNetTxBytes     = cadvisorDesc("container_network_transmit_bytes_total", "Bytes transmitted on the interface.", "interface")
	cadNetTxPackets   = cadvisorDesc("container_network_transmit_packets_total", "Packets transmitted on the interface.", "interface")
	cadNetTxErrors    = cadvisorDesc("container_network_transmit_errors_total", "Errors transmitting on the interface.", "interface")
	cadNetTxDropped   = cadvisorDesc("container_network_transmit_packets_dropped_total", "Packets dropped transmitting on the interface.", "interface")
	cadScrapeError    = prometheus.NewDesc("container_scrape_error", "1 if reading the containers for this scrape failed, else 0.", nil, nil)
	cadvisorMetricSet = []*prometheus.Desc{cadLastSeen, cadStartTime, cadCPUUsage, cadCPUUser, cadCPUSystem,
		cadCFSPeriods, cadCFSThrottled, cadCFSThrottledS, cadCFSBursts, cadCFSBurstS,
		cadPSICPUFull, cadPSICPUSome, cadPSIMemFull, cadPSIMemSome, cadPSIIOFull, cadPSIIOSome,
		cadMemUsage, cadMemMaxUsage, cadMemWorkingSet, cadMemRSS, cadMemCache, cadMemMapped, cadMemSwap, cadMemFailcnt, cadMemFailures, cadOOMEvents,
		cadSpecCPUPeriod, cadSpecCPUQuota, cadSpecCPUShares, cadSpecMemLimit, cadSpecMemResv, cadSpecSwapLimit,
		cadProcesses, cadThreads, cadThreadsMax, cadFDs, cadSockets, cadUlimits,
		cadBlkio, cadFsReadBytes, cadFsWriteBytes, cadFsReads, cadFsWrites, cadFsUsage,
		cadFsLimit, cadFsInodes, cadFsInodesFree, cadFsReadsMerged, cadFsSectorReads, cadFsReadSeconds,
		cadFsWritesMerged, cadFsSectorWrites, cadFsWriteSeconds, cadFsIOCurrent, cadFsIOTime, cadFsIOWeighted,
		cadNetRxBytes, cadNetRxPackets, cadNetRxErrors, cadNetRxDropped, cadNetTxBytes, cadNetTxPackets, cadNetTxErrors, cadNetTxDropped,
		cadScrapeError}
)

// rootFsSeries sends the root container's ("/", every other label empty)
// series of the node's filesystems, one per device, stamped with the time
// they were read.
func rootFsSeries(ch chan<- prometheus.Metric, fss []stats.NodeFilesystem) {
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	for _, fs := range fss {
		send := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.NewMetricWithTimestamp(fs.Time, prometheus.MustNewConstMetric(d, t, v, "", "/", "", "", "", "", fs.Device))
		}
		io := fs.IO
		send(cadFsLimit, gauge, float64(fs.Capacity))
		send(cadFsUsage, gauge, float64(fs.Usage))
		send(cadFsInodes, gauge, float64(fs.Inodes))
		send(cadFsInodesFree, gauge, float64(fs.InodesFree))
		send(cadFsReads, counter, float64(io.ReadsCompleted))
		send(cadFsReadsMerged, counter, float64(io.ReadsMerged))
		send(cadFsSectorReads, counter, float64(io.SectorsRead))
		send(cadFsReadSeconds, counter, io.ReadTime.Seconds())
		send(cadFsWrites, counter, float64(io.WritesCompleted))
		send(cadFsWritesMerged, counter, float64(io.WritesMerged))
		send(cadFsSectorWrites, counter, float64(io.SectorsWrite))
		send(cadFsWriteSeconds, counter, io.WriteTime.Seconds())
		send(cadFsIOCurrent, gauge, float64(io.InProgress))
		send(cadFsIOTime, counter, io.IOTime.Seconds())
		send(cadFsIOWeighted, counter, io.WeightedIOTime.Seconds())
	}
}

// containerSeries sends the series of one container.
func containerSeries(ch chan<- prometheus.Metric, s *stats.ContainerSample) {
	base := []string{s.Container, s.Cgroup, s.Image, s.ID, s.Namespace, s.Pod}
	labels := func(extra []string) []string { return append(slices.Clip(base), extra...) }
	// read sends a figure read at s.Time, stamped with it; spec one that
	// is not.
	read := func(d *prometheus.Desc, t prometheus.ValueType, v float64, extra ...string) {
		ch <- prometheus.NewMetricWithTimestamp(s.Time, prometheus.MustNewConstMetric(d, t, v, labels(extra)...))
	}
	spec := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels(nil)...)
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	seconds := func(ns uint64) float64 { return float64(ns) / float64(time.Second) }

	spec(cadStartTime, float64(s.StartTime.Unix()))
	spec(cadSpecCPUPeriod, float64(s.Spec.CPUPeriod))
	if s.Spec.CPUQuota != 0 {
		spec(cadSpecCPUQuota, float64(s.Spec.CPUQuota))
	}
	spec(cadSpecCPUShares, float64(s.Spec.CPUShares))
	spec(cadSpecMemLimit, float64(s.Spec.MemoryLimit))
	spec(cadSpecMemResv, float64(s.Spec.MemoryReservation))
	spec(cadSpecSwapLimit, float64(s.Spec.MemorySwapLimit))

	read(cadLastSeen, gauge, float64(s.Time.Unix()))
	read(cadCPUUsage, counter, seconds(s.CPU.Usage), "total")
	read(cadCPUUser, counter, seconds(s.CPU.User))
	read(cadCPUSystem, counter, seconds(s.CPU.System))
	// The CFS counters, for a container with a cpu quota, as cadvisor.
	if s.Spec.CPUQuota != 0 {
		read(cadCFSPeriods, counter, float64(s.CPU.Periods))
		read(cadCFSThrottled, counter, float64(s.CPU.ThrottledPeriods))
		read(cadCFSThrottledS, counter, seconds(s.CPU.ThrottledTime))
		read(cadCFSBursts, counter, float64(s.CPU.BurstPeriods))
		read(cadCFSBurstS, counter, seconds(s.CPU.BurstTime))
	}
	// PSI, where the cgroup has it (v2): "full" is stalled, "some" waiting;
	// the kernel's totals are microseconds.
	for _, p := range []struct {
		psi        *statsapi.PSIStats
		full, some *prometheus.Desc
	}{{s.PSI.CPU, cadPSICPUFull, cadPSICPUSome}, {s.PSI.Memory, cadPSIMemFull, cadPSIMemSome}, {s.PSI.IO, cadPSIIOFull, cadPSIIOSome}} {
		if p.psi == nil {
			continue
		}
		read(p.full, counter, float64(p.psi.Full.Total)/1e6)
		read(p.some, counter, float64(p.psi.Some.Total)/1e6)
	}

	m := s.Memory
	read(cadMemUsage, gauge, float64(m.Usage))
	read(cadMemMaxUsage, gauge, float64(m.MaxUsage))
	read(cadMemWorkingSet, gauge, float64(m.WorkingSet))
	read(cadMemRSS, gauge, float64(m.RSS))
	read(cadMemCache, gauge, float64(m.Cache))
	read(cadMemMapped, gauge, float64(m.MappedFile))
	read(cadMemSwap, gauge, float64(m.Swap))
	read(cadMemFailcnt, counter, float64(m.Failcnt))
	read(cadMemFailures, counter, float64(m.PgFault), "pgfault", "container")
	read(cadMemFailures, counter, float64(m.PgMajFault), "pgmajfault", "container")
	read(cadMemFailures, counter, float64(m.HierPgFault), "pgfault", "hierarchy")
	read(cadMemFailures, counter, float64(m.HierPgMajFault), "pgmajfault", "hierarchy")
	read(cadOOMEvents, counter, float64(m.OOMKills))

	p := s.Procs
	read(cadProcesses, gauge, float64(p.Processes))
	read(cadThreads, gauge, float64(p.Threads))
	read(cadThreadsMax, gauge, float64(p.ThreadsMax))
	read(cadFDs, gauge, float64(p.FDs))
	read(cadSockets, gauge, float64(p.Sockets))
	for _, u := range p.Ulimits {
		read(cadUlimits, gauge, float64(u.Soft), u.Name)
	}

	// Devices the partition table does not name share the label "":
	// the per-device fs series add them up, so each label set is sent once.
	fs := map[*prometheus.Desc]*byDevice{cadFsReadBytes: {}, cadFsWriteBytes: {}, cadFsReads: {}, cadFsWrites: {}}
	for _, d := range s.Blkio {
		maj, mnr := strconv.FormatUint(d.Major, 10), strconv.FormatUint(d.Minor, 10)
		for _, op := range slices.Sorted(maps.Keys(d.Bytes)) {
			read(cadBlkio, counter, float64(d.Bytes[op]), d.Device, maj, mnr, op)
		}
		fs[cadFsReadBytes].add(d.Device, d.Bytes, "Read")
		fs[cadFsWriteBytes].add(d.Device, d.Bytes, "Write")
		fs[cadFsReads].add(d.Device, d.Serviced, "Read")
		fs[cadFsWrites].add(d.Device, d.Serviced, "Write")
	}
	for _, d := range []*prometheus.Desc{cadFsReadBytes, cadFsWriteBytes, cadFsReads, cadFsWrites} {
		for i, dev := range fs[d].devices {
			read(d, counter, float64(fs[d].sums[i]), dev)
		}
	}
	if s.Fs != nil {
		read(cadFsUsage, gauge, float64(s.Fs.UsageBytes), s.Fs.Device)
	}

	for _, n := range s.Network {
		read(cadNetRxBytes, counter, float64(n.RxBytes), n.Name)
		read(cadNetRxPackets, counter, float64(n.RxPackets), n.Name)
		read(cadNetRxErrors, counter, float64(n.RxErrors), n.Name)
		read(cadNetRxDropped, counter, float64(n.RxDropped), n.Name)
		read(cadNetTxBytes, counter, float64(n.TxBytes), n.Name)
		read(cadNetTxPackets, counter, float64(n.TxPackets), n.Name)
		read(cadNetTxErrors, counter, float64(n.TxErrors), n.Name)
		read(cadNetTxDropped, counter, float64(n.TxDropped), n.Name)
	}
}

// byDevice sums one operation's counts per device label, in the order the
// labels first appear.
type byDevice struct {
	devices []string
	sums    []uint64
}

// add adds counts[op], when counts has it, to device's sum.
func (b *byDevice) add(device string, counts map[string]uint64, op string) {
	v, ok := counts[op]
	if !ok {
		return
	}
	if i := slices.Index(b.devices, device); i >= 0 {
		b.sums[i] += v
		return
	}
	b.devices, b.sums = append(b.devices, device), append(b.sums, v)
}

// cadvisorMetrics serves /metrics/cadvisor from one read of the containers
// (and of the node's filesystems, for the root container) for the request.
func (s *Server) cadvisorMetrics(w http.ResponseWriter, r *http.Request) {
	s.serveScrape(w, r, scrapeCollector[[]stats.ContainerSample]{
		ctx: r.Context(), descs: cadvisorMetricSet, failed: cadScrapeError,
		read: s.deps.Containers,
		emit: func(ch chan<- prometheus.Metric, samples []stats.ContainerSample) {
			for i := range samples {
				containerSeries(ch, &samples[i])
			}
			if s.deps.NodeFilesystems == nil {
				return
			}
			fss, err := s.deps.NodeFilesystems()
			if err != nil {
				s.log.Warn("Container metrics: reading the node's filesystems failed; the root container's fs series are left out", "err", err)
				return
			}
			rootFsSeries(ch, fss)
		},
		log: s.log, failMsg: "Container metrics: reading the containers failed",
	})
}
