package eviction

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	quantities "github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// ThresholdConfig is the eviction part of a KubeletConfiguration, as written in the
// file: signal name to value strings.
type ThresholdConfig struct {
	Hard            map[string]string // evictionHard
	Soft            map[string]string // evictionSoft
	SoftGracePeriod map[string]string // evictionSoftGracePeriod
	MinimumReclaim  map[string]string // evictionMinimumReclaim
	// EnforceNodeAllocatable is enforceNodeAllocatable; when it holds "pods", every
	// hard memory.available threshold gets an allocatableMemory.available twin.
	EnforceNodeAllocatable []string
}

// FieldError is a configuration error that names the field and the offending value.
type FieldError struct {
	Field  string // e.g. evictionHard[memory.available]
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %q: %s", e.Field, e.Value, e.Reason)
}

// ParseThresholds turns the configuration maps into thresholds, ordered by signal
// (the order of Signals), hard before soft. Values "0%" and "100%" disable a signal,
// as in the kubelet. Every error is a *FieldError.
func ParseThresholds(c ThresholdConfig) ([]Threshold, error) {
	minReclaim, err := parseMinimumReclaims(c.MinimumReclaim)
	if err != nil {
		return nil, err
	}
	grace, err := parseGracePeriods(c.SoftGracePeriod)
	if err != nil {
		return nil, err
	}
	var out []Threshold
	hard, err := parseStatements("evictionHard", c.Hard)
	if err != nil {
		return nil, err
	}
	for _, t := range hard {
		t.MinReclaim = minReclaim[t.Signal]
		out = append(out, t)
	}
	soft, err := parseStatements("evictionSoft", c.Soft)
	if err != nil {
		return nil, err
	}
	for _, t := range soft {
		g, ok := grace[t.Signal]
		if !ok {
			return nil, &FieldError{
				Field:  "evictionSoft[" + string(t.Signal) + "]",
				Value:  c.Soft[string(t.Signal)],
				Reason: "soft threshold has no grace period in evictionSoftGracePeriod",
			}
		}
		t.GracePeriod = g
		t.MinReclaim = minReclaim[t.Signal]
		out = append(out, t)
	}
	for _, key := range c.EnforceNodeAllocatable {
		if key == "pods" {
			out = addAllocatableThresholds(out)
			break
		}
	}
	sortThresholds(out)
	return out, nil
}

// addAllocatableThresholds adds a hard allocatableMemory.available threshold for
// each hard memory.available one, unless the user configured that signal already.
func addAllocatableThresholds(ts []Threshold) []Threshold {
	for _, t := range ts {
		if t.Signal == SignalAllocatableMemoryAvailable && t.Hard() {
			return ts
		}
	}
	out := ts
	for _, t := range ts {
		if t.Signal == SignalMemoryAvailable && t.Hard() {
			twin := t
			twin.Signal = SignalAllocatableMemoryAvailable
			out = append(out, twin)
		}
	}
	return out
}

func signalIndex(s Signal) int {
	for i, x := range Signals {
		if x == s {
			return i
		}
	}
	return len(Signals)
}

func sortThresholds(ts []Threshold) {
	sort.SliceStable(ts, func(i, j int) bool {
		if a, b := signalIndex(ts[i].Signal), signalIndex(ts[j].Signal); a != b {
			return a < b
		}
		return ts[i].Hard() && !ts[j].Hard()
	})
}

// checkSignal validates a configured signal name. containerfs signals are
// accepted, as the kubelet accepts them, but WithContainerFsThresholds replaces
// them with the thresholds derived from nodefs or imagefs (see IsDerived).
func checkSignal(field, key, value string) (Signal, error) {
	s := Signal(key)
	if !s.known() {
		return "", &FieldError{Field: field + "[" + key + "]", Value: value, Reason: "unsupported eviction signal " + strconv.Quote(key)}
	}
	return s, nil
}

// IsDerived reports whether s is a containerfs signal, whose thresholds the kubelet
// always derives from the nodefs or imagefs ones: configured values are ignored.
func IsDerived(s Signal) bool {
	return s == SignalContainerFsAvailable || s == SignalContainerFsInodesFree
}

