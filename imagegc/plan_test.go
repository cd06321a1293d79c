package imagegc

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rec builds a record first detected and last used the given durations before t0
// (never means the zero time).
func rec(size int64, detectedAgo, usedAgo time.Duration) *Record {
	r := &Record{Size: size}
	if detectedAgo != never {
		r.FirstDetected = t0.Add(-detectedAgo)
	}
	if usedAgo != never {
		r.LastUsed = t0.Add(-usedAgo)
	}
	return r
}

const never = time.Duration(math.MinInt64)

// plannedIDs flattens a plan for comparison.
type plannedIDs struct {
	Usage   int
	ToFree  int64
	Remove  []string // id/reason
	Kept    map[string]KeepReason
	Freed   int64
	WantErr bool
}

func flatten(p Plan, err error) plannedIDs {
	out := plannedIDs{Usage: p.UsagePercent, ToFree: p.BytesToFree, Freed: p.Freed, Kept: map[string]KeepReason{}, WantErr: err != nil}
	for _, r := range p.Remove {
		out.Remove = append(out.Remove, r.ID+"/"+string(r.Reason))
	}
	for _, k := range p.Kept {
		out.Kept[k.ID] = k.Reason
	}
	return out
}

func TestDecide(t *testing.T) {
	t.Parallel()
	pol := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
	withMax := pol
	withMax.MaxAge = time.Hour
	pinned := rec(100, time.Hour, never)
	pinned.Pinned = true
	// 1000-byte disk, 100 available: 90% used, free 200-100 = 100 bytes to get to 80%.
	full := FsStats{CapacityBytes: 1000, AvailableBytes: 100}
	tests := []struct {
		name    string
		records map[string]*Record
		inUse   InUse
		fs      FsStats
		p       Policy
		started time.Time
		want    plannedIDs
	}{
		{
			name: "below the high threshold nothing is removed",
			records: map[string]*Record{
				"a": rec(50, time.Hour, never),
			},
			fs: FsStats{CapacityBytes: 1000, AvailableBytes: 500}, p: pol,
			want: plannedIDs{Usage: 50, Kept: map[string]KeepReason{"a": KeepBelowThreshold}},
		},
		{
			name: "LRU order: least recently used first, ties by first detected, stop at target",
			records: map[string]*Record{
				"used-recently":   rec(60, 3*time.Hour, time.Minute),
				"used-long-ago":   rec(60, 3*time.Hour, 2*time.Hour),
				"never-used-new":  rec(60, time.Hour, never),
				"never-used-old":  rec(60, 2*time.Hour, never),
				"never-used-zero": {Size: 60}, // detected at the first pass: unknown time
			},
			fs: full, p: pol,
			want: plannedIDs{Usage: 90, ToFree: 100,
				Remove: []string{"never-used-zero/space", "never-used-old/space"},
				Kept: map[string]KeepReason{"never-used-new": KeepNotNeeded, "used-long-ago": KeepNotNeeded,
					"used-recently": KeepNotNeeded},
				Freed: 120},
		},
		{
			name: "in use, sandbox, pinned, too young and used at free time are kept",
			records: map[string]*Record{
				"running":  rec(500, time.Hour, 0),
				"pause":    rec(500, time.Hour, 0),
				"pinned":   pinned,
				"young":    rec(500, time.Minute, never),
				"future":   rec(500, time.Hour, -time.Second),
				"eligible": rec(30, time.Hour, never),
			},
			inUse: InUse{"running": KeepInUse, "pause": KeepSandbox},
			fs:    full, p: pol,
			want: plannedIDs{Usage: 90, ToFree: 100,
				Remove: []string{"eligible/space"},
				Kept: map[string]KeepReason{"running": KeepInUse, "pause": KeepSandbox, "pinned": KeepPinned,
					"young": KeepTooYoung, "future": KeepUsedAtFreeTime},
				Freed: 30},
		},
		{
			name: "exactly the minimum age is old enough",
			records: map[string]*Record{
				"edge": rec(200, 2*time.Minute, never),
			},
			fs: full, p: pol,
			want: plannedIDs{Usage: 90, ToFree: 100, Remove: []string{"edge/space"}, Kept: map[string]KeepReason{}, Freed: 200},
		},
		{
			name: "max age waits until GC has run longer than it",
			records: map[string]*Record{
				"old": rec(10, 5*time.Hour, 3*time.Hour),
			},
			fs: FsStats{CapacityBytes: 1000, AvailableBytes: 900}, p: withMax, started: t0.Add(-time.Hour),
			want: plannedIDs{Usage: 10, Kept: map[string]KeepReason{"old": KeepBelowThreshold}},
		},
		{
			// As in the kubelet, the age counts from the last use alone: a never-used
			// image has expired, even one detected less than the minimum age ago.
			name: "max age removes unused images regardless of usage; never-used images have expired",
			records: map[string]*Record{
				"old":          rec(10, 5*time.Hour, 3*time.Hour),
				"fresh":        rec(10, 5*time.Hour, 30*time.Minute),
				"never-old":    rec(10, 2*time.Hour, never),
				"never-fresh":  rec(10, 30*time.Minute, never),
				"never-young":  rec(10, time.Minute, never),
				"running-old":  rec(10, 5*time.Hour, 0),
				"pinned-never": pinned,
			},
			inUse: InUse{"running-old": KeepInUse},
			fs:    FsStats{CapacityBytes: 1000, AvailableBytes: 900}, p: withMax, started: t0.Add(-2 * time.Hour),
			want: plannedIDs{Usage: 10,
				Remove: []string{"never-old/age", "never-fresh/age", "never-young/age", "old/age"},
				Kept: map[string]KeepReason{"fresh": KeepBelowThreshold,
					"running-old": KeepInUse, "pinned-never": KeepPinned},
				Freed: 40},
		},
		{
			name: "age removals count towards the space target",
			records: map[string]*Record{
				"old":   rec(80, 5*time.Hour, 3*time.Hour),
				"spare": rec(80, 5*time.Hour, 10*time.Minute),
				"more":  rec(80, 5*time.Hour, 5*time.Minute),
			},
			fs: full, p: withMax, started: t0.Add(-2 * time.Hour),
			want: plannedIDs{Usage: 90, ToFree: 20,
				Remove: []string{"old/age", "spare/space"},
				Kept:   map[string]KeepReason{"more": KeepNotNeeded},
				Freed:  160},
		},
		{
			name:    "zero capacity is an error; age removals still planned",
			records: map[string]*Record{"a": rec(10, time.Hour, never)},
			fs:      FsStats{}, p: pol,
			want: plannedIDs{Usage: -1, Kept: map[string]KeepReason{}, WantErr: true},
		},
		{
			name:    "available above capacity is clamped",
			records: map[string]*Record{"a": rec(10, time.Hour, never)},
			fs:      FsStats{CapacityBytes: 100, AvailableBytes: 500}, p: Policy{HighThresholdPercent: 0, LowThresholdPercent: 0},
			want: plannedIDs{Usage: 0, ToFree: 0, Kept: map[string]KeepReason{"a": KeepNotNeeded}},
		},
		{
			name: "not enough eligible images: everything eligible goes",
			records: map[string]*Record{
				"a": rec(10, time.Hour, never),
				"b": rec(20, time.Hour, time.Minute*30),
			},
			fs: full, p: pol,
			want: plannedIDs{Usage: 90, ToFree: 100, Remove: []string{"a/space", "b/space"}, Kept: map[string]KeepReason{}, Freed: 30},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started := tc.started
			if started.IsZero() {
				started = t0.Add(-24 * time.Hour)
			}
			pl, err := Decide(tc.records, tc.inUse, tc.fs, tc.p, started, t0)
			if tc.want.WantErr && !errors.Is(err, ErrInvalidCapacity) {
				t.Fatalf("Decide error = %v, want ErrInvalidCapacity", err)
			}
			if diff := cmp.Diff(tc.want, flatten(pl, err)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnusedSteps(t *testing.T) {
	t.Parallel()
	records := map[string]*Record{
		"b":       rec(20, time.Hour, 10*time.Minute),
		"a":       rec(10, time.Hour, 20*time.Minute),
		"young":   rec(10, time.Second, never),
		"running": rec(10, time.Hour, 0),
	}
	got := flatten(unusedSteps(records, InUse{"running": KeepInUse}, Policy{HighThresholdPercent: 100, MinAge: time.Minute}, t0).plan(), nil)
	want := plannedIDs{Usage: -1, Remove: []string{"a/space", "b/space"},
		Kept: map[string]KeepReason{"young": KeepTooYoung, "running": KeepInUse}, Freed: 30}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unusedSteps (-want +got):\n%s", diff)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fs         FsStats
		high, low  int
		pct        int
		toFree     int64
		invalidCap bool
	}{
		{FsStats{1000, 150}, 85, 80, 85, 50, false}, // exactly at the high threshold
		{FsStats{1000, 151}, 85, 80, 85, 49, false}, // integer division rounds usage up
		{FsStats{1000, 160}, 85, 80, 84, 0, false},
		{FsStats{1000, 0}, 85, 80, 100, 200, false},
		{FsStats{0, 0}, 85, 80, -1, 0, true},
		{FsStats{1000, -5}, 85, 80, 100, 200, false},
		{FsStats{math.MaxInt64 / 200, 0}, 100, 0, 100, math.MaxInt64 / 200, false},
		// Exabyte filesystems: available*100 and capacity*(100-low) exceed an int64.
		{FsStats{math.MaxInt64, 0}, 85, 80, 100, 1844674407370955161, false},
		{FsStats{math.MaxInt64, math.MaxInt64 / 100}, 85, 80, 100, 1844674407370955161 - math.MaxInt64/100, false},
		{FsStats{math.MaxInt64, math.MaxInt64 - 1}, 85, 80, 1, 0, false},
		{FsStats{1 << 62, 1 << 60}, 85, 80, 75, 0, false},
		{FsStats{1 << 62, 1 << 59}, 85, 80, 88, 1<<62/5 - 1<<59, false},
		{FsStats{1000, 0}, 85, -10, 100, 1000, false}, // invalid low threshold clamped to 0
	}
	for _, tc := range tests {
		pct, toFree, err := usage(tc.fs, Policy{HighThresholdPercent: tc.high, LowThresholdPercent: tc.low})
		if pct != tc.pct || toFree != tc.toFree || errors.Is(err, ErrInvalidCapacity) != tc.invalidCap {
			t.Errorf("usage(%+v, %d/%d) = %d, %d, %v; want %d, %d, invalid=%v", tc.fs, tc.high, tc.low, pct, toFree, err, tc.pct, tc.toFree, tc.invalidCap)
		}
	}
}
