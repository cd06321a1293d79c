package eviction

import (
	"errors"
	"testing"
)

// FuzzParseThresholds feeds ParseThresholds one entry per map. An empty signal
// leaves that map empty. Whatever the input, ParseThresholds must not panic, must
// report failures as a *FieldError, and must only return thresholds the eviction
// manager can act on.
func FuzzParseThresholds(f *testing.F) {
	f.Add("memory.available", "100Mi", "", "", "", "", "", "", true)
	f.Add("nodefs.available", "10%", "nodefs.available", "15%", "nodefs.available", "1m30s", "nodefs.available", "500Mi", false)
	f.Add("memory.available", "0.0%", "memory.available", "1Gi", "memory.available", "0s", "memory.available", "5%", true)
	f.Add("containerfs.available", "10%", "", "", "", "", "", "", false)
	f.Add("pid.available", "1e-50%", "imagefs.inodesFree", "100%", "imagefs.inodesFree", "-1s", "pid.available", "0", true)
	f.Fuzz(func(t *testing.T, hardSig, hardVal, softSig, softVal, graceSig, graceVal, minSig, minVal string, pods bool) {
		entry := func(sig, val string) map[string]string {
			if sig == "" {
				return nil
			}
			return map[string]string{sig: val}
		}
		cfg := ThresholdConfig{
			Hard:            entry(hardSig, hardVal),
			Soft:            entry(softSig, softVal),
			SoftGracePeriod: entry(graceSig, graceVal),
			MinimumReclaim:  entry(minSig, minVal),
		}
		if pods {
			cfg.EnforceNodeAllocatable = []string{"pods"}
		}
		ts, err := ParseThresholds(cfg)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("error %v (%T) is not a *FieldError naming a field", err, err)
			}
			if ts != nil {
				t.Fatalf("thresholds %v returned with error %v", ts, err)
			}
			return
		}
		// Hard, soft and an allocatable twin for each; a soft threshold with a zero
		// grace period counts as hard and gets a twin too.
		if len(ts) > 4 {
			t.Fatalf("%d thresholds from single-entry maps: %v", len(ts), ts)
		}
		for i, th := range ts {
			if _, ok := th.Signal.Resource(); !ok {
				t.Errorf("threshold %d: unknown signal %q", i, th.Signal)
			}
			if th.Operator != OpLessThan {
				t.Errorf("threshold %d: operator %q", i, th.Operator)
			}
			if !validValue(th.Value, false) {
				t.Errorf("threshold %d (%s): invalid value %+v", i, th.Signal, th.Value)
			}
			if th.MinReclaim != nil && !validValue(*th.MinReclaim, true) {
				t.Errorf("threshold %d (%s): invalid minimum reclaim %+v", i, th.Signal, *th.MinReclaim)
			}
			if th.GracePeriod < 0 {
				t.Errorf("threshold %d (%s): negative grace period %v", i, th.Signal, th.GracePeriod)
			}
			if i > 0 && signalIndex(ts[i-1].Signal) > signalIndex(th.Signal) {
				t.Errorf("thresholds out of order: %s before %s", ts[i-1].Signal, th.Signal)
			}
		}
	})
}

// validValue reports whether v holds exactly one of a quantity (positive, or
// non-negative when zeroOK) and a percentage in (0, 1].
func validValue(v Value, zeroOK bool) bool {
	if v.Quantity != nil {
		if v.Percentage != 0 {
			return false
		}
		return v.Quantity.Sign() > 0 || zeroOK && v.Quantity.Sign() == 0
	}
	return v.Percentage > 0 && v.Percentage <= 1
}
