package eviction

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// rankRow is what a test checks of one ranked pod.
type rankRow struct {
	Name  string
	Usage Usage
}

func rows(rs []Ranked) []rankRow {
	out := make([]rankRow, len(rs))
	for i, r := range rs {
		out[i] = rankRow{Name: r.Pod.Name, Usage: r.Usage}
	}
	return out
}

// measured is a Usage for a pod with stats.
func measured(usage, request string, exceeds bool, priority int32) Usage {
	u, r := qty(usage), qty(request)
	return Usage{HasStats: true, Usage: u.Value(), Request: r.Value(), ExceedsRequest: exceeds, Priority: priority}
}

// counted marks u as a count of inodes or processes.
func counted(u Usage) Usage {
	u.Count = true
	return u
}

// TestRankSeedDiskTable is the seed's nodefs example: six pods of every QoS class,
// no ephemeral-storage requests, equal priority. The ranking follows nodefs usage
// alone (summed over containers, logs and local volumes), so Guaranteed pod B goes
// first. "M" and "G" are decimal (10^6, 10^9 bytes).
func TestRankSeedDiskTable(t *testing.T) {
	t.Parallel()
	a := newTestPod("A", bestEffort(), withEmptyDir("scratch", v1.StorageMediumDefault, ""))
	b := newTestPod("B", guaranteed("2Gi"))
	c := newTestPod("C", burstable("1Gi", "2Gi"))
	d := newTestPod("D", burstable("1Gi", "2Gi"))
	e := newTestPod("E", bestEffort())
	f := newTestPod("F", guaranteed("2Gi"))
	wantQoS := []v1.PodQOSClass{v1.PodQOSBestEffort, v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBurstable, v1.PodQOSBestEffort, v1.PodQOSGuaranteed}
	var gotQoS []v1.PodQOSClass
	for _, p := range []*v1.Pod{a, b, c, d, e, f} {
		gotQoS = append(gotQoS, qos.Class(p))
	}
	if diff := cmp.Diff(wantQoS, gotQoS); diff != "" {
		t.Fatalf("fixture QoS classes (-want +got):\n%s", diff)
	}
	stats := statsOf(
		// A's 800M is spread over its writable layer, its logs and an emptyDir.
		newPodStats(a, ctrRootfs("c", "500M", 10), ctrLogs("c", "100M", 1), volumeUsage("scratch", "200M", 5)),
		newPodStats(b, ctrRootfs("c", "1.3G", 10)),
		newPodStats(c, ctrRootfs("c", "1.2G", 10)),
		newPodStats(d, ctrRootfs("c", "700M", 10)),
		newPodStats(e, ctrRootfs("c", "500M", 10)),
		newPodStats(f, ctrRootfs("c", "1G", 10)),
	)
	want := []rankRow{
		{"B", measured("1.3G", "0", true, 0)},
		{"C", measured("1.2G", "0", true, 0)},
		{"F", measured("1G", "0", true, 0)},
		{"A", measured("800M", "0", true, 0)},
		{"D", measured("700M", "0", true, 0)},
		{"E", measured("500M", "0", true, 0)},
	}
	for _, order := range [][]*v1.Pod{{a, b, c, d, e, f}, {f, e, d, c, b, a}, {d, a, f, c, e, b}} {
		t.Run(fmt.Sprint(podNames(order)), func(t *testing.T) {
			t.Parallel()
			got := Rank(SignalNodeFsAvailable, NoImageFs, order, stats)
			if diff := cmp.Diff(want, rows(got)); diff != "" {
				t.Errorf("Rank(nodefs.available) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRankSeedMemoryTable is the seed's memory example. Usage above request goes
// first (C, A, E), then by usage − request: C 1.8G−1Gi ≈ 726M, A 700M, E 300M;
// then B 1.9G−2Gi ≈ −247M, D 800M−1Gi ≈ −274M, F 1G−2Gi ≈ −1.15G. Guaranteed B
// is evicted before Burstable D.
func TestRankSeedMemoryTable(t *testing.T) {
	t.Parallel()
	a := newTestPod("A", bestEffort())
	b := newTestPod("B", guaranteed("2Gi"))
	c := newTestPod("C", burstable("1Gi", "2Gi"))
	d := newTestPod("D", burstable("1Gi", "2Gi"))
	e := newTestPod("E", bestEffort())
	f := newTestPod("F", guaranteed("2Gi"))
	stats := statsOf(
		newPodStats(a, podWorkingSet("700M")),
		newPodStats(b, podWorkingSet("1.9G")),
		newPodStats(c, podWorkingSet("1.8G")),
		newPodStats(d, podWorkingSet("800M")),
		newPodStats(e, podWorkingSet("300M")),
		newPodStats(f, podWorkingSet("1G")),
	)
	want := []rankRow{
		{"C", measured("1.8G", "1Gi", true, 0)},
		{"A", measured("700M", "0", true, 0)},
		{"E", measured("300M", "0", true, 0)},
		{"B", measured("1.9G", "2Gi", false, 0)},
		{"D", measured("800M", "1Gi", false, 0)},
		{"F", measured("1G", "2Gi", false, 0)},
	}
	for _, signal := range []Signal{SignalMemoryAvailable, SignalAllocatableMemoryAvailable} {
		for _, order := range [][]*v1.Pod{{a, b, c, d, e, f}, {f, e, d, c, b, a}} {
			t.Run(fmt.Sprint(signal, podNames(order)), func(t *testing.T) {
				t.Parallel()
				got := Rank(signal, NoImageFs, order, stats)
				if diff := cmp.Diff(want, rows(got)); diff != "" {
					t.Errorf("Rank(%s) mismatch (-want +got):\n%s", signal, diff)
				}
			})
		}
	}
}

func TestRankMemory(t *testing.T) {
	t.Parallel()
	memPodOf := func(name, request string, prio int32) *v1.Pod {
		var req v1.ResourceList
		if request != "" {
			req = resources("memory", request)
		}
		return newTestPod(name, withPriority(prio), withContainer("c", req, nil))
	}
	tests := []struct {
		name  string
		pods  []*v1.Pod
		stats []statsapi.PodStats
		want  []string
	}{
		{
			name: "lower priority first among pods over their request",
			pods: []*v1.Pod{memPodOf("high-big", "", 1000), memPodOf("low-small", "100Mi", 0)},
			stats: []statsapi.PodStats{
				newPodStats(memPodOf("high-big", "", 1000), podWorkingSet("4Gi")),
				newPodStats(memPodOf("low-small", "100Mi", 0), podWorkingSet("200Mi")),
			},
			want: []string{"low-small", "high-big"},
		},
		{
			name: "over request beats priority",
			pods: []*v1.Pod{memPodOf("low-under", "1Gi", -10), memPodOf("high-over", "", 1000)},
			stats: []statsapi.PodStats{
				newPodStats(memPodOf("low-under", "1Gi", -10), podWorkingSet("100Mi")),
				newPodStats(memPodOf("high-over", "", 1000), podWorkingSet("1Mi")),
			},
			want: []string{"high-over", "low-under"},
		},
		{
			name: "pods without stats first, ordered by priority",
			pods: []*v1.Pod{memPodOf("over", "", 0), memPodOf("nostats-high", "", 2000), memPodOf("nostats-low", "", 0)},
			stats: []statsapi.PodStats{
				newPodStats(memPodOf("over", "", 0), podWorkingSet("8Gi")),
			},
			want: []string{"nostats-low", "nostats-high", "over"},
		},
		{
			name: "usage equal to request is not over it",
			pods: []*v1.Pod{memPodOf("equal", "1Gi", 0), memPodOf("one-byte-over", "1Gi", 5)},
			stats: []statsapi.PodStats{
				newPodStats(memPodOf("equal", "1Gi", 0), podWorkingSet("1Gi")),
				newPodStats(memPodOf("one-byte-over", "1Gi", 5), podWorkingSet("1073741825")),
			},
			want: []string{"one-byte-over", "equal"},
		},
		{
			name: "pod memory stats missing count as zero usage",
			pods: []*v1.Pod{memPodOf("no-memory", "", 0), memPodOf("some", "", 0)},
			stats: []statsapi.PodStats{
				newPodStats(memPodOf("no-memory", "", 0)),
				newPodStats(memPodOf("some", "", 0), podWorkingSet("1")),
			},
			want: []string{"some", "no-memory"},
		},
		{
			name: "init container request larger than the containers' sum",
			pods: []*v1.Pod{
				newTestPod("init-heavy", withContainer("c", resources("memory", "100Mi"), nil), withInitContainer("i", resources("memory", "1Gi"))),
				memPodOf("plain", "100Mi", 0),
			},
			stats: []statsapi.PodStats{
				newPodStats(newTestPod("init-heavy"), podWorkingSet("500Mi")), // under the 1Gi init request
				newPodStats(memPodOf("plain", "100Mi", 0), podWorkingSet("200Mi")),
			},
			want: []string{"plain", "init-heavy"},
		},
		{
			name: "ties keep input order",
			pods: []*v1.Pod{memPodOf("t1", "", 0), memPodOf("t2", "", 0), memPodOf("t3", "", 0), memPodOf("t4", "", 0)},
			stats: []statsapi.PodStats{
				newPodStats(memPodOf("t3", "", 0), podWorkingSet("1Gi")),
				newPodStats(memPodOf("t1", "", 0), podWorkingSet("1Gi")),
				newPodStats(memPodOf("t4", "", 0), podWorkingSet("1Gi")),
				newPodStats(memPodOf("t2", "", 0), podWorkingSet("1Gi")),
			},
			want: []string{"t1", "t2", "t3", "t4"},
		},
		{
			name: "ties without stats keep input order",
			pods: []*v1.Pod{memPodOf("n2", "", 0), memPodOf("n1", "", 0), memPodOf("n3", "", 0)},
			want: []string{"n2", "n1", "n3"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := slices.Clone(tc.pods)
			got := Rank(SignalMemoryAvailable, NoImageFs, tc.pods, statsOf(tc.stats...))
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("Rank(memory.available) mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(podNames(in), podNames(tc.pods)); diff != "" {
				t.Errorf("input reordered (-before +after):\n%s", diff)
			}
		})
	}
}

// TestRankStableAtScale checks stability where the sort no longer falls back to
// insertion sort: 300 pods in three tiers of equal keys keep their input order
// within each tier, for every ranking function.
func TestRankStableAtScale(t *testing.T) {
	t.Parallel()
	var pods []*v1.Pod
	var stats []statsapi.PodStats
	want := map[int][]string{}
	for i := range 300 {
		tier := (i * 7) % 3 // interleave the tiers in the input
		p := newTestPod(fmt.Sprintf("p%03d", i), bestEffort())
		pods = append(pods, p)
		size := []string{"3Gi", "2Gi", "1Gi"}[tier]
		stats = append(stats, newPodStats(p, podWorkingSet(size), ctrRootfs("c", size, uint64(3-tier)), processes(uint64(3-tier))))
		want[tier] = append(want[tier], p.Name)
	}
	wantOrder := append(append(append([]string(nil), want[0]...), want[1]...), want[2]...)
	for _, s := range []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalPIDAvailable} {
		got := names(Rank(s, NoImageFs, pods, statsOf(stats...)))
		if diff := cmp.Diff(wantOrder, got); diff != "" {
			t.Errorf("Rank(%s) not stable (-want +got):\n%s", s, diff)
		}
	}
}

// TestRankPID: priority decides first; among equal priority, pods without stats,
// then more processes. Usage over request plays no part.
func TestRankPID(t *testing.T) {
	t.Parallel()
	pod := func(name string, prio int32) *v1.Pod { return newTestPod(name, withPriority(prio), bestEffort()) }
	pods := []*v1.Pod{pod("a", 100), pod("b", 0), pod("c", 0), pod("d", 0), pod("e", 100), pod("f", 0), pod("g", 0)}
	stats := statsOf(
		newPodStats(pods[0], processes(50)),
		newPodStats(pods[1], processes(10)),
		newPodStats(pods[3], processes(30)),
		newPodStats(pods[5]), // no process stats: 0
		newPodStats(pods[6], processes(10)),
	)
	got := Rank(SignalPIDAvailable, NoImageFs, pods, stats)
	want := []rankRow{
		{"c", Usage{Priority: 0}},
		{"d", counted(measured("30", "0", true, 0))},
		{"b", counted(measured("10", "0", true, 0))},
		{"g", counted(measured("10", "0", true, 0))}, // tie with b: input order
		{"f", counted(measured("0", "0", false, 0))},
		{"e", Usage{Priority: 100}},
		{"a", counted(measured("50", "0", true, 100))},
	}
	if diff := cmp.Diff(want, rows(got)); diff != "" {
		t.Errorf("Rank(pid.available) mismatch (-want +got):\n%s", diff)
	}
}

// TestPodUsageDiskLayouts checks which filesystem usage counts for each disk
// signal on each layout, with usages that are distinct powers of two so every
// sum names its parts: rootfs 1+4, logs 2+8, local volumes 16 (emptyDir) + 128
// (configMap) + 256 (gitRepo) + 512 (hostPath) = 912. Memory and HugePages
// emptyDirs, downwardAPI, secret and PVC volumes never count.
func TestPodUsageDiskLayouts(t *testing.T) {
	t.Parallel()
	pod := newTestPod("p",
		withContainer("c1", resources("ephemeral-storage", "100"), nil),
		withContainer("c2", resources("ephemeral-storage", "50"), nil),
		withInitContainer("init", resources("ephemeral-storage", "300")),
		withEmptyDir("scratch", v1.StorageMediumDefault, ""),
		withEmptyDir("shm", v1.StorageMediumMemory, ""),
		withEmptyDir("huge", v1.StorageMediumHugePages, ""),
		withVolume("cfg", srcConfigMap),
		withVolume("git", srcGitRepo),
		withVolume("host", srcHostPath),
		withVolume("dapi", srcDownwardAPI),
		withVolume("sec", srcSecret),
		withVolume("pvc", srcPVC),
		withPriority(7),
	)
	stats := statsOf(newPodStats(pod,
		ctrRootfs("c1", "1", 1), ctrLogs("c1", "2", 2),
		ctrRootfs("c2", "4", 4), ctrLogs("c2", "8", 8),
		volumeUsage("scratch", "16", 16), volumeUsage("shm", "32", 32), volumeUsage("huge", "64", 64),
		volumeUsage("cfg", "128", 128), volumeUsage("git", "256", 256), volumeUsage("host", "512", 512),
		volumeUsage("dapi", "1024", 1024), volumeUsage("sec", "2048", 2048), volumeUsage("pvc", "4096", 4096),
		volumeUsage("not-in-spec", "8192", 8192),
	))
	const all, logsAndVolumes, rootfs, nothing = "927", "922", "5", "0"
	want := map[DiskLayout]map[Signal]string{
		NoImageFs: {
			SignalNodeFsAvailable: all, SignalImageFsAvailable: all, SignalContainerFsAvailable: all,
		},
		DedicatedImageFs: {
			SignalNodeFsAvailable: logsAndVolumes, SignalImageFsAvailable: rootfs, SignalContainerFsAvailable: rootfs,
		},
		SplitImageFs: {
			SignalNodeFsAvailable: all, SignalImageFsAvailable: nothing, SignalContainerFsAvailable: all,
		},
	}
	inodesOf := map[Signal]Signal{
		SignalNodeFsAvailable:      SignalNodeFsInodesFree,
		SignalImageFsAvailable:     SignalImageFsInodesFree,
		SignalContainerFsAvailable: SignalContainerFsInodesFree,
	}
	for layout, bySignal := range want {
		for bytesSignal, used := range bySignal {
			// Bytes: compared with the ephemeral-storage request, max(100+50, 300).
			t.Run(fmt.Sprint(layout, "/", bytesSignal), func(t *testing.T) {
				t.Parallel()
				wantUsage := measured(used, "300", bytesOf(used) > 300, 7)
				if diff := cmp.Diff(wantUsage, PodUsage(bytesSignal, layout, pod, stats)); diff != "" {
					t.Errorf("PodUsage(%s, %s) mismatch (-want +got):\n%s", bytesSignal, layout, diff)
				}
			})
			// Inodes: the same filesystems, no request.
			inodeSignal := inodesOf[bytesSignal]
			t.Run(fmt.Sprint(layout, "/", inodeSignal), func(t *testing.T) {
				t.Parallel()
				wantUsage := counted(measured(used, "0", used != "0", 7))
				if diff := cmp.Diff(wantUsage, PodUsage(inodeSignal, layout, pod, stats)); diff != "" {
					t.Errorf("PodUsage(%s, %s) mismatch (-want +got):\n%s", inodeSignal, layout, diff)
				}
			})
		}
	}
}

func TestPodUsageRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{name: "no requests", pod: newTestPod("p", bestEffort()), want: "0"},
		{name: "other resources only", pod: newTestPod("p", withContainer("c", resources("cpu", "2"), nil)), want: "0"},
		{
			name: "sum of containers",
			pod:  newTestPod("p", withContainer("a", resources("memory", "100Mi"), nil), withContainer("b", resources("memory", "200Mi"), nil)),
			want: "300Mi",
		},
		{
			name: "sum beats a smaller init container",
			pod: newTestPod("p", withContainer("a", resources("memory", "100Mi"), nil), withContainer("b", resources("memory", "200Mi"), nil),
				withInitContainer("i", resources("memory", "250Mi"))),
			want: "300Mi",
		},
		{
			name: "largest init container beats the sum",
			pod: newTestPod("p", withContainer("a", resources("memory", "100Mi"), nil), withContainer("b", resources("memory", "200Mi"), nil),
				withInitContainer("i1", resources("memory", "400Mi")), withInitContainer("i2", resources("memory", "500Mi"))),
			want: "500Mi",
		},
		{
			name: "init container only",
			pod:  newTestPod("p", withContainer("a", nil, nil), withInitContainer("i", resources("memory", "1Gi"))),
			want: "1Gi",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stats := statsOf(newPodStats(tc.pod, podWorkingSet("0")))
			got := PodUsage(SignalMemoryAvailable, NoImageFs, tc.pod, stats).Request
			want := qty(tc.want)
			if diff := cmp.Diff(want.Value(), got); diff != "" {
				t.Errorf("memory request mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRankDiskRequests: disk usage above the ephemeral-storage request first, then
// priority, then usage − request.
func TestRankDiskRequests(t *testing.T) {
	t.Parallel()
	pod := func(name, request string, prio int32) *v1.Pod {
		var req v1.ResourceList
		if request != "" {
			req = resources("ephemeral-storage", request)
		}
		return newTestPod(name, withPriority(prio), withContainer("c", req, nil))
	}
	pods := []*v1.Pod{
		pod("big-request", "2G", 0),     // 1.5G used: within request, −500M
		pod("small-request", "100M", 0), // 300M used: over by 200M
		pod("no-request", "", 0),        // 150M used: over by 150M
		pod("idle", "", 0),              // nothing used: not over, 0
		pod("high-prio", "", 10),        // 5G used: over, but higher priority
	}
	stats := statsOf(
		newPodStats(pods[0], ctrRootfs("c", "1G", 1), ctrLogs("c", "500M", 1)),
		newPodStats(pods[1], ctrRootfs("c", "300M", 1)),
		newPodStats(pods[2], ctrLogs("c", "150M", 1)),
		newPodStats(pods[3], ctrRootfs("c", "0", 0)),
		newPodStats(pods[4], ctrRootfs("c", "5G", 1)),
	)
	want := []rankRow{
		{"small-request", measured("300M", "100M", true, 0)},
		{"no-request", measured("150M", "0", true, 0)},
		{"high-prio", measured("5G", "0", true, 10)},
		{"idle", measured("0", "0", false, 0)},
		{"big-request", measured("1.5G", "2G", false, 0)},
	}
	got := Rank(SignalNodeFsAvailable, NoImageFs, pods, stats)
	if diff := cmp.Diff(want, rows(got)); diff != "" {
		t.Errorf("Rank(nodefs.available) mismatch (-want +got):\n%s", diff)
	}
	// Inode signals have no request: the same pods rank by priority, then inodes.
	gotInodes := Rank(SignalNodeFsInodesFree, NoImageFs, pods, stats)
	wantInodes := []string{"big-request", "small-request", "no-request", "high-prio", "idle"}
	if diff := cmp.Diff(wantInodes, names(gotInodes)); diff != "" {
		t.Errorf("Rank(nodefs.inodesFree) mismatch (-want +got):\n%s", diff)
	}
}

// TestRankDiskWithoutStats: pods without stats go first for disk signals too.
func TestRankDiskWithoutStats(t *testing.T) {
	t.Parallel()
	pods := []*v1.Pod{
		newTestPod("measured", withPriority(-5), bestEffort()),
		newTestPod("unmeasured", withPriority(100), bestEffort()),
	}
	stats := statsOf(newPodStats(pods[0], ctrRootfs("c", "10G", 100)))
	for _, s := range []Signal{SignalNodeFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable} {
		for _, l := range []DiskLayout{NoImageFs, DedicatedImageFs, SplitImageFs} {
			got := names(Rank(s, l, pods, stats))
			if diff := cmp.Diff([]string{"unmeasured", "measured"}, got); diff != "" {
				t.Errorf("Rank(%s, %s) mismatch (-want +got):\n%s", s, l, diff)
			}
		}
	}
}

func TestPodStatsFunc(t *testing.T) {
	t.Parallel()
	withUID := newTestPod("with-uid")
	byName := newTestPod("by-name")
	other := newTestPod("other")
	noUIDStats := newPodStats(byName, podWorkingSet("2Gi"))
	noUIDStats.PodRef.UID = ""
	// A pod recreated under the same name: stats of both incarnations, old last.
	recreated := newTestPod("recreated")
	stale := newPodStats(recreated, podWorkingSet("3Gi"))
	stale.PodRef.UID = "uid-previous-incarnation"
	stats := PodStatsFunc([]statsapi.PodStats{
		newPodStats(withUID, podWorkingSet("1Gi")), noUIDStats,
		newPodStats(recreated, podWorkingSet("4Gi")), stale,
	})
	otherNamespace := newTestPod("by-name")
	otherNamespace.Namespace = "kube-system"
	otherNamespace.UID = "uid-elsewhere"
	tests := []struct {
		name   string
		pod    *v1.Pod
		wantOK bool
		wantWS string
	}{
		{name: "by UID", pod: withUID, wantOK: true, wantWS: "1Gi"},
		{name: "stats without UID by namespace/name", pod: byName, wantOK: true, wantWS: "2Gi"},
		{name: "UID picks the current incarnation", pod: recreated, wantOK: true, wantWS: "4Gi"},
		{name: "same name in another namespace", pod: otherNamespace, wantOK: false},
		{name: "no stats", pod: other, wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps, ok := stats(tc.pod)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(bytesOf(tc.wantWS), *ps.Memory.WorkingSetBytes); diff != "" {
				t.Errorf("working set mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodStatsFuncIndex looks up every pod of a large Summary, with duplicate
// UIDs and names (the later entry wins), entries without UID, and one name in
// many namespaces.
func TestPodStatsFuncIndex(t *testing.T) {
	t.Parallel()
	const n = 3000
	var pods []*v1.Pod
	var entries []statsapi.PodStats
	for i := range n {
		p := newTestPod(fmt.Sprintf("p%d", i%(n/2))) // each name in two namespaces
		p.Namespace = fmt.Sprintf("ns%d", i/(n/2))
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		pods = append(pods, p)
		ps := newPodStats(p, processes(uint64(i)))
		if i%7 == 0 {
			ps.PodRef.UID = "" // found by namespace/name
		}
		entries = append(entries, ps)
	}
	// Stale duplicates listed first lose to the entries above.
	stale := slices.Clone(entries[:n/10])
	for i := range stale {
		stale[i].ProcessStats = nil
	}
	stats := PodStatsFunc(append(stale, entries...))
	for i, p := range pods {
		ps, ok := stats(p)
		if !ok || ps.ProcessStats == nil || *ps.ProcessStats.ProcessCount != uint64(i) {
			t.Fatalf("pod %s/%s: got %+v, %v; want the entry with %d processes", p.Namespace, p.Name, ps, ok, i)
		}
	}
	// A pod whose UID is unknown is found by namespace/name; one in an unknown
	// namespace is not found.
	p := newTestPod("p1")
	p.Namespace, p.UID = "ns1", "uid-recreated"
	if ps, ok := stats(p); !ok || *ps.ProcessStats.ProcessCount != n/2+1 {
		t.Errorf("recreated pod: got %+v, %v; want the entry with %d processes", ps, ok, n/2+1)
	}
	p.Namespace = "elsewhere"
	if ps, ok := stats(p); ok {
		t.Errorf("pod in another namespace: got %+v, want none", ps)
	}
}

// TestRankedReason: the reason explain prints beside each ranked pod.
func TestRankedReason(t *testing.T) {
	t.Parallel()
	static := newTestPod("static", withAnnotation("kubernetes.io/config.source", "file"))
	plain := newTestPod("plain")
	withStats := func(exceeds bool) Usage { return Usage{HasStats: true, ExceedsRequest: exceeds} }
	tests := []struct {
		name   string
		signal Signal
		r      Ranked
		want   string
	}{
		{"no stats", SignalMemoryAvailable, Ranked{Pod: plain}, "no stats: ranked first"},
		{"critical without stats", SignalPIDAvailable, Ranked{Pod: static}, "critical: never evicted; no stats: ranked first"},
		{"memory over request", SignalMemoryAvailable, Ranked{Pod: plain, Usage: withStats(true)}, "usage exceeds request"},
		{"allocatable memory within request", SignalAllocatableMemoryAvailable, Ranked{Pod: plain, Usage: withStats(false)}, "usage within request"},
		{"disk bytes over request", SignalImageFsAvailable, Ranked{Pod: plain, Usage: withStats(true)}, "usage exceeds request"},
		{"critical within request", SignalNodeFsAvailable, Ranked{Pod: static, Usage: withStats(false)}, "critical: never evicted; usage within request"},
		{"pids", SignalPIDAvailable, Ranked{Pod: plain, Usage: withStats(true)}, "by priority, then process count"},
		{"inodes", SignalNodeFsInodesFree, Ranked{Pod: plain, Usage: withStats(true)}, "by priority, then inode usage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.r.Reason(tc.signal); got != tc.want {
				t.Errorf("Reason(%s) = %q, want %q", tc.signal, got, tc.want)
			}
		})
	}
}
