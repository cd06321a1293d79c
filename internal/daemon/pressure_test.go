package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/internal/machine/pressure"
)

func TestPressureWatches(t *testing.T) {
	t.Parallel()
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	hard := func(s eviction.Signal, v eviction.Value) eviction.Threshold {
		return eviction.Threshold{Signal: s, Operator: eviction.OpLessThan, Value: v}
	}
	statfs := func(path string, st *unix.Statfs_t) error {
		if path != "/root" {
			return errors.New("no such directory")
		}
		st.Blocks, st.Bsize = 1000, 1024
		return nil
	}
	for _, tc := range []struct {
		name       string
		thresholds []eviction.Threshold
		kubepods   v1.ResourceList
		want       pressure.Config
	}{
		{
			name: "kubelet defaults",
			thresholds: []eviction.Threshold{
				hard(eviction.SignalMemoryAvailable, eviction.Value{Quantity: q("100Mi")}),
				hard(eviction.SignalNodeFsAvailable, eviction.Value{Percentage: 0.1}),
				hard(eviction.SignalImageFsAvailable, eviction.Value{Percentage: 0.15}), // no /root/containerd: left out
				hard(eviction.SignalNodeFsInodesFree, eviction.Value{Percentage: 0.05}),
			},
			want: pressure.Config{PSITrigger: pressure.DefaultPSITrigger,
				Memory: []pressure.MemoryWatch{{Cgroup: "/", Usage: 1<<30 - 100<<20}},
				Disk:   []pressure.DiskWatch{{Path: "/root", Available: 102400}}},
		},
		{
			name: "allocatable and soft",
			thresholds: []eviction.Threshold{
				hard(eviction.SignalAllocatableMemoryAvailable, eviction.Value{Quantity: q("300Mi")}),
				{Signal: eviction.SignalMemoryAvailable, Value: eviction.Value{Quantity: q("500Mi")}, GracePeriod: time.Minute},
			},
			kubepods: v1.ResourceList{v1.ResourceMemory: *q("800Mi")},
			want: pressure.Config{PSITrigger: pressure.DefaultPSITrigger,
				Memory: []pressure.MemoryWatch{{Cgroup: "/nk/kubepods", Usage: 500 << 20}}},
		},
		{
			name:       "allocatable without a kubepods limit",
			thresholds: []eviction.Threshold{hard(eviction.SignalAllocatableMemoryAvailable, eviction.Value{Quantity: q("300Mi")})},
			want:       pressure.Config{PSITrigger: pressure.DefaultPSITrigger},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := pressureWatches(tc.thresholds, 1<<30, "/nk/kubepods", tc.kubepods, "/root", statfs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestKubepodsLimits: the pods' cgroup gets capacity less the reservations,
// not less the hard eviction thresholds (as the kubelet's node-allocatable
// enforcement).
func TestKubepodsLimits(t *testing.T) {
	capacity := v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourceCPU: resource.MustParse("4")}
	kube := v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	system := v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi"), v1.ResourceCPU: resource.MustParse("500m")}
	got := kubepodsLimits(capacity, kube, system)
	if m := got[v1.ResourceMemory]; m.Cmp(resource.MustParse("6656Mi")) != 0 {
		t.Errorf("memory limit %s, want 6656Mi (8Gi - 1Gi - 512Mi)", m.String())
	}
	if c := got[v1.ResourceCPU]; c.Cmp(resource.MustParse("3500m")) != 0 {
		t.Errorf("cpu %s, want 3500m", c.String())
	}
}
