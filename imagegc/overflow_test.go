package imagegc

import (
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestDecideSizesNearTheBound: many images just below 2^63 bytes, removed
// for age and for space, sum to a saturated total, never a wrapped negative
// one; the space target still counts the age removals.
func TestDecideSizesNearTheBound(t *testing.T) {
	t.Parallel()
	const big = math.MaxInt64 - 10
	records := map[string]*Record{}
	for i := range 4 {
		records[fmt.Sprintf("old%d", i)] = rec(big, 48*time.Hour, 48*time.Hour) // beyond the maximum age
		records[fmt.Sprintf("new%d", i)] = rec(big, time.Hour, time.Hour)
	}
	pol := Policy{HighThresholdPercent: 50, LowThresholdPercent: 40, MinAge: time.Minute, MaxAge: 24 * time.Hour}
	fs := FsStats{CapacityBytes: math.MaxInt64, AvailableBytes: 0}
	pl, err := Decide(records, InUse{}, fs, pol, t0.Add(-72*time.Hour), t0)
	if err != nil {
		t.Fatal(err)
	}
	got := flatten(pl, err)
	want := plannedIDs{
		Usage:  100,
		ToFree: 0, // the age step alone frees more than the target
		Remove: []string{"old0/age", "old1/age", "old2/age", "old3/age"},
		Kept: map[string]KeepReason{
			"new0": KeepNotNeeded, "new1": KeepNotNeeded, "new2": KeepNotNeeded, "new3": KeepNotNeeded,
		},
		Freed: math.MaxInt64,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decide (-want +got):\n%s", diff)
	}
	if got := pl.FreedBy(ReasonAge); got != math.MaxInt64 {
		t.Errorf("FreedBy(age) = %d, want MaxInt64", got)
	}

	unused := unusedSteps(records, InUse{}, pol, t0).plan()
	if unused.Freed != math.MaxInt64 || unused.FreedBy(ReasonSpace) != math.MaxInt64 || len(unused.Remove) != 8 {
		t.Errorf("unused pass: freed %d (space %d) by %d removals, want MaxInt64 by 8", unused.Freed, unused.FreedBy(ReasonSpace), len(unused.Remove))
	}
}

// TestDetectSizeBeyondInt64: a runtime reporting a size of 2^63 or more gets
// a record of math.MaxInt64, not a negative size.
func TestDetectSizeBeyondInt64(t *testing.T) {
	t.Parallel()
	records := map[string]*Record{}
	Detect(records, []*runtimeapi.Image{{Id: "a", Size: math.MaxUint64}, {Id: "b", Size: 1 << 63}}, InUse{}, t0, t0)
	for id, r := range records {
		if r.Size != math.MaxInt64 {
			t.Errorf("%s: size %d, want MaxInt64", id, r.Size)
		}
	}
}

// TestFreeSpaceSizesNearTheBound: removing images of nearly 2^63 bytes, the
// freed total saturates instead of wrapping negative, which would remove
// more images than asked; DeleteUnusedImages still removes every one.
func TestFreeSpaceSizesNearTheBound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const big = math.MaxInt64 - 10
		f := newFixture(t, Policy{HighThresholdPercent: 100, LowThresholdPercent: 80, MinAge: time.Minute},
			map[string]uint64{"pause": 1, "a": big, "b": big, "c": big, "d": big})
		f.m.detectOnce(ctx, time.Now())
		time.Sleep(2 * time.Minute)
		freed, err := f.m.FreeSpace(ctx, math.MaxInt64-5, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if freed != math.MaxInt64 {
			t.Errorf("FreeSpace freed %d, want MaxInt64 (saturated)", freed)
		}
		if got := len(f.remaining()); got != 3 { // pause and two of a-d
			t.Errorf("remaining %v, want pause and two images", f.remaining())
		}
		if err := f.m.DeleteUnusedImages(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining after DeleteUnusedImages (-want +got):\n%s", diff)
		}
	})
}
