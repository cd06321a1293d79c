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
