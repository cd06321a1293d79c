package quantity

import (
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

// maxMilli is math.MaxInt64 thousandths: the largest cpu quantity whose
// millicore value fits an int64.
var maxMilli = resource.NewScaledQuantity(math.MaxInt64, resource.Milli)

// FitsInt64 reports whether q, an amount of the resource named name, fits the
// int64 its consumers keep it in: millicores for "cpu", whole units (bytes,
// counts) otherwise. The parser clamps binary-suffixed values beyond the range
// (9Ei, 16Ei) to exactly math.MaxInt64, so that value does not fit either.
// Callers report a quantity that does not fit as "too large".
func FitsInt64(name string, q resource.Quantity) bool {
	if name == "cpu" {
		return q.Cmp(*maxMilli) < 0
	}
	return q.CmpInt64(math.MaxInt64) < 0
}

// AddSat returns a+b for non-negative a and b, saturating at math.MaxInt64:
// sums of requests and usages that each fit an int64 may not.
func AddSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Int64Sat converts a Summary counter to int64, saturating at math.MaxInt64.
func Int64Sat(u uint64) int64 { return int64(min(u, math.MaxInt64)) }
