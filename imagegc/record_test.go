package imagegc

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func img(id string, size uint64, tags ...string) *runtimeapi.Image {
	return &runtimeapi.Image{Id: id, Size: size, RepoTags: tags}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	pinned := img("sha256:p", 5, "pause:1")
	pinned.Pinned = true
	tests := []struct {
		name       string
		records    map[string]*Record
		images     []*runtimeapi.Image
		inUse      InUse
		detectTime time.Time
		now        time.Time
		want       map[string]*Record
	}{
		{
			name:   "first detection records unknown time in the past",
			images: []*runtimeapi.Image{img("sha256:a", 10, "a:1"), pinned},
			inUse:  InUse{"sha256:a": KeepInUse},
			now:    t0,
			want: map[string]*Record{
				"sha256:a": {LastUsed: t0, Size: 10, Tags: []string{"a:1"}},
				"sha256:p": {Size: 5, Pinned: true, Tags: []string{"pause:1"}},
			},
		},
		{
			name: "new image gets the detection time, old keeps its own, vanished dropped",
			records: map[string]*Record{
				"sha256:a":    {FirstDetected: t0.Add(-time.Hour), LastUsed: t0.Add(-time.Minute), Size: 10},
				"sha256:gone": {Size: 99},
			},
			images:     []*runtimeapi.Image{img("sha256:a", 11), img("sha256:b", 20)},
			detectTime: t0, now: t0.Add(time.Second),
			want: map[string]*Record{
				"sha256:a": {FirstDetected: t0.Add(-time.Hour), LastUsed: t0.Add(-time.Minute), Size: 11},
				"sha256:b": {FirstDetected: t0, Size: 20},
			},
		},
		{
			name:    "in use by tag",
			records: map[string]*Record{},
			images:  []*runtimeapi.Image{img("sha256:s", 1, "registry.k8s.io/pause:3.10")},
			inUse:   InUse{"registry.k8s.io/pause:3.10": KeepSandbox},
			now:     t0,
			want:    map[string]*Record{"sha256:s": {LastUsed: t0, Size: 1, Tags: []string{"registry.k8s.io/pause:3.10"}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recs := tc.records
			if recs == nil {
				recs = map[string]*Record{}
			}
			Detect(recs, tc.images, tc.inUse, tc.detectTime, tc.now)
			if diff := cmp.Diff(tc.want, recs); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewInUse(t *testing.T) {
	t.Parallel()
	got := NewInUse([]string{"sha256:pause", "", "pause:3.10"}, []string{"sha256:a", "", "sha256:pause", "sha256:a", "nginx:1"})
	want := InUse{"sha256:pause": KeepSandbox, "pause:3.10": KeepSandbox, "sha256:a": KeepInUse, "nginx:1": KeepInUse}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewInUse (-want +got):\n%s", diff)
	}
}
