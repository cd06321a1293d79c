package simulate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/eviction"
)

// What a removed pod (writable layer 100, logs 10) and a removed image (1000)
// give back, per layout: each to the filesystem that holds it, seen in every role
// the layout puts on that filesystem, and by image GC (CRI ImageFsInfo) when that
// is the image filesystem.
func TestGiveBackFollowsLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		layout eviction.DiskLayout
		// available bytes after: Summary node fs, image fs, container fs; CRI image fs
		want [4]uint64
	}{
		{"no imagefs", eviction.NoImageFs, [4]uint64{1110, 1110, 1110, 1110}},
		{"dedicated", eviction.DedicatedImageFs, [4]uint64{10, 1100, 1100, 1100}},
		{"split", eviction.SplitImageFs, [4]uint64{110, 1000, 110, 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := func() *statsapi.FsStats {
				return &statsapi.FsStats{AvailableBytes: ptr(uint64(0)), CapacityBytes: ptr(uint64(1 << 20)), UsedBytes: ptr(uint64(5000))}
			}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: "p", UID: "u"}}
			n := &node{layout: tc.layout, emit: func(Event) {}, pods: []*v1.Pod{pod}, imageFs: &ImageFs{CapacityBytes: 1 << 20}, summary: &statsapi.Summary{
				Node: statsapi.NodeStats{Fs: fs(), Runtime: &statsapi.RuntimeStats{ImageFs: fs(), ContainerFs: fs()}},
				Pods: []statsapi.PodStats{{
					PodRef: statsapi.PodReference{Namespace: "d", Name: "p", UID: "u"},
					Containers: []statsapi.ContainerStats{{Name: "c",
						Rootfs: &statsapi.FsStats{UsedBytes: ptr(uint64(100))}, Logs: &statsapi.FsStats{UsedBytes: ptr(uint64(10))}}},
				}},
			}}
			n.removePod(pod)
			n.freeImageBytes(1000)
			rt := n.summary.Node.Runtime
			got := [4]uint64{*n.summary.Node.Fs.AvailableBytes, *rt.ImageFs.AvailableBytes, *rt.ContainerFs.AvailableBytes, n.imageFs.AvailableBytes}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("available node, image, container fs, CRI image fs (-want +got):\n%s", diff)
			}
		})
	}
}
