// Package quantity parses Kubernetes quantities from untrusted input.
//
// resource.ParseQuantity takes time exponential in the exponent's size: a value
// such as "1e-999999999" keeps it busy for minutes (kubernetes/kubernetes PR
// #141306 fixes it upstream). Parse rejects such exponents first, so a malformed
// manifest, snapshot or configuration file fails fast with a clear error.
package quantity

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// maxExponentDigits bounds the digits of a decimal exponent ("1e18" has two). No
// quantity that fits an int64 or a useful fraction needs more than two.
const maxExponentDigits = 3

// ErrExponent is returned for a quantity whose exponent has too many digits.
var ErrExponent = errors.New("exponent out of range")

// Parse parses s as resource.ParseQuantity does, after rejecting exponents of
// more than three digits.
func Parse(s string) (resource.Quantity, error) {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp := strings.TrimLeft(s[i+1:], "+-")
		if len(strings.TrimLeft(exp, "0")) > maxExponentDigits {
			return resource.Quantity{}, ErrExponent
		}
	}
	return resource.ParseQuantity(s)
}
