package eviction

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestObserve(t *testing.T) {
	t.Parallel()
	later := fixtureTime.Add(7 * time.Second)
	tests := []struct {
		name    string
		summary *statsapi.Summary
		want    Observations
	}{
		{
			name:    "nil summary",
			summary: nil,
			want:    Observations{},
		},
		{
			name:    "empty summary",
			summary: newSummary().build(),
			want:    Observations{},
		},
		{
			name: "every signal",
			summary: newSummary().
				memory("1Gi", "3Gi").
				systemContainer("kubelet", "10Gi", "100Mi").
				allocatable("512Mi", "2Gi").
				nodeFs(fsInfo("100Gi", "40Gi", 1000000, 600000)).
				imageFs(fsInfo("200Gi", "150Gi", 2000000, 1500000)).
				containerFs(fsInfo("50Gi", "10Gi", 500000, 100000)).
				pids(4194304, 1000).
				build(),
			want: Observations{
				// capacity = available + working set
				SignalMemoryAvailable:            obsOf("1Gi", "4Gi"),
				SignalAllocatableMemoryAvailable: obsOf("512Mi", "2560Mi"),
				SignalNodeFsAvailable:            obsOf("40Gi", "100Gi"),
				SignalNodeFsInodesFree:           obsOf("600000", "1000000"),
				SignalImageFsAvailable:           obsOf("150Gi", "200Gi"),
				SignalImageFsInodesFree:          obsOf("1500000", "2000000"),
				SignalContainerFsAvailable:       obsOf("10Gi", "50Gi"),
				SignalContainerFsInodesFree:      obsOf("100000", "500000"),
				// maxpid − curproc, capacity maxpid
				SignalPIDAvailable: obsOf("4193304", "4194304"),
			},
		},
		{
			name: "each observation carries its own sample time",
			summary: func() *statsapi.Summary {
				s := newSummary().memory("1Gi", "1Gi").nodeFs(fsInfo("10Gi", "5Gi", 100, 50)).pids(100, 10).build()
				s.Node.Fs.Time = metav1.NewTime(later)
				s.Node.Rlimit.Time = metav1.NewTime(later.Add(time.Second))
				return s
			}(),
			want: Observations{
				SignalMemoryAvailable:  obsAt("1Gi", "2Gi", fixtureTime),
				SignalNodeFsAvailable:  obsAt("5Gi", "10Gi", later),
				SignalNodeFsInodesFree: obsAt("50", "100", later),
				SignalPIDAvailable:     obsAt("90", "100", later.Add(time.Second)),
			},
		},
		{
			name: "missing stats leave the signal absent",
			summary: func() *statsapi.Summary {
				s := newSummary().
					memory("1Gi", "1Gi").
					systemContainer(statsapi.SystemContainerPods, "1Gi", "1Gi").
					nodeFs(fsInfo("10Gi", "5Gi", 100, 50)).
					imageFs(fsInfo("20Gi", "15Gi", 200, 150)).
					containerFs(fsInfo("30Gi", "25Gi", 300, 250)).
					pids(100, 10).
					build()
				s.Node.Memory.WorkingSetBytes = nil            // no capacity: no memory.available
				s.Node.SystemContainers[0].Memory = nil        // "pods" without memory
				s.Node.Fs.Inodes = nil                         // nodefs bytes only
				s.Node.Runtime.ImageFs.AvailableBytes = nil    // imagefs inodes only
				s.Node.Runtime.ContainerFs.CapacityBytes = nil // containerfs inodes only
				s.Node.Rlimit.MaxPID = nil
				return s
			}(),
			want: Observations{
				SignalNodeFsAvailable:       obsOf("5Gi", "10Gi"),
				SignalImageFsInodesFree:     obsOf("150", "200"),
				SignalContainerFsInodesFree: obsOf("250", "300"),
			},
		},
		{
			name: "no runtime stats: no imagefs or containerfs",
			summary: newSummary().
				nodeFs(fsInfo("10Gi", "5Gi", 100, 50)).
				build(),
			want: Observations{
				SignalNodeFsAvailable:  obsOf("5Gi", "10Gi"),
				SignalNodeFsInodesFree: obsOf("50", "100"),
			},
		},
		{
			name: "allocatable comes only from the pods system container",
			summary: newSummary().
				systemContainer("kubelet", "1Gi", "1Gi").
				systemContainer("runtime", "1Gi", "1Gi").
				build(),
			want: Observations{},
		},
		{
			// The snapshot loader rejects such values; Observe must still not wrap
			// 2^64-1 into -1 (pressure) or 7Ei+7Ei into a negative capacity.
			name: "gauges beyond int64 saturate",
			summary: func() *statsapi.Summary {
				s := newSummary().memory("7Ei", "7Ei").nodeFs(fsInfo("1Gi", "1Gi", 100, 50)).build()
				s.Node.Fs.AvailableBytes = u64p(math.MaxUint64)
				s.Node.Fs.CapacityBytes = u64p(math.MaxUint64)
				s.Node.Fs.Inodes = u64p(math.MaxInt64 + 1)
				return s
			}(),
			want: Observations{
				SignalMemoryAvailable:  obsOf("7Ei", "9223372036854775807"),
				SignalNodeFsAvailable:  obsOf("9223372036854775807", "9223372036854775807"),
				SignalNodeFsInodesFree: obsOf("50", "9223372036854775807"),
			},
		},
		{
			name: "rlimit without running processes",
			summary: func() *statsapi.Summary {
				s := newSummary().pids(100, 1).build()
				s.Node.Rlimit.NumOfRunningProcesses = nil
				return s
			}(),
			want: Observations{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Observe(tc.summary)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Observe() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectLayout(t *testing.T) {
	t.Parallel()
	root := func() *statsapi.FsStats { return fsInfo("100Gi", "40Gi", 1000, 500) }
	images := func() *statsapi.FsStats { return fsInfo("200Gi", "150Gi", 2000, 1500) }
	layers := func() *statsapi.FsStats { return fsInfo("300Gi", "10Gi", 3000, 100) }
	tests := []struct {
		name    string
		summary *statsapi.Summary
		want    DiskLayout
	}{
		{name: "nil summary", summary: nil, want: NoImageFs},
		{name: "no runtime stats", summary: newSummary().nodeFs(root()).build(), want: NoImageFs},
		{name: "runtime without imagefs", summary: newSummary().nodeFs(root()).containerFs(layers()).build(), want: NoImageFs},
		{
			name:    "imagefs reports the root filesystem",
			summary: newSummary().nodeFs(root()).imageFs(root()).containerFs(root()).build(),
			want:    NoImageFs,
		},
		{
			name:    "dedicated imagefs without containerfs stats",
			summary: newSummary().nodeFs(root()).imageFs(images()).build(),
			want:    DedicatedImageFs,
		},
		{
			name:    "dedicated imagefs holding the writable layers",
			summary: newSummary().nodeFs(root()).imageFs(images()).containerFs(images()).build(),
			want:    DedicatedImageFs,
		},
		{
			name:    "split: images on imagefs, writable layers on nodefs",
			summary: newSummary().nodeFs(root()).imageFs(images()).containerFs(root()).build(),
			want:    SplitImageFs,
		},
		{
			name:    "split: writable layers on a third filesystem",
			summary: newSummary().nodeFs(root()).imageFs(images()).containerFs(layers()).build(),
			want:    SplitImageFs,
		},
		{
			name: "same capacity but different free space is a different filesystem",
			summary: newSummary().nodeFs(root()).
				imageFs(fsInfo("100Gi", "41Gi", 1000, 500)).build(),
			want: DedicatedImageFs,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, DetectLayout(tc.summary)); diff != "" {
				t.Errorf("DetectLayout() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiskLayoutString(t *testing.T) {
	t.Parallel()
	got := []string{NoImageFs.String(), DedicatedImageFs.String(), SplitImageFs.String(), DiskLayout(42).String()}
	want := []string{"no-imagefs", "dedicated-imagefs", "split-imagefs", "unknown"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DiskLayout.String() mismatch (-want +got):\n%s", diff)
	}
}

func TestWithContainerFsThresholds(t *testing.T) {
	t.Parallel()
	configured := func() []Threshold {
		return []Threshold{
			thrQ(SignalMemoryAvailable, "100Mi"),
			thrP(SignalNodeFsAvailable, 0.10),
			withMinReclaim(graced(thrP(SignalNodeFsAvailable, 0.15), time.Minute), Value{Quantity: qtyp("1Gi")}),
			thrP(SignalNodeFsInodesFree, 0.05),
			thrP(SignalImageFsAvailable, 0.15),
			graced(thrQ(SignalImageFsAvailable, "20Gi"), 2*time.Minute),
			thrP(SignalImageFsInodesFree, 0.05),
			// containerfs thresholds set by hand are replaced, never kept.
			thrQ(SignalContainerFsAvailable, "1Gi"),
			graced(thrQ(SignalContainerFsInodesFree, "1k"), time.Minute),
		}
	}
	base := []Threshold{
		thrQ(SignalMemoryAvailable, "100Mi"),
		thrP(SignalNodeFsAvailable, 0.10),
		withMinReclaim(graced(thrP(SignalNodeFsAvailable, 0.15), time.Minute), Value{Quantity: qtyp("1Gi")}),
		thrP(SignalNodeFsInodesFree, 0.05),
		thrP(SignalImageFsAvailable, 0.15),
		graced(thrQ(SignalImageFsAvailable, "20Gi"), 2*time.Minute),
		thrP(SignalImageFsInodesFree, 0.05),
	}
	fromNodeFs := append(append([]Threshold(nil), base...),
		thrP(SignalContainerFsAvailable, 0.10),
		withMinReclaim(graced(thrP(SignalContainerFsAvailable, 0.15), time.Minute), Value{Quantity: qtyp("1Gi")}),
		thrP(SignalContainerFsInodesFree, 0.05),
	)
	fromImageFs := append(append([]Threshold(nil), base...),
		thrP(SignalContainerFsAvailable, 0.15),
		graced(thrQ(SignalContainerFsAvailable, "20Gi"), 2*time.Minute),
		thrP(SignalContainerFsInodesFree, 0.05),
	)
	tests := []struct {
		name   string
		in     []Threshold
		layout DiskLayout
		want   []Threshold
	}{
		{name: "no imagefs: copies of nodefs", in: configured(), layout: NoImageFs, want: fromNodeFs},
		{name: "split imagefs: copies of nodefs", in: configured(), layout: SplitImageFs, want: fromNodeFs},
		{name: "dedicated imagefs: copies of imagefs", in: configured(), layout: DedicatedImageFs, want: fromImageFs},
		{
			name:   "nothing to copy drops hand-set containerfs thresholds",
			in:     []Threshold{thrQ(SignalContainerFsAvailable, "1Gi"), thrQ(SignalPIDAvailable, "100")},
			layout: NoImageFs,
			want:   []Threshold{thrQ(SignalPIDAvailable, "100")},
		},
		{
			name:   "dedicated imagefs without imagefs thresholds derives nothing",
			in:     []Threshold{thrP(SignalNodeFsAvailable, 0.10)},
			layout: DedicatedImageFs,
			want:   []Threshold{thrP(SignalNodeFsAvailable, 0.10)},
		},
		{name: "empty", in: nil, layout: SplitImageFs, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := append([]Threshold(nil), tc.in...)
			got := WithContainerFsThresholds(tc.in, tc.layout)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("WithContainerFsThresholds(%v) mismatch (-want +got):\n%s", tc.layout, diff)
			}
			if diff := cmp.Diff(before, tc.in, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}
