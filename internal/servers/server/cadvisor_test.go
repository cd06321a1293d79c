package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
)

// /metrics/cadvisor gives each sample's figures under cadvisor's names, types
// and labels (the kubelet's: container, id, image, name, namespace, pod),
// the figures read at the sample's time stamped with it (ms), the limits and
// start time unstamped, cpu in seconds, the CFS counters of a container with
// a cpu quota, the PSI totals where the cgroup has them, the sandbox's
// interfaces, and
// container_scrape_error 0; devices without a name share the label "" and
// their fs series add up. Without samples, only container_scrape_error 1.
func TestCadvisorMetrics(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_700_000_000_123)
	ctrs := []stats.ContainerSample{
		{
			Namespace: "default", Pod: "web", Container: "POD", ID: "sb1", Image: "pause:1",
			Cgroup: "/kubepods/burstable/pod1111/sb1", Time: at, StartTime: time.Unix(1_699_998_000, 0),
			CPU:     stats.CPUSample{Usage: 20_000_000},
			Memory:  stats.MemorySample{Usage: 1048576, WorkingSet: 1048576},
			Spec:    stats.SpecSample{CPUPeriod: 100000, CPUShares: 2},
			Procs:   stats.ProcessSample{Processes: 1, Threads: 1},
			Network: []stats.InterfaceSample{{Name: "eth0", RxBytes: 9876, RxPackets: 54, RxErrors: 1, RxDropped: 2, TxBytes: 5432, TxPackets: 32, TxErrors: 3, TxDropped: 4}},
		},
		{
			Namespace: "default", Pod: "web", Container: "app", ID: "c1", Image: "app:1",
			Cgroup: "/kubepods/burstable/pod1111/c1", Time: at, StartTime: time.Unix(1_699_999_000, 500_000_000),
			CPU: stats.CPUSample{Usage: 1_500_000_000, User: 1_000_000_000, System: 250_000_000,
				Periods: 50, ThrottledPeriods: 5, ThrottledTime: 300_000_000, BurstPeriods: 1, BurstTime: 2_000_000},
			PSI: stats.Pressure{
				CPU:    &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 12.5, Total: 5_000_000}, Full: statsapi.PSIData{Total: 1_000_000}},
				Memory: &statsapi.PSIStats{Some: statsapi.PSIData{Total: 2000}, Full: statsapi.PSIData{Total: 1000}},
				IO:     &statsapi.PSIStats{Some: statsapi.PSIData{Total: 300}, Full: statsapi.PSIData{Total: 100}},
			},
			Memory: stats.MemorySample{Usage: 4096, MaxUsage: 8192, WorkingSet: 2048, RSS: 1024, Cache: 512, MappedFile: 256, Swap: 128,
				Failcnt: 3, PgFault: 10, PgMajFault: 1, HierPgFault: 20, HierPgMajFault: 2, OOMKills: 1},
			Spec:  stats.SpecSample{CPUPeriod: 100000, CPUQuota: 20000, CPUShares: 102, MemoryLimit: 64 << 20, MemorySwapLimit: 64 << 20},
			Procs: stats.ProcessSample{Processes: 2, Threads: 3, ThreadsMax: 1024, FDs: 6, Sockets: 3, Ulimits: []stats.Ulimit{{Name: "max_open_files", Soft: -1}}},
			Blkio: []stats.BlkioDevice{
				{Major: 254, Minor: 0, Device: "/dev/vda", Bytes: map[string]uint64{"Read": 4096, "Write": 8192}, Serviced: map[string]uint64{"Read": 1, "Write": 2}},
				{Major: 7, Minor: 1, Bytes: map[string]uint64{"Read": 512, "Total": 512}, Serviced: map[string]uint64{"Read": 1}},
				{Major: 7, Minor: 2, Bytes: map[string]uint64{"Read": 100}, Serviced: map[string]uint64{"Read": 1}},
			},
			Fs: &stats.FsSample{Device: "/dev/vda1", UsageBytes: 40960},
		},
	}
	healthy := start(t, Config{}, Deps{Containers: func(context.Context) ([]stats.ContainerSample, error) { return ctrs, nil }})
	broken := start(t, Config{}, Deps{Containers: func(context.Context) ([]stats.ContainerSample, error) { return nil, errors.New("runtime down") }})
	const (
		ms  = " 1700000000123\n"
		pod = `id="/kubepods/burstable/pod1111/sb1",image="pause:1",name="sb1",namespace="default",pod="web"`
		app = `id="/kubepods/burstable/pod1111/c1",image="app:1",name="c1",namespace="default",pod="web"`
		eth = `{container="POD",id="/kubepods/burstable/pod1111/sb1",image="pause:1",interface="eth0",name="sb1",namespace="default",pod="web"} `
		blk = `container_blkio_device_usage_total{container="app",device=`
	)
	want := []string{
		blk + `"",id="/kubepods/burstable/pod1111/c1",image="app:1",major="7",minor="1",name="c1",namespace="default",operation="Read",pod="web"} 512` + ms,
		blk + `"",id="/kubepods/burstable/pod1111/c1",image="app:1",major="7",minor="1",name="c1",namespace="default",operation="Total",pod="web"} 512` + ms,
		blk + `"",id="/kubepods/burstable/pod1111/c1",image="app:1",major="7",minor="2",name="c1",namespace="default",operation="Read",pod="web"} 100` + ms,
		blk + `"/dev/vda",id="/kubepods/burstable/pod1111/c1",image="app:1",major="254",minor="0",name="c1",namespace="default",operation="Read",pod="web"} 4096` + ms,
		blk + `"/dev/vda",id="/kubepods/burstable/pod1111/c1",image="app:1",major="254",minor="0",name="c1",namespace="default",operation="Write",pod="web"} 8192` + ms,
		// The CFS counters of the container with a quota alone.
		`container_cpu_cfs_burst_periods_total{container="app",` + app + `} 1` + ms,
		`container_cpu_cfs_burst_seconds_total{container="app",` + app + `} 0.002` + ms,
		`container_cpu_cfs_periods_total{container="app",` + app + `} 50` + ms,
		`container_cpu_cfs_throttled_periods_total{container="app",` + app + `} 5` + ms,
		`container_cpu_cfs_throttled_seconds_total{container="app",` + app + `} 0.3` + ms,
		`container_cpu_system_seconds_total{container="POD",` + pod + `} 0` + ms,
		`container_cpu_system_seconds_total{container="app",` + app + `} 0.25` + ms,
		`container_cpu_usage_seconds_total{container="POD",cpu="total",` + pod + `} 0.02` + ms,
		`container_cpu_usage_seconds_total{container="app",cpu="total",` + app + `} 1.5` + ms,
		`container_cpu_user_seconds_total{container="POD",` + pod + `} 0` + ms,
		`container_cpu_user_seconds_total{container="app",` + app + `} 1` + ms,
		`container_file_descriptors{container="POD",` + pod + `} 0` + ms,
		`container_file_descriptors{container="app",` + app + `} 6` + ms,
		`container_fs_reads_bytes_total{container="app",device="",` + app + `} 612` + ms, // 7:1 and 7:2
		`container_fs_reads_bytes_total{container="app",device="/dev/vda",` + app + `} 4096` + ms,
		`container_fs_reads_total{container="app",device="",` + app + `} 2` + ms,
		`container_fs_reads_total{container="app",device="/dev/vda",` + app + `} 1` + ms,
		`container_fs_usage_bytes{container="app",device="/dev/vda1",` + app + `} 40960` + ms,
		`container_fs_writes_bytes_total{container="app",device="/dev/vda",` + app + `} 8192` + ms,
		`container_fs_writes_total{container="app",device="/dev/vda",` + app + `} 2` + ms,
		`container_last_seen{container="POD",` + pod + `} 1.7e+09` + ms,
		`container_last_seen{container="app",` + app + `} 1.7e+09` + ms,
		`container_memory_cache{container="POD",` + pod + `} 0` + ms,
		`container_memory_cache{container="app",` + app + `} 512` + ms,
		`container_memory_failcnt{container="POD",` + pod + `} 0` + ms,
		`container_memory_failcnt{container="app",` + app + `} 3` + ms,
		`container_memory_failures_total{container="POD",failure_type="pgfault",` + pod + `,scope="container"} 0` + ms,
		`container_memory_failures_total{container="POD",failure_type="pgfault",` + pod + `,scope="hierarchy"} 0` + ms,
		`container_memory_failures_total{container="POD",failure_type="pgmajfault",` + pod + `,scope="container"} 0` + ms,
		`container_memory_failures_total{container="POD",failure_type="pgmajfault",` + pod + `,scope="hierarchy"} 0` + ms,
		`container_memory_failures_total{container="app",failure_type="pgfault",` + app + `,scope="container"} 10` + ms,
		`container_memory_failures_total{container="app",failure_type="pgfault",` + app + `,scope="hierarchy"} 20` + ms,
		`container_memory_failures_total{container="app",failure_type="pgmajfault",` + app + `,scope="container"} 1` + ms,
		`container_memory_failures_total{container="app",failure_type="pgmajfault",` + app + `,scope="hierarchy"} 2` + ms,
		`container_memory_mapped_file{container="POD",` + pod + `} 0` + ms,
		`container_memory_mapped_file{container="app",` + app + `} 256` + ms,
		`container_memory_max_usage_bytes{container="POD",` + pod + `} 0` + ms,
		`container_memory_max_usage_bytes{container="app",` + app + `} 8192` + ms,
		`container_memory_rss{container="POD",` + pod + `} 0` + ms,
		`container_memory_rss{container="app",` + app + `} 1024` + ms,
		`container_memory_swap{container="POD",` + pod + `} 0` + ms,
		`container_memory_swap{container="app",` + app + `} 128` + ms,
		`container_memory_usage_bytes{container="POD",` + pod + `} 1.048576e+06` + ms,
		`container_memory_usage_bytes{container="app",` + app + `} 4096` + ms,
		`container_memory_working_set_bytes{container="POD",` + pod + `} 1.048576e+06` + ms,
		`container_memory_working_set_bytes{container="app",` + app + `} 2048` + ms,
		`container_network_receive_bytes_total` + eth + `9876` + ms,
		`container_network_receive_errors_total` + eth + `1` + ms,
		`container_network_receive_packets_dropped_total` + eth + `2` + ms,
		`container_network_receive_packets_total` + eth + `54` + ms,
		`container_network_transmit_bytes_total` + eth + `5432` + ms,
		`container_network_transmit_errors_total` + eth + `3` + ms,
		`container_network_transmit_packets_dropped_total` + eth + `4` + ms,
		`container_network_transmit_packets_total` + eth + `32` + ms,
		`container_oom_events_total{container="POD",` + pod + `} 0` + ms,
		`container_oom_events_total{container="app",` + app + `} 1` + ms,
		// PSI totals (µs) in seconds: full is stalled, some waiting; the
		// sandbox has no PSI (cgroup v1, say): no series.
		`container_pressure_cpu_stalled_seconds_total{container="app",` + app + `} 1` + ms,
		`container_pressure_cpu_waiting_seconds_total{container="app",` + app + `} 5` + ms,
		`container_pressure_io_stalled_seconds_total{container="app",` + app + `} 0.0001` + ms,
		`container_pressure_io_waiting_seconds_total{container="app",` + app + `} 0.0003` + ms,
		`container_pressure_memory_stalled_seconds_total{container="app",` + app + `} 0.001` + ms,
		`container_pressure_memory_waiting_seconds_total{container="app",` + app + `} 0.002` + ms,
		`container_processes{container="POD",` + pod + `} 1` + ms,
		`container_processes{container="app",` + app + `} 2` + ms,
		"container_scrape_error 0\n",
		`container_sockets{container="POD",` + pod + `} 0` + ms,
		`container_sockets{container="app",` + app + `} 3` + ms,
		`container_spec_cpu_period{container="POD",` + pod + `} 100000` + "\n",
		`container_spec_cpu_period{container="app",` + app + `} 100000` + "\n",
		`container_spec_cpu_quota{container="app",` + app + `} 20000` + "\n", // the sandbox has none
		`container_spec_cpu_shares{container="POD",` + pod + `} 2` + "\n",
		`container_spec_cpu_shares{container="app",` + app + `} 102` + "\n",
		`container_spec_memory_limit_bytes{container="POD",` + pod + `} 0` + "\n",
		`container_spec_memory_limit_bytes{container="app",` + app + `} 6.7108864e+07` + "\n",
		`container_spec_memory_reservation_limit_bytes{container="POD",` + pod + `} 0` + "\n",
		`container_spec_memory_reservation_limit_bytes{container="app",` + app + `} 0` + "\n",
		`container_spec_memory_swap_limit_bytes{container="POD",` + pod + `} 0` + "\n",
		`container_spec_memory_swap_limit_bytes{container="app",` + app + `} 6.7108864e+07` + "\n",
		`container_start_time_seconds{container="POD",` + pod + `} 1.699998e+09` + "\n",
		`container_start_time_seconds{container="app",` + app + `} 1.699999e+09` + "\n",
		`container_threads{container="POD",` + pod + `} 1` + ms,
		`container_threads{container="app",` + app + `} 3` + ms,
		`container_threads_max{container="POD",` + pod + `} 0` + ms,
		`container_threads_max{container="app",` + app + `} 1024` + ms,
		`container_ulimits_soft{container="app",` + app + `,ulimit="max_open_files"} -1` + ms,
	}
	if diff := cmp.Diff(want, samples(t, healthy+"/metrics/cadvisor")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"container_scrape_error 1\n"}, samples(t, broken+"/metrics/cadvisor")); diff != "" {
		t.Errorf("without samples (-want +got):\n%s", diff)
	}
	// Without a source, the path is not served.
	none := start(t, Config{}, Deps{})
	resp, err := http.Get(none + "/metrics/cadvisor")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("without Containers: %d, want 404", resp.StatusCode)
	}
}

