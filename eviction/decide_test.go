package eviction

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

func TestSignalResourceAndCondition(t *testing.T) {
	t.Parallel()
	type row struct {
		Resource  v1.ResourceName
		Condition v1.NodeConditionType
	}
	want := map[Signal]row{
		SignalMemoryAvailable:            {v1.ResourceMemory, v1.NodeMemoryPressure},
		SignalAllocatableMemoryAvailable: {v1.ResourceMemory, v1.NodeMemoryPressure},
		SignalNodeFsAvailable:            {v1.ResourceEphemeralStorage, v1.NodeDiskPressure},
		SignalImageFsAvailable:           {v1.ResourceEphemeralStorage, v1.NodeDiskPressure},
		SignalContainerFsAvailable:       {v1.ResourceEphemeralStorage, v1.NodeDiskPressure},
		SignalNodeFsInodesFree:           {ResourceInodes, v1.NodeDiskPressure},
		SignalImageFsInodesFree:          {ResourceInodes, v1.NodeDiskPressure},
		SignalContainerFsInodesFree:      {ResourceInodes, v1.NodeDiskPressure},
		SignalPIDAvailable:               {ResourcePIDs, v1.NodePIDPressure},
	}
	got := map[Signal]row{}
	for _, s := range append(Signals, "swap.available") {
		r, rok := s.Resource()
		c, cok := s.Condition()
		if rok != cok {
			t.Errorf("%s: Resource ok=%v but Condition ok=%v", s, rok, cok)
		}
		if rok {
			got[s] = row{r, c}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("signal table mismatch (-want +got):\n%s", diff)
	}
}

func TestValueOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		v        Value
		capacity string // "" for no capacity
		want     string
	}{
		{name: "quantity ignores capacity", v: Value{Quantity: qtyp("100Mi")}, capacity: "8Gi", want: "100Mi"},
		// The kubelet multiplies in float64 by a float32 fraction and truncates:
		// 10% of 100Gi is 10737418400, not 10Gi (10737418240).
		{name: "percentage truncated like the kubelet", v: Value{Percentage: 0.1}, capacity: "100Gi", want: "10737418400"},
		{name: "percentage of inodes", v: Value{Percentage: 0.05}, capacity: "1000000", want: "50000"},
		{name: "percentage without capacity", v: Value{Percentage: 0.1}, want: "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c *resource.Quantity
			if tc.capacity != "" {
				c = qtyp(tc.capacity)
			}
			if diff := cmp.Diff(qty(tc.want), *tc.v.Of(c)); diff != "" {
				t.Errorf("Of() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValueString(t *testing.T) {
	t.Parallel()
	got := []string{
		Value{Quantity: qtyp("100Mi")}.String(),
		Value{Percentage: 0.1}.String(),
		Value{Percentage: 0.055}.String(),
	}
	want := []string{"100Mi", "10%", "5.5%"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Value.String() mismatch (-want +got):\n%s", diff)
	}
}

func TestThresholdsMet(t *testing.T) {
	t.Parallel()
	observed := Observations{
		SignalMemoryAvailable:   obsOf("50Mi", "8Gi"),
		SignalNodeFsAvailable:   obsOf("9Gi", "100Gi"),
		SignalNodeFsInodesFree:  obsOf("60000", "1000000"),
		SignalImageFsAvailable:  obsOf("16Gi", "100Gi"),
		SignalPIDAvailable:      obsOf("1500", "4000"),
		SignalImageFsInodesFree: {Capacity: qtyp("1000")}, // no available amount
	}
	memHard := thrQ(SignalMemoryAvailable, "100Mi")
	memWithMin := withMinReclaim(thrQ(SignalMemoryAvailable, "40Mi"), Value{Quantity: qtyp("100Mi")})
	imageWithMin := withMinReclaim(thrP(SignalImageFsAvailable, 0.15), Value{Percentage: 0.02})
	tests := []struct {
		name       string
		thresholds []Threshold
		enforce    bool
		want       []Threshold
	}{
		{name: "quantity above available is met", thresholds: []Threshold{memHard}, want: []Threshold{memHard}},
		{name: "quantity equal to available is not met", thresholds: []Threshold{thrQ(SignalMemoryAvailable, "50Mi")}, want: nil},
		{name: "quantity below available is not met", thresholds: []Threshold{thrQ(SignalMemoryAvailable, "10Mi")}, want: nil},
		{
			name:       "percentage of capacity met",
			thresholds: []Threshold{thrP(SignalNodeFsAvailable, 0.10)}, // ~10Gi > 9Gi
			want:       []Threshold{thrP(SignalNodeFsAvailable, 0.10)},
		},
		{name: "percentage of capacity not met", thresholds: []Threshold{thrP(SignalImageFsAvailable, 0.15)}, want: nil}, // 15Gi < 16Gi
		{name: "inodes percentage not met", thresholds: []Threshold{thrP(SignalNodeFsInodesFree, 0.05)}, want: nil},      // 50000 < 60000
		{
			name:       "inodes percentage met",
			thresholds: []Threshold{thrP(SignalNodeFsInodesFree, 0.10)}, // 100000 > 60000
			want:       []Threshold{thrP(SignalNodeFsInodesFree, 0.10)},
		},
		{name: "pid quantity met", thresholds: []Threshold{thrQ(SignalPIDAvailable, "2k")}, want: []Threshold{thrQ(SignalPIDAvailable, "2k")}},
		{name: "no observation is never met", thresholds: []Threshold{thrQ(SignalContainerFsAvailable, "1Ei")}, want: nil},
		{name: "observation without available is never met", thresholds: []Threshold{thrQ(SignalImageFsInodesFree, "1Ei")}, want: nil},
		{name: "min reclaim ignored unless enforced", thresholds: []Threshold{memWithMin}, enforce: false, want: nil},
		{name: "min reclaim quantity enforced", thresholds: []Threshold{memWithMin}, enforce: true, want: []Threshold{memWithMin}},
		{name: "min reclaim percentage ignored", thresholds: []Threshold{imageWithMin}, enforce: false, want: nil},
		{name: "min reclaim percentage enforced", thresholds: []Threshold{imageWithMin}, enforce: true, want: []Threshold{imageWithMin}}, // 17Gi > 16Gi
		{
			name:       "input order is kept",
			thresholds: []Threshold{thrQ(SignalPIDAvailable, "2k"), thrQ(SignalContainerFsAvailable, "1Gi"), memHard, thrQ(SignalMemoryAvailable, "1Mi")},
			want:       []Threshold{thrQ(SignalPIDAvailable, "2k"), memHard},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ThresholdsMet(tc.thresholds, observed, tc.enforce)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ThresholdsMet(enforceMinReclaim=%v) mismatch (-want +got):\n%s", tc.enforce, diff)
			}
		})
	}
}

func TestMergeThresholds(t *testing.T) {
	t.Parallel()
	mem := thrQ(SignalMemoryAvailable, "100Mi")
	memSoft := graced(thrQ(SignalMemoryAvailable, "1Gi"), time.Minute)
	disk := thrP(SignalNodeFsAvailable, 0.1)
	pid := thrQ(SignalPIDAvailable, "100")
	tests := []struct {
		name string
		a, b []Threshold
		want []Threshold
	}{
		{name: "both empty", want: nil},
		{name: "only a", a: []Threshold{mem}, want: []Threshold{mem}},
		{name: "only b", b: []Threshold{disk}, want: []Threshold{disk}},
		{name: "duplicates removed, a's order first", a: []Threshold{disk, mem}, b: []Threshold{pid, mem, disk}, want: []Threshold{disk, mem, pid}},
		{name: "hard and soft of one signal are distinct", a: []Threshold{mem}, b: []Threshold{memSoft}, want: []Threshold{mem, memSoft}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := append([]Threshold(nil), tc.a...)
			got := mergeThresholds(tc.a, tc.b)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("mergeThresholds() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(a, tc.a, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("a modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestFirstObservedAt(t *testing.T) {
	t.Parallel()
	t0 := fixtureTime
	now := t0.Add(time.Minute)
	memHard := thrQ(SignalMemoryAvailable, "100Mi")
	memSoft := graced(thrQ(SignalMemoryAvailable, "1Gi"), 30*time.Second)
	disk := thrP(SignalNodeFsAvailable, 0.1)
	tests := []struct {
		name string
		met  []Threshold
		last map[thresholdKey]time.Time
		want map[thresholdKey]time.Time
	}{
		{name: "nothing met", met: nil, last: map[thresholdKey]time.Time{keyOf(memHard): t0}, want: nil},
		{name: "newly met gets now", met: []Threshold{memHard}, want: map[thresholdKey]time.Time{keyOf(memHard): now}},
		{
			name: "still met keeps the first time, no longer met is dropped",
			met:  []Threshold{memSoft, disk},
			last: map[thresholdKey]time.Time{keyOf(memSoft): t0, keyOf(memHard): t0},
			want: map[thresholdKey]time.Time{keyOf(memSoft): t0, keyOf(disk): now},
		},
		{
			name: "hard and soft thresholds of one signal are tracked apart",
			met:  []Threshold{memHard, memSoft},
			last: map[thresholdKey]time.Time{keyOf(memSoft): t0},
			want: map[thresholdKey]time.Time{
				{Signal: SignalMemoryAvailable, Soft: false}: now,
				{Signal: SignalMemoryAvailable, Soft: true}:  t0,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := firstObservedAt(tc.met, tc.last, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("firstObservedAt() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetGracePeriod(t *testing.T) {
	t.Parallel()
	t0 := fixtureTime
	hard := thrQ(SignalMemoryAvailable, "100Mi")
	soft := graced(thrQ(SignalMemoryAvailable, "1Gi"), 90*time.Second)
	diskSoft := graced(thrP(SignalNodeFsAvailable, 0.15), time.Minute)
	seen := map[thresholdKey]time.Time{keyOf(hard): t0, keyOf(soft): t0, keyOf(diskSoft): t0.Add(30 * time.Second)}
	tests := []struct {
		name string
		met  []Threshold
		seen map[thresholdKey]time.Time
		now  time.Time
		want []Threshold
	}{
		{name: "hard threshold is actionable at once", met: []Threshold{hard}, seen: seen, now: t0, want: []Threshold{hard}},
		{name: "soft threshold waits for its grace period", met: []Threshold{soft}, seen: seen, now: t0.Add(89 * time.Second), want: nil},
		{name: "soft threshold actionable when the grace period has elapsed", met: []Threshold{soft}, seen: seen, now: t0.Add(90 * time.Second), want: []Threshold{soft}},
		{
			name: "grace measured from each threshold's first observation",
			met:  []Threshold{hard, soft, diskSoft},
			seen: seen,
			now:  t0.Add(91 * time.Second), // diskSoft first seen at 30s: 61s ago
			want: []Threshold{hard, soft, diskSoft},
		},
		{
			name: "grace not elapsed for a later one",
			met:  []Threshold{diskSoft, soft},
			seen: seen,
			now:  t0.Add(89 * time.Second), // diskSoft 59s, soft 89s
			want: nil,
		},
		{name: "never observed is not actionable", met: []Threshold{hard}, seen: map[thresholdKey]time.Time{}, now: t0, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := metGracePeriod(tc.met, tc.seen, tc.now)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("metGracePeriod() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpdatedStats(t *testing.T) {
	t.Parallel()
	t0 := fixtureTime
	mem := thrQ(SignalMemoryAvailable, "100Mi")
	disk := thrP(SignalNodeFsAvailable, 0.1)
	at := func(ts time.Time) Observations {
		return Observations{SignalMemoryAvailable: obsAt("50Mi", "1Gi", ts), SignalNodeFsAvailable: obsAt("1Gi", "100Gi", ts)}
	}
	tests := []struct {
		name      string
		ts        []Threshold
		obs, last Observations
		want      []Threshold
	}{
		{name: "first pass", ts: []Threshold{mem, disk}, obs: at(t0), last: nil, want: []Threshold{mem, disk}},
		{name: "newer sample", ts: []Threshold{mem}, obs: at(t0.Add(time.Second)), last: at(t0), want: []Threshold{mem}},
		{name: "same sample is stale", ts: []Threshold{mem, disk}, obs: at(t0), last: at(t0), want: nil},
		{name: "older sample is stale", ts: []Threshold{mem}, obs: at(t0), last: at(t0.Add(time.Second)), want: nil},
		{name: "unknown sample time always counts", ts: []Threshold{mem}, obs: at(time.Time{}), last: at(t0), want: []Threshold{mem}},
		{
			name: "per-signal comparison",
			ts:   []Threshold{mem, disk},
			obs:  Observations{SignalMemoryAvailable: obsAt("50Mi", "1Gi", t0.Add(time.Second)), SignalNodeFsAvailable: obsAt("1Gi", "100Gi", t0)},
			last: at(t0),
			want: []Threshold{mem},
		},
		{name: "signal without observation dropped", ts: []Threshold{thrQ(SignalPIDAvailable, "10")}, obs: at(t0), last: nil, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := updatedStats(tc.ts, tc.obs, tc.last)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("updatedStats() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ts   []Threshold
		want []v1.NodeConditionType
	}{
		{name: "none", want: nil},
		{name: "memory", ts: []Threshold{thrQ(SignalMemoryAvailable, "1")}, want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{name: "allocatable memory", ts: []Threshold{thrQ(SignalAllocatableMemoryAvailable, "1")}, want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{
			name: "every disk signal drives DiskPressure once",
			ts: []Threshold{
				thrQ(SignalNodeFsAvailable, "1"), thrQ(SignalNodeFsInodesFree, "1"), thrQ(SignalImageFsAvailable, "1"),
				thrQ(SignalImageFsInodesFree, "1"), thrQ(SignalContainerFsAvailable, "1"), thrQ(SignalContainerFsInodesFree, "1"),
			},
			want: []v1.NodeConditionType{v1.NodeDiskPressure},
		},
		{
			name: "order of first appearance, no duplicates",
			ts: []Threshold{
				thrQ(SignalPIDAvailable, "1"), thrQ(SignalNodeFsAvailable, "1"), thrQ(SignalMemoryAvailable, "1"),
				graced(thrQ(SignalMemoryAvailable, "2"), time.Minute), thrQ(SignalPIDAvailable, "2"),
			},
			want: []v1.NodeConditionType{v1.NodePIDPressure, v1.NodeDiskPressure, v1.NodeMemoryPressure},
		},
		{name: "unknown signal ignored", ts: []Threshold{thrQ("swap.available", "1")}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, Conditions(tc.ts), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Conditions() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConditionsLastObservedAt(t *testing.T) {
	t.Parallel()
	t0, now := fixtureTime, fixtureTime.Add(time.Minute)
	last := map[v1.NodeConditionType]time.Time{v1.NodeMemoryPressure: t0, v1.NodeDiskPressure: t0}
	got := conditionsLastObservedAt([]v1.NodeConditionType{v1.NodeDiskPressure, v1.NodePIDPressure}, last, now)
	want := map[v1.NodeConditionType]time.Time{
		v1.NodeMemoryPressure: t0,  // not observed now: keeps its old time
		v1.NodeDiskPressure:   now, // observed again
		v1.NodePIDPressure:    now, // new
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditionsLastObservedAt() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[v1.NodeConditionType]time.Time{v1.NodeMemoryPressure: t0, v1.NodeDiskPressure: t0}, last); diff != "" {
		t.Errorf("last modified (-before +after):\n%s", diff)
	}
}

func TestConditionsObservedSince(t *testing.T) {
	t.Parallel()
	t0 := fixtureTime
	period := 5 * time.Minute
	observed := map[v1.NodeConditionType]time.Time{
		v1.NodePIDPressure:    t0.Add(2 * time.Minute),
		v1.NodeMemoryPressure: t0,
		v1.NodeDiskPressure:   t0.Add(time.Minute),
	}
	tests := []struct {
		name string
		now  time.Time
		want []v1.NodeConditionType
	}{
		{name: "all within the period, fixed order", now: t0.Add(time.Minute), want: []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}},
		{name: "just inside the period", now: t0.Add(period - time.Nanosecond), want: []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}},
		{name: "exactly one period later it is gone", now: t0.Add(period), want: []v1.NodeConditionType{v1.NodeDiskPressure, v1.NodePIDPressure}},
		{name: "all gone", now: t0.Add(2*time.Minute + period), want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := conditionsObservedSince(observed, period, tc.now)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("conditionsObservedSince() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConditionTransitionPeriod runs the pure condition pipeline of a pass over a
// sequence of observations: a condition stays for the transition period after
// its threshold was last met, and re-arms when met again.
func TestConditionTransitionPeriod(t *testing.T) {
	t.Parallel()
	t0 := fixtureTime
	period := 5 * time.Minute
	thresholds := []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}
	steps := []struct {
		at        time.Duration
		available string
		want      []v1.NodeConditionType
	}{
		{at: 0, available: "200Mi", want: nil},
		{at: 10 * time.Second, available: "50Mi", want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{at: 20 * time.Second, available: "500Mi", want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{at: 10*time.Second + period - time.Second, available: "500Mi", want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{at: 10*time.Second + period, available: "500Mi", want: nil},
		{at: 6 * time.Minute, available: "90Mi", want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{at: 6*time.Minute + period - time.Second, available: "1Gi", want: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{at: 6*time.Minute + period, available: "1Gi", want: nil},
	}
	var observed map[v1.NodeConditionType]time.Time
	for _, st := range steps {
		now := t0.Add(st.at)
		met := ThresholdsMet(thresholds, Observations{SignalMemoryAvailable: obsAt(st.available, "8Gi", now)}, false)
		observed = conditionsLastObservedAt(Conditions(met), observed, now)
		got := conditionsObservedSince(observed, period, now)
		if diff := cmp.Diff(st.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("at %v with %s available: conditions mismatch (-want +got):\n%s", st.at, st.available, diff)
		}
	}
}

func TestReclaimTarget(t *testing.T) {
	t.Parallel()
	mem := thrQ(SignalMemoryAvailable, "100Mi")
	alloc := thrQ(SignalAllocatableMemoryAvailable, "100Mi")
	disk := thrP(SignalNodeFsAvailable, 0.1)
	inodes := thrP(SignalImageFsInodesFree, 0.05)
	pid := thrQ(SignalPIDAvailable, "100")
	type result struct {
		Threshold Threshold
		Resource  v1.ResourceName
		OK        bool
	}
	tests := []struct {
		name string
		ts   []Threshold
		want result
	}{
		{name: "none", ts: nil, want: result{}},
		{name: "memory first even when listed last", ts: []Threshold{disk, pid, mem}, want: result{mem, v1.ResourceMemory, true}},
		{name: "allocatable memory counts as memory", ts: []Threshold{pid, alloc, disk}, want: result{alloc, v1.ResourceMemory, true}},
		{name: "first of the memory signals", ts: []Threshold{alloc, mem}, want: result{alloc, v1.ResourceMemory, true}},
		{name: "otherwise configuration order", ts: []Threshold{inodes, disk, pid}, want: result{inodes, ResourceInodes, true}},
		{name: "disk bytes", ts: []Threshold{disk, pid}, want: result{disk, v1.ResourceEphemeralStorage, true}},
		{name: "pids", ts: []Threshold{pid}, want: result{pid, ResourcePIDs, true}},
		{name: "signal without a resource is skipped", ts: []Threshold{thrQ("swap.available", "1"), pid}, want: result{pid, ResourcePIDs, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			th, r, ok := ReclaimTarget(tc.ts)
			if diff := cmp.Diff(tc.want, result{th, r, ok}); diff != "" {
				t.Errorf("ReclaimTarget() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvictionGracePeriod(t *testing.T) {
	t.Parallel()
	hard := thrQ(SignalMemoryAvailable, "100Mi")
	soft := graced(thrQ(SignalMemoryAvailable, "1Gi"), time.Minute)
	tests := []struct {
		name        string
		t           Threshold
		pod         *v1.Pod
		maxPodGrace time.Duration
		want        time.Duration
	}{
		{name: "hard: 1s whatever the pod asks", t: hard, pod: newTestPod("p", withGracePeriod(300)), maxPodGrace: time.Minute, want: time.Second},
		{name: "hard: 1s even with a zero pod grace", t: hard, pod: newTestPod("p", withGracePeriod(0)), want: time.Second},
		{name: "soft: pod grace below the cap", t: soft, pod: newTestPod("p", withGracePeriod(10)), maxPodGrace: 30 * time.Second, want: 10 * time.Second},
		{name: "soft: cap below the pod grace", t: soft, pod: newTestPod("p", withGracePeriod(60)), maxPodGrace: 30 * time.Second, want: 30 * time.Second},
		{name: "soft: equal", t: soft, pod: newTestPod("p", withGracePeriod(30)), maxPodGrace: 30 * time.Second, want: 30 * time.Second},
		{name: "soft: pod without grace gets the cap", t: soft, pod: newTestPod("p"), maxPodGrace: 45 * time.Second, want: 45 * time.Second},
		{name: "soft: default cap 0 is min(0, pod grace)", t: soft, pod: newTestPod("p", withGracePeriod(30)), maxPodGrace: 0, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, EvictionGracePeriod(tc.t, tc.pod, tc.maxPodGrace)); diff != "" {
				t.Errorf("EvictionGracePeriod() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReclaimSteps(t *testing.T) {
	t.Parallel()
	none := Steps{}
	both := Steps{Containers: true, Images: true}
	containers := Steps{Containers: true}
	images := Steps{Images: true}
	// The kubelet's buildSignalToNodeReclaimFuncs, every signal × every layout.
	want := map[DiskLayout]map[Signal]Steps{
		NoImageFs: {
			SignalMemoryAvailable: none, SignalAllocatableMemoryAvailable: none, SignalPIDAvailable: none,
			SignalNodeFsAvailable: both, SignalNodeFsInodesFree: both,
			SignalImageFsAvailable: both, SignalImageFsInodesFree: both,
			SignalContainerFsAvailable: both, SignalContainerFsInodesFree: both,
		},
		DedicatedImageFs: {
			SignalMemoryAvailable: none, SignalAllocatableMemoryAvailable: none, SignalPIDAvailable: none,
			SignalNodeFsAvailable: none, SignalNodeFsInodesFree: none,
			SignalImageFsAvailable: both, SignalImageFsInodesFree: both,
			SignalContainerFsAvailable: both, SignalContainerFsInodesFree: both,
		},
		SplitImageFs: {
			SignalMemoryAvailable: none, SignalAllocatableMemoryAvailable: none, SignalPIDAvailable: none,
			SignalNodeFsAvailable: containers, SignalNodeFsInodesFree: containers,
			SignalImageFsAvailable: images, SignalImageFsInodesFree: images,
			SignalContainerFsAvailable: containers, SignalContainerFsInodesFree: containers,
		},
	}
	for _, layout := range []DiskLayout{NoImageFs, DedicatedImageFs, SplitImageFs} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			got := map[Signal]Steps{}
			for _, s := range Signals {
				got[s] = ReclaimSteps(s, layout)
			}
			if diff := cmp.Diff(want[layout], got); diff != "" {
				t.Errorf("ReclaimSteps(%v) mismatch (-want +got):\n%s", layout, diff)
			}
		})
	}
}

// summaryFn is a function-field StatsSource.
type summaryFn func(ctx context.Context) (*statsapi.Summary, error)

func (f summaryFn) Summary(ctx context.Context) (*statsapi.Summary, error) { return f(ctx) }

// TestSynchronizeMinReclaimCarriesOnlyGracedThresholds drives single passes with
// time as data. As in the kubelet (which stores thresholdsMet after
// thresholdsMetGracePeriod), minimum-reclaim hysteresis holds only thresholds
// that had passed their grace period: a soft threshold that recovers above its
// value before its grace period ends starts over, and is never acted on while
// the signal sits between the threshold and threshold + minimum reclaim.
func TestSynchronizeMinReclaimCarriesOnlyGracedThresholds(t *testing.T) {
	t.Parallel()
	soft := withMinReclaim(graced(thrQ(SignalMemoryAvailable, "500Mi"), time.Minute), Value{Quantity: qtyp("300Mi")})
	type step struct {
		at        time.Duration
		available string
		wantKills int // cumulative
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "recovered before the grace period: hysteresis does not hold it",
			steps: []step{
				{at: 0, available: "400Mi", wantKills: 0},                // met, grace starts
				{at: 30 * time.Second, available: "600Mi", wantKills: 0}, // above 500Mi, below 800Mi
				{at: 70 * time.Second, available: "600Mi", wantKills: 0}, // would be "graced" if held
				{at: 80 * time.Second, available: "450Mi", wantKills: 0}, // met again: grace restarts at 80s
				{at: 139 * time.Second, available: "450Mi", wantKills: 0},
				{at: 140 * time.Second, available: "450Mi", wantKills: 1},
			},
		},
		{
			name: "after the grace period the episode lasts until min reclaim is freed",
			steps: []step{
				{at: 0, available: "400Mi", wantKills: 0},
				{at: 60 * time.Second, available: "400Mi", wantKills: 1},
				{at: 70 * time.Second, available: "700Mi", wantKills: 2}, // held by min reclaim
				{at: 80 * time.Second, available: "800Mi", wantKills: 2}, // threshold + min reclaim reached
				{at: 90 * time.Second, available: "700Mi", wantKills: 2}, // not met, not held
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var now time.Time
			var available string
			kills := 0
			pods := []*v1.Pod{newTestPod("a", bestEffort())}
			m, err := New(Config{Thresholds: []Threshold{soft}, MaxPodGracePeriod: 30 * time.Second}, Deps{
				Stats: summaryFn(func(context.Context) (*statsapi.Summary, error) {
					s := newSummary().memory(available, "4Gi").
						pods(newPodStats(pods[0], podWorkingSet("1Gi"))).build()
					s.Node.Memory.Time = metav1.NewTime(now)
					return s, nil
				}),
				Killer:     nodeapi.PodKillerFunc(func(context.Context, nodeapi.KillRequest) error { kills++; return nil }),
				ActivePods: func() []*v1.Pod { return pods },
			})
			if err != nil {
				t.Fatal(err)
			}
			var st state
			for _, s := range tc.steps {
				now, available = fixtureTime.Add(s.at), s.available
				m.synchronize(t.Context(), &st, now)
				if kills != s.wantKills {
					t.Fatalf("at %v with %s available: %d kills, want %d", s.at, s.available, kills, s.wantKills)
				}
			}
		})
	}
}
