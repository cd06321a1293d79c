package imagegc

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// ErrInvalidCapacity: the image filesystem reported a capacity of 0.
var ErrInvalidCapacity = errors.New("invalid capacity 0 on image filesystem")

// Reason says why an image is removed; it is the label of
// kubelet_image_garbage_collected_total.
type Reason string

const (
	// ReasonAge: not used for longer than the policy's maximum age.
	ReasonAge Reason = "age"
	// ReasonSpace: removed to bring image filesystem usage down (periodic GC
	// above the high threshold, or eviction's reclaim).
	ReasonSpace Reason = "space"
)

// KeepReason says why an image is not removed.
type KeepReason string

const (
	KeepInUse          KeepReason = "in use"            // a container uses it (running or exited)
	KeepSandbox        KeepReason = "sandbox"           // it is the pod sandbox (pause) image
	KeepPinned         KeepReason = "pinned"            // the runtime reports it pinned
	KeepTooYoung       KeepReason = "too young"         // first detected less than the minimum age ago
	KeepUsedAtFreeTime KeepReason = "used at free time" // last used at or after the free time
	KeepNotNeeded      KeepReason = "not needed"        // eligible, but enough space was freed before it
	KeepBelowThreshold KeepReason = "below threshold"   // eligible, but usage is below the high threshold
)

// FsStats is the image filesystem's size.
type FsStats struct {
	CapacityBytes  int64
	AvailableBytes int64
}

// Candidate is an image GC may remove.
type Candidate struct {
	ID            string
	Tags          []string
	Size          int64
	FirstDetected time.Time
	LastUsed      time.Time
}

// Removal is one image a Plan removes, in order.
type Removal struct {
	Candidate
	Reason Reason
}

// Kept is one image a Plan keeps.
type Kept struct {
	ID     string
	Tags   []string
	Size   int64
	Reason KeepReason
}

// Plan is the outcome of one GC decision, assuming every removal succeeds.
type Plan struct {
	// UsagePercent is the image filesystem usage before GC; -1 if not computed.
	UsagePercent int
	// BytesToFree is what space-based GC wants to free; 0 below the high threshold.
	BytesToFree int64
	// Remove lists the images removed, age removals first, then space removals
	// in least-recently-used order.
	Remove []Removal
	// Kept lists the other images, sorted by ID.
	Kept []Kept
	// Freed is the sum of the removed images' sizes, saturated at math.MaxInt64.
	Freed int64
}

// steps is a GC decision before execution: the Manager walks it with real
// removals, Decide turns it into a Plan.
type steps struct {
	usage   int
	over    bool // usage is at or above the high threshold
	toFree  int64
	byAge   []Candidate // removed regardless of usage
	bySpace []Candidate // eligible for space, in order; walked until toFree is freed
	kept    []Kept      // never eligible
}

// unixNano is t in nanoseconds for ordering; the zero time ("unknown, in the
// past" or "never") sorts first.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// candidates splits records into unused, unpinned candidates in LRU order
// (least recently used first, then earliest detected, then by ID so equal
// records give a stable order) and the images kept because they are in use,
// the sandbox image or pinned.
func candidates(records map[string]*Record, inUse InUse) ([]Candidate, []Kept) {
	// Sort small pointer-free keys rather than whole candidates: no write
	// barriers while the sort moves them.
	type lruKey struct {
		last, first int64
		i           int // index into cands
	}
	keys := make([]lruKey, 0, len(records))
	unsorted := make([]Candidate, 0, len(records))
	var kept []Kept
	for id, r := range records {
		if why, ok := inUse.reason(id, r); ok {
			kept = append(kept, Kept{ID: id, Tags: r.Tags, Size: r.Size, Reason: why})
			continue
		}
		if r.Pinned {
			kept = append(kept, Kept{ID: id, Tags: r.Tags, Size: r.Size, Reason: KeepPinned})
			continue
		}
		keys = append(keys, lruKey{last: unixNano(r.LastUsed), first: unixNano(r.FirstDetected), i: len(unsorted)})
		unsorted = append(unsorted, Candidate{ID: id, Tags: r.Tags, Size: r.Size, FirstDetected: r.FirstDetected, LastUsed: r.LastUsed})
	}
	slices.SortFunc(keys, func(a, b lruKey) int {
		if n := cmp.Compare(a.last, b.last); n != 0 {
			return n
		}
		if n := cmp.Compare(a.first, b.first); n != 0 {
			return n
		}
		return cmp.Compare(unsorted[a.i].ID, unsorted[b.i].ID)
	})
	cands := make([]Candidate, len(keys))
	for i, k := range keys {
		cands[i] = unsorted[k.i]
	}
	return cands, kept
}

// expiredByAge splits candidates into those not used for longer than maxAge and
// the rest. Nothing expires while maxAge is 0 or GC has been running for no more
// than maxAge (started is when the Manager started). As in the kubelet, the age
// counts from the last use only: an image never used has expired, however
// recently it was detected (the minimum age does not protect it here).
func expiredByAge(cands []Candidate, maxAge time.Duration, started, now time.Time) (expired, rest []Candidate) {
	if maxAge <= 0 || now.Sub(started) <= maxAge {
		return nil, cands
	}
	for _, c := range cands {
		if c.LastUsed.IsZero() || now.Sub(c.LastUsed) > maxAge {
			expired = append(expired, c)
		} else {
			rest = append(rest, c)
		}
	}
	return expired, rest
}