// The root container ("/", the other labels empty) has the fs series of
// each of the node's filesystems, stamped with their read time: statfs's
// figures and the device's I/O counters, times in seconds. A failed read
// leaves them out; the containers' series stay.
func TestCadvisorRootFilesystems(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_700_000_000_123)
	fss := []stats.NodeFilesystem{{Device: "/dev/vda1", Mountpoint: "/", Time: at, Capacity: 4096000, Usage: 2457600, Available: 1433600,
		Inodes: 5000, InodesFree: 4000, IO: stats.DiskIO{ReadsCompleted: 8990, ReadsMerged: 298, SectorsRead: 719000, ReadTime: 4990 * time.Millisecond,
			WritesCompleted: 6990, WritesMerged: 1990, SectorsWrite: 559000, WriteTime: 8990 * time.Millisecond,
			InProgress: 2, IOTime: 11990 * time.Millisecond, WeightedIOTime: 13990 * time.Millisecond}}}
	noContainers := func(context.Context) ([]stats.ContainerSample, error) { return nil, nil }
	healthy := start(t, Config{}, Deps{Containers: noContainers, NodeFilesystems: func() ([]stats.NodeFilesystem, error) { return fss, nil }})
	broken := start(t, Config{}, Deps{Containers: noContainers, NodeFilesystems: func() ([]stats.NodeFilesystem, error) { return nil, errors.New("no mountinfo") }})
	const root = `{container="",device="/dev/vda1",id="/",image="",name="",namespace="",pod=""} `
	const ms = " 1700000000123\n"
	want := []string{
		"container_fs_inodes_free" + root + "4000" + ms,
		"container_fs_inodes_total" + root + "5000" + ms,
		"container_fs_io_current" + root + "2" + ms,
		"container_fs_io_time_seconds_total" + root + "11.99" + ms,
		"container_fs_io_time_weighted_seconds_total" + root + "13.99" + ms,
		"container_fs_limit_bytes" + root + "4.096e+06" + ms,
		"container_fs_read_seconds_total" + root + "4.99" + ms,
		"container_fs_reads_merged_total" + root + "298" + ms,
		"container_fs_reads_total" + root + "8990" + ms,
		"container_fs_sector_reads_total" + root + "719000" + ms,
		"container_fs_sector_writes_total" + root + "559000" + ms,
		"container_fs_usage_bytes" + root + "2.4576e+06" + ms,
		"container_fs_write_seconds_total" + root + "8.99" + ms,
		"container_fs_writes_merged_total" + root + "1990" + ms,
		"container_fs_writes_total" + root + "6990" + ms,
		"container_scrape_error 0\n",
	}
	if diff := cmp.Diff(want, samples(t, healthy+"/metrics/cadvisor")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"container_scrape_error 0\n"}, samples(t, broken+"/metrics/cadvisor")); diff != "" {
		t.Errorf("with a failed read (-want +got):\n%s", diff)
	}
}
