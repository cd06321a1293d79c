package quantity

import (
	"errors"
	"math"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr error
	}{
		{in: "100Mi", want: 100 << 20},
		{in: "1e3", want: 1000},
		{in: "1E6", want: 1_000_000},
		{in: "2e+002", want: 200},
		{in: "1Ei", want: 1 << 60},
		{in: "1e-999999999", wantErr: ErrExponent},
		{in: "1e99999", wantErr: ErrExponent},
		{in: "1e0000000003", want: 1000}, // leading zeros do not count
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tc.in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want %v", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if q.Value() != tc.want {
				t.Errorf("Parse(%q) = %d, want %d", tc.in, q.Value(), tc.want)
			}
		})
	}
	if _, err := Parse("12x"); err == nil {
		t.Error("Parse(12x) succeeded")
	}
}

func TestFitsInt64(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     bool
	}{
		{name: "memory", in: "7Ei", want: true},
		{name: "memory", in: "9223372036854775806", want: true},
		{name: "memory", in: "9223372036854775807", want: false}, // what 8Ei and above clamp to
		{name: "memory", in: "8Ei", want: false},
		{name: "memory", in: "16Ei", want: false},
		{name: "memory", in: "1e30", want: false},
		{name: "memory", in: "-1e30", want: true}, // the sign is checked apart
		{name: "cpu", in: "9223372036854775", want: true},
		{name: "cpu", in: "9223372036854775806m", want: true},
		{name: "cpu", in: "9223372036854775807m", want: false},
		{name: "cpu", in: "1e16", want: false},
		{name: "nvidia.com/gpu", in: "1e16", want: true},
	} {
		t.Run(tc.name+"="+tc.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := FitsInt64(tc.name, q); got != tc.want {
				t.Errorf("FitsInt64(%q, %s) = %v, want %v", tc.name, tc.in, got, tc.want)
			}
		})
	}
}

func TestSaturation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64 - 1, 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{1 << 62, 1 << 62, math.MaxInt64},
	} {
		if got := AddSat(tc.a, tc.b); got != tc.want {
			t.Errorf("AddSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for u, want := range map[uint64]int64{0: 0, math.MaxInt64: math.MaxInt64, math.MaxInt64 + 1: math.MaxInt64, math.MaxUint64: math.MaxInt64} {
		if got := Int64Sat(u); got != want {
			t.Errorf("Int64Sat(%d) = %d, want %d", u, got, want)
		}
	}
}