// eligibleForSpace filters LRU-ordered candidates for a removal at freeTime:
// images used at or after freeTime and images first detected less than minAge
// before it are kept.
func eligibleForSpace(cands []Candidate, freeTime time.Time, minAge time.Duration) (eligible []Candidate, kept []Kept) {
	eligible = make([]Candidate, 0, len(cands))
	for _, c := range cands {
		switch {
		case !c.LastUsed.Before(freeTime):
			kept = append(kept, Kept{ID: c.ID, Tags: c.Tags, Size: c.Size, Reason: KeepUsedAtFreeTime})
		case freeTime.Sub(c.FirstDetected) < minAge:
			kept = append(kept, Kept{ID: c.ID, Tags: c.Tags, Size: c.Size, Reason: KeepTooYoung})
		default:
			eligible = append(eligible, c)
		}
	}
	return eligible, kept
}

// usage returns the usage percent and the bytes to free to reach the low
// threshold (0 below the high threshold), as the kubelet computes them:
// 100 - available*100/capacity and capacity*(100-low)/100 - available, in
// integer arithmetic. The products are taken in 128 bits, so they do not
// overflow for filesystems of exabytes, where available*100 exceeds an int64.
// Available above capacity is clamped, and so is a low threshold outside
// [0, 100] (Policy.Validate rejects one).
func usage(fs FsStats, p Policy) (percent int, toFree int64, err error) {
	capacity, available := fs.CapacityBytes, fs.AvailableBytes
	if capacity <= 0 {
		return -1, 0, ErrInvalidCapacity
	}
	available = max(min(available, capacity), 0)
	percent = 100 - int(mulDiv(available, 100, capacity))
	if percent >= p.HighThresholdPercent {
		keep := int64(100 - min(max(p.LowThresholdPercent, 0), 100))
		toFree = mulDiv(capacity, keep, 100) - available
	}
	return percent, max(toFree, 0), nil
}

// FreedBy returns the sum of the sizes of the removals for reason r,
// saturated at math.MaxInt64.
func (p Plan) FreedBy(r Reason) int64 {
	var sum int64
	for _, rm := range p.Remove {
		if rm.Reason == r {
			sum = quantity.AddSat(sum, rm.Size)
		}
	}
	return sum
}

// mulDiv returns a*b/c rounded down, for a, b >= 0 and c > 0 whose quotient fits
// an int64, as it does when a <= c or b <= c. The product is exact in 128 bits.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c)) // hi < c because the quotient fits 64 bits
	return int64(q)
}

// gcSteps decides one periodic GC pass at now. The age step comes first; the
// bytes it frees count towards the space target, since fs was measured before it.
func gcSteps(records map[string]*Record, inUse InUse, fs FsStats, p Policy, started, now time.Time) (steps, error) {
	cands, kept := candidates(records, inUse)
	byAge, rest := expiredByAge(cands, p.MaxAge, started, now)
	eligible, young := eligibleForSpace(rest, now, p.MinAge)
	st := steps{usage: -1, byAge: byAge, bySpace: eligible, kept: append(kept, young...)}
	pct, toFree, err := usage(fs, p)
	if err != nil {
		return st, err
	}
	st.usage = pct
	st.over = pct >= p.HighThresholdPercent
	for _, c := range byAge {
		toFree = max(toFree-c.Size, 0) // kept in [0, MaxInt64], so it cannot wrap
	}
	st.toFree = max(toFree, 0)
	return st, nil
}

// unusedSteps decides an eviction reclaim pass at now: every eligible image, no target.
func unusedSteps(records map[string]*Record, inUse InUse, p Policy, now time.Time) steps {
	cands, kept := candidates(records, inUse)
	eligible, young := eligibleForSpace(cands, now, p.MinAge)
	return steps{usage: -1, over: true, toFree: math.MaxInt64, bySpace: eligible, kept: append(kept, young...)}
}

// plan simulates st with every removal succeeding.
func (st steps) plan() Plan {
	pl := Plan{UsagePercent: st.usage, BytesToFree: st.toFree, Kept: make([]Kept, 0, len(st.kept)+len(st.bySpace))}
	pl.Kept = append(pl.Kept, st.kept...)
	for _, c := range st.byAge {
		pl.Remove = append(pl.Remove, Removal{Candidate: c, Reason: ReasonAge})
		pl.Freed = quantity.AddSat(pl.Freed, c.Size)
	}
	var freed int64
	for _, c := range st.bySpace {
		// toFree of math.MaxInt64 means every eligible image, even when the
		// saturated sum of their sizes reaches it.
		if st.toFree <= 0 || st.toFree != math.MaxInt64 && freed >= st.toFree {
			why := KeepNotNeeded
			if !st.over {
				why = KeepBelowThreshold
			}
			pl.Kept = append(pl.Kept, Kept{ID: c.ID, Tags: c.Tags, Size: c.Size, Reason: why})
			continue
		}
		pl.Remove = append(pl.Remove, Removal{Candidate: c, Reason: ReasonSpace})
		freed = quantity.AddSat(freed, c.Size)
	}
	pl.Freed = quantity.AddSat(pl.Freed, freed)
	if st.toFree == math.MaxInt64 {
		pl.BytesToFree = 0
	}
	slices.SortFunc(pl.Kept, func(a, b Kept) int { return cmp.Compare(a.ID, b.ID) })
	return pl
}

// Decide plans one periodic GC pass at now over records, without removing
// anything: what the Manager's GarbageCollect would remove if every removal
// succeeded. started is when GC started (the maximum age applies only after
// GC has run for longer than it). A zero capacity gives ErrInvalidCapacity and
// a plan with the age removals only.
func Decide(records map[string]*Record, inUse InUse, fs FsStats, p Policy, started, now time.Time) (Plan, error) {
	st, err := gcSteps(records, inUse, fs, p, started, now)
	if err != nil {
		st.bySpace = nil
		pl := st.plan()
		pl.UsagePercent = -1
		return pl, fmt.Errorf("image filesystem: %w", err)
	}
	return st.plan(), nil
}
