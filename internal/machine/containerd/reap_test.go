package containerd

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStuckInits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	seen := map[initKey]time.Time{
		{1, 10}: now,                        // just seen
		{2, 20}: now.Add(-59 * time.Second), // not yet
		{3, 30}: now.Add(-time.Minute),      // exactly stuckAfter
		{4, 40}: now.Add(-10 * time.Minute), // long stuck
	}
	got := stuckInits(seen, now, time.Minute)
	slices.SortFunc(got, func(a, b initKey) int { return a.pid - b.pid })
	if diff := cmp.Diff([]initKey{{3, 30}, {4, 40}}, got, cmp.AllowUnexported(initKey{})); diff != "" {
		t.Errorf("stuck (-want +got):\n%s", diff)
	}
}
