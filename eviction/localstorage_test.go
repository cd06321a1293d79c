package eviction

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

type violationRow struct {
	Pod, Limit, Message string
}

func violationRows(vs []Violation) []violationRow {
	var out []violationRow
	for _, v := range vs {
		out = append(out, violationRow{Pod: v.Pod.Name, Limit: v.Limit, Message: v.Message})
	}
	return out
}

// localStorageCase is one pod and its stats (nil: the Summary has none).
type localStorageCase struct {
	pod   *v1.Pod
	stats []statsOpt
}

func storageLimit(s string) v1.ResourceList { return resources("ephemeral-storage", s) }

func TestLocalStorageViolations(t *testing.T) {
	t.Parallel()
	const (
		emptyDirOver  = `Usage of EmptyDir volume "cache" exceeds the limit "1Gi". `
		podTotalOver  = "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. "
		containerOver = `Container app exceeded its local ephemeral storage limit "1Gi". `
	)
	// Two containers with limits adding up to 2Gi.
	twoLimited := func(name string, opts ...podOpt) *v1.Pod {
		return newTestPod(name, append([]podOpt{
			withContainer("a", nil, storageLimit("1Gi")),
			withContainer("b", nil, storageLimit("1Gi")),
		}, opts...)...)
	}
	// app is limited to 1Gi; other's 4Gi keeps the pod-level limit out of the way.
	appLimited := func(name string, opts ...podOpt) *v1.Pod {
		return newTestPod(name, append([]podOpt{
			withContainer("app", nil, storageLimit("1Gi")),
			withContainer("other", nil, storageLimit("4Gi")),
		}, opts...)...)
	}
	tests := []struct {
		name   string
		layout DiskLayout
		cases  []localStorageCase
		want   []violationRow
	}{
		{
			name: "emptyDir over its sizeLimit",
			cases: []localStorageCase{{
				pod:   newTestPod("p", withEmptyDir("cache", v1.StorageMediumDefault, "1Gi")),
				stats: []statsOpt{volumeUsage("cache", "2Gi", 1)},
			}},
			want: []violationRow{{"p", LimitEmptyDir, emptyDirOver}},
		},
		{
			name: "memory-backed emptyDir over its sizeLimit",
			cases: []localStorageCase{{
				pod:   newTestPod("p", withEmptyDir("cache", v1.StorageMediumMemory, "1Gi")),
				stats: []statsOpt{volumeUsage("cache", "1025Mi", 1)},
			}},
			want: []violationRow{{"p", LimitEmptyDir, emptyDirOver}},
		},
		{
			name: "emptyDir at its sizeLimit",
			cases: []localStorageCase{{
				pod:   newTestPod("p", withEmptyDir("cache", v1.StorageMediumDefault, "1Gi")),
				stats: []statsOpt{volumeUsage("cache", "1Gi", 1)},
			}},
		},
		{
			name: "emptyDir stats without used bytes are skipped",
			cases: []localStorageCase{{
				pod: newTestPod("p", withEmptyDir("cache", v1.StorageMediumDefault, "1Gi")),
				stats: []statsOpt{func(ps *statsapi.PodStats) {
					ps.VolumeStats = append(ps.VolumeStats, statsapi.VolumeStats{Name: "cache"})
				}},
			}},
		},
		{
			name: "emptyDir without sizeLimit",
			cases: []localStorageCase{{
				pod:   newTestPod("p", withEmptyDir("cache", v1.StorageMediumDefault, "")),
				stats: []statsOpt{volumeUsage("cache", "100Gi", 1)},
			}},
		},
		{
			name: "emptyDir with a zero sizeLimit is unlimited",
			cases: []localStorageCase{{
				pod:   newTestPod("p", withEmptyDir("cache", v1.StorageMediumDefault, "0")),
				stats: []statsOpt{volumeUsage("cache", "1Gi", 1)},
			}},
		},
		{
			name: "pod total from the Summary's ephemeral-storage figure",
			cases: []localStorageCase{{
				pod: twoLimited("p"),
				stats: []statsOpt{
					ctrRootfs("a", "900Mi", 1), ctrLogs("a", "10Mi", 1),
					ctrRootfs("b", "900Mi", 1), ctrLogs("b", "10Mi", 1),
					ephemeralUsage("2049Mi"),
				},
			}},
			want: []violationRow{{"p", LimitPodEphemeral, podTotalOver}},
		},
		{
			name: "the Summary's figure wins over our own sum",
			cases: []localStorageCase{{
				pod: twoLimited("p", withEmptyDir("scratch", v1.StorageMediumDefault, "")),
				stats: []statsOpt{
					ctrRootfs("a", "900Mi", 1), ctrRootfs("b", "900Mi", 1),
					volumeUsage("scratch", "5Gi", 1),
					ephemeralUsage("2Gi"),
				},
			}},
		},
		{
			name: "pod total summed from rootfs, logs and local volumes when the figure is absent",
			cases: []localStorageCase{{
				pod: twoLimited("p", withEmptyDir("scratch", v1.StorageMediumDefault, "")),
				stats: []statsOpt{
					ctrRootfs("a", "900Mi", 1), ctrLogs("a", "50Mi", 1),
					ctrRootfs("b", "900Mi", 1),
					volumeUsage("scratch", "300Mi", 1),
				},
			}},
			want: []violationRow{{"p", LimitPodEphemeral, podTotalOver}},
		},
		{
			// Like the kubelet's pod ephemeral-storage accounting (and unlike its
			// disk ranking), hostPath and memory-backed volumes are not counted.
			name: "pod total fallback leaves out hostPath and memory-backed volumes",
			cases: []localStorageCase{{
				pod: twoLimited("p", withVolume("host", srcHostPath), withEmptyDir("shm", v1.StorageMediumMemory, "")),
				stats: []statsOpt{
					ctrRootfs("a", "900Mi", 1), ctrRootfs("b", "900Mi", 1),
					volumeUsage("host", "10Gi", 1), volumeUsage("shm", "10Gi", 1),
				},
			}},
		},
		{
			name: "container rootfs + logs over its limit",
			cases: []localStorageCase{{
				pod:   appLimited("p"),
				stats: []statsOpt{ctrRootfs("app", "800Mi", 1), ctrLogs("app", "300Mi", 1), ephemeralUsage("1100Mi")},
			}},
			want: []violationRow{{"p", LimitContainerEphemeral, containerOver}},
		},
		{
			name:   "container rootfs not counted on a dedicated imagefs",
			layout: DedicatedImageFs,
			cases: []localStorageCase{{
				pod:   appLimited("p"),
				stats: []statsOpt{ctrRootfs("app", "800Mi", 1), ctrLogs("app", "300Mi", 1), ephemeralUsage("1100Mi")},
			}},
		},
		{
			name:   "container logs alone over the limit on a dedicated imagefs",
			layout: DedicatedImageFs,
			cases: []localStorageCase{{
				pod:   appLimited("p"),
				stats: []statsOpt{ctrRootfs("app", "1Mi", 1), ctrLogs("app", "1100Mi", 1), ephemeralUsage("1101Mi")},
			}},
			want: []violationRow{{"p", LimitContainerEphemeral, containerOver}},
		},
		{
			name:   "container rootfs counted on a split imagefs (writable layers on nodefs)",
			layout: SplitImageFs,
			cases: []localStorageCase{{
				pod:   appLimited("p"),
				stats: []statsOpt{ctrRootfs("app", "800Mi", 1), ctrLogs("app", "300Mi", 1), ephemeralUsage("1100Mi")},
			}},
			want: []violationRow{{"p", LimitContainerEphemeral, containerOver}},
		},
		{
			name: "a zero container limit is ignored",
			cases: []localStorageCase{{
				pod: newTestPod("p",
					withContainer("zero", nil, storageLimit("0")),
					withContainer("other", nil, storageLimit("1Gi"))),
				stats: []statsOpt{ctrRootfs("zero", "10Mi", 1), ctrLogs("zero", "1Mi", 1), ephemeralUsage("11Mi")},
			}},
		},
		{
			name: "no limits at all",
			cases: []localStorageCase{{
				pod:   newTestPod("p", bestEffort(), withEmptyDir("cache", v1.StorageMediumDefault, "")),
				stats: []statsOpt{ctrRootfs("c", "50Gi", 1), ctrLogs("c", "50Gi", 1), volumeUsage("cache", "50Gi", 1), ephemeralUsage("150Gi")},
			}},
		},
		{
			name: "one violation per pod: emptyDir first",
			cases: []localStorageCase{{
				pod: twoLimited("p", withEmptyDir("cache", v1.StorageMediumDefault, "1Gi")),
				stats: []statsOpt{
					ctrRootfs("a", "5Gi", 1), ctrLogs("a", "5Gi", 1),
					volumeUsage("cache", "3Gi", 1), ephemeralUsage("13Gi"),
				},
			}},
			want: []violationRow{{"p", LimitEmptyDir, emptyDirOver}},
		},
		{
			name: "one violation per pod: pod total before container",
			cases: []localStorageCase{{
				pod:   twoLimited("p"),
				stats: []statsOpt{ctrRootfs("a", "5Gi", 1), ctrLogs("a", "5Gi", 1), ephemeralUsage("10Gi")},
			}},
			want: []violationRow{{"p", LimitPodEphemeral, podTotalOver}},
		},
		{
			name: "no stats, no violation",
			cases: []localStorageCase{{
				pod: twoLimited("p", withEmptyDir("cache", v1.StorageMediumDefault, "1Mi")),
			}},
		},
		{
			name: "several pods in input order",
			cases: []localStorageCase{
				{pod: appLimited("z-container"), stats: []statsOpt{ctrRootfs("app", "2Gi", 1), ctrLogs("app", "0", 0), ephemeralUsage("2Gi")}},
				{pod: newTestPod("fine", withEmptyDir("cache", v1.StorageMediumDefault, "1Gi")), stats: []statsOpt{volumeUsage("cache", "1Mi", 1)}},
				{pod: newTestPod("a-emptydir", withEmptyDir("cache", v1.StorageMediumDefault, "1Gi")), stats: []statsOpt{volumeUsage("cache", "2Gi", 1)}},
				{pod: twoLimited("unmeasured")},
			},
			want: []violationRow{
				{"z-container", LimitContainerEphemeral, containerOver},
				{"a-emptydir", LimitEmptyDir, emptyDirOver},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pods []*v1.Pod
			var stats []statsapi.PodStats
			for _, c := range tc.cases {
				pods = append(pods, c.pod)
				if c.stats != nil {
					stats = append(stats, newPodStats(c.pod, c.stats...))
				}
			}
			got := LocalStorageViolations(pods, statsOf(stats...), tc.layout)
			if diff := cmp.Diff(tc.want, violationRows(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("LocalStorageViolations(%s) mismatch (-want +got):\n%s", tc.layout, diff)
			}
			for i, v := range got {
				if v.Pod == nil {
					t.Errorf("violation %d has no pod", i)
				}
			}
		})
	}
}