// parseStatements parses one threshold map. Disabled signals (0%, 100%) are dropped.
func parseStatements(field string, m map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, key := range sortedKeys(m) {
		val := m[key]
		s, err := checkSignal(field, key, val)
		if err != nil {
			return nil, err
		}
		v, disabled, err := parseThresholdValue(val)
		if err != nil {
			return nil, &FieldError{Field: field + "[" + key + "]", Value: val, Reason: err.Error()}
		}
		if disabled {
			continue
		}
		out = append(out, Threshold{Signal: s, Operator: OpLessThan, Value: v})
	}
	return out, nil
}

// parseThresholdValue parses "100Mi" or "10%". "0%" and "100%" disable the signal.
func parseThresholdValue(val string) (v Value, disabled bool, err error) {
	val = strings.TrimSpace(val)
	if strings.HasSuffix(val, "%") {
		if val == "0%" || val == "100%" {
			return Value{}, true, nil
		}
		p, err := parsePercentage(val)
		if err != nil {
			return Value{}, false, err
		}
		if p < 0 {
			return Value{}, false, fmt.Errorf("percentage must be at least 0%%")
		}
		if p > 1 {
			return Value{}, false, fmt.Errorf("percentage must be at most 100%%")
		}
		if p == 0 || p == 1 { // spellings such as "0.0%" or "100.00%" disable too
			return Value{}, true, nil
		}
		return Value{Percentage: p}, false, nil
	}
	q, err := quantities.Parse(val)
	if err != nil {
		return Value{}, false, fmt.Errorf("not a quantity or percentage")
	}
	if q.Sign() <= 0 {
		return Value{}, false, fmt.Errorf("threshold quantity must be positive")
	}
	return Value{Quantity: &q}, false, nil
}

func parsePercentage(val string) (float32, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 32)
	if err != nil || f != f { // NaN
		return 0, fmt.Errorf("not a valid percentage")
	}
	return float32(f) / 100, nil
}

// formatPercent renders a fraction as the percentage it was written as: float32
// 0.15 prints as "15%", not "15.000001%".
func formatPercent(p float32) string {
	return strconv.FormatFloat(math.Round(float64(p)*1e6)/1e4, 'f', -1, 64) + "%"
}

func parseMinimumReclaims(m map[string]string) (map[Signal]*Value, error) {
	out := make(map[Signal]*Value, len(m))
	for _, key := range sortedKeys(m) {
		val := strings.TrimSpace(m[key])
		field := "evictionMinimumReclaim[" + key + "]"
		s, err := checkSignal("evictionMinimumReclaim", key, val)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(val, "%") {
			p, err := parsePercentage(val)
			if err != nil {
				return nil, &FieldError{Field: field, Value: val, Reason: err.Error()}
			}
			if p <= 0 || p > 1 {
				return nil, &FieldError{Field: field, Value: val, Reason: "minimum reclaim percentage must be above 0% and at most 100%"}
			}
			out[s] = &Value{Percentage: p}
			continue
		}
		q, err := quantities.Parse(val)
		if err != nil {
			return nil, &FieldError{Field: field, Value: val, Reason: "not a quantity or percentage"}
		}
		if q.Sign() < 0 {
			return nil, &FieldError{Field: field, Value: val, Reason: "minimum reclaim must not be negative"}
		}
		out[s] = &Value{Quantity: &q}
	}
	return out, nil
}

func parseGracePeriods(m map[string]string) (map[Signal]time.Duration, error) {
	out := make(map[Signal]time.Duration, len(m))
	for _, key := range sortedKeys(m) {
		val := m[key]
		field := "evictionSoftGracePeriod[" + key + "]"
		s, err := checkSignal("evictionSoftGracePeriod", key, val)
		if err != nil {
			return nil, err
		}
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil {
			return nil, &FieldError{Field: field, Value: val, Reason: "not a duration"}
		}
		if d < 0 {
			return nil, &FieldError{Field: field, Value: val, Reason: "grace period must not be negative"}
		}
		out[s] = d
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// DefaultHard is the kubelet's default evictionHard on Linux (imagefs.inodesFree
// since v1.30).
func DefaultHard() map[string]string {
	return map[string]string{
		string(SignalMemoryAvailable):   "100Mi",
		string(SignalNodeFsAvailable):   "10%",
		string(SignalNodeFsInodesFree):  "5%",
		string(SignalImageFsAvailable):  "15%",
		string(SignalImageFsInodesFree): "5%",
	}
}
