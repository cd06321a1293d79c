package eviction

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func hardQ(s Signal, q string) Threshold {
	return Threshold{Signal: s, Operator: OpLessThan, Value: Value{Quantity: qtyp(q)}}
}

func hardP(s Signal, p float32) Threshold {
	return Threshold{Signal: s, Operator: OpLessThan, Value: Value{Percentage: p}}
}

func soft(t Threshold, grace time.Duration) Threshold {
	t.GracePeriod = grace
	return t
}

func withMin(t Threshold, v Value) Threshold {
	t.MinReclaim = &v
	return t
}

func TestParseThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  ThresholdConfig
		want []Threshold
	}{
		{
			name: "empty",
			cfg:  ThresholdConfig{},
			want: nil,
		},
		{
			name: "quantities",
			cfg: ThresholdConfig{Hard: map[string]string{
				"memory.available": "100Mi",
				"nodefs.available": "2Gi",
				"pid.available":    "1k",
			}},
			want: []Threshold{
				hardQ(SignalMemoryAvailable, "100Mi"),
				hardQ(SignalNodeFsAvailable, "2Gi"),
				hardQ(SignalPIDAvailable, "1k"),
			},
		},
		{
			name: "surrounding spaces are ignored",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": " 100Mi ", "nodefs.available": " 10% "}},
			want: []Threshold{
				hardQ(SignalMemoryAvailable, "100Mi"),
				hardP(SignalNodeFsAvailable, 0.1),
			},
		},
		{
			name: "percentages",
			cfg: ThresholdConfig{Hard: map[string]string{
				"nodefs.available":   "10%",
				"nodefs.inodesFree":  "5%",
				"imagefs.available":  "15.5%",
				"imagefs.inodesFree": "99.9%",
			}},
			want: []Threshold{
				hardP(SignalNodeFsAvailable, 0.1),
				hardP(SignalNodeFsInodesFree, 0.05),
				hardP(SignalImageFsAvailable, 0.155),
				hardP(SignalImageFsInodesFree, 0.999),
			},
		},
		{
			name: "0% and 100% disable a signal",
			cfg: ThresholdConfig{
				Hard:            map[string]string{"memory.available": "0%", "nodefs.available": "100%", "imagefs.available": "15%"},
				Soft:            map[string]string{"nodefs.inodesFree": "0%"},
				SoftGracePeriod: map[string]string{},
			},
			want: []Threshold{hardP(SignalImageFsAvailable, 0.15)},
		},
		{
			name: "other spellings of 0% and 100% disable too",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "0.0%", "nodefs.available": "100.00%", "pid.available": "-0%"}},
			want: nil,
		},
		{
			name: "soft thresholds take their grace period",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"memory.available": "1Gi", "nodefs.available": "15%"},
				SoftGracePeriod: map[string]string{"memory.available": "1m30s", "nodefs.available": "2m", "pid.available": "5m"},
			},
			want: []Threshold{
				soft(hardQ(SignalMemoryAvailable, "1Gi"), 90*time.Second),
				soft(hardP(SignalNodeFsAvailable, 0.15), 2*time.Minute),
			},
		},
		{
			name: "minimum reclaim is attached to hard and soft thresholds of its signal",
			cfg: ThresholdConfig{
				Hard:            map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"},
				Soft:            map[string]string{"memory.available": "500Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "1m"},
				MinimumReclaim:  map[string]string{"memory.available": "0Mi", "nodefs.available": "500Mi", "imagefs.available": "2%"},
			},
			want: []Threshold{
				withMin(hardQ(SignalMemoryAvailable, "100Mi"), Value{Quantity: qtyp("0Mi")}),
				withMin(soft(hardQ(SignalMemoryAvailable, "500Mi"), time.Minute), Value{Quantity: qtyp("0Mi")}),
				withMin(hardP(SignalNodeFsAvailable, 0.1), Value{Quantity: qtyp("500Mi")}),
				withMin(hardP(SignalImageFsAvailable, 0.15), Value{Percentage: 0.02}),
			},
		},
		{
			name: "pods enforcement adds an allocatable twin of hard memory.available",
			cfg: ThresholdConfig{
				Hard:                   map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
				Soft:                   map[string]string{"memory.available": "1Gi"},
				SoftGracePeriod:        map[string]string{"memory.available": "1m"},
				MinimumReclaim:         map[string]string{"memory.available": "50Mi"},
				EnforceNodeAllocatable: []string{"kube-reserved", "pods"},
			},
			want: []Threshold{
				withMin(hardQ(SignalMemoryAvailable, "100Mi"), Value{Quantity: qtyp("50Mi")}),
				withMin(soft(hardQ(SignalMemoryAvailable, "1Gi"), time.Minute), Value{Quantity: qtyp("50Mi")}),
				withMin(hardQ(SignalAllocatableMemoryAvailable, "100Mi"), Value{Quantity: qtyp("50Mi")}),
				hardP(SignalNodeFsAvailable, 0.1),
			},
		},
		{
			name: "no allocatable twin without pods enforcement",
			cfg: ThresholdConfig{
				Hard:                   map[string]string{"memory.available": "100Mi"},
				EnforceNodeAllocatable: []string{"system-reserved", "kube-reserved"},
			},
			want: []Threshold{hardQ(SignalMemoryAvailable, "100Mi")},
		},
		{
			name: "no allocatable twin with empty enforcement",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}, EnforceNodeAllocatable: []string{}},
			want: []Threshold{hardQ(SignalMemoryAvailable, "100Mi")},
		},
		{
			name: "no allocatable twin for a soft memory threshold",
			cfg: ThresholdConfig{
				Soft:                   map[string]string{"memory.available": "1Gi"},
				SoftGracePeriod:        map[string]string{"memory.available": "30s"},
				EnforceNodeAllocatable: []string{"pods"},
			},
			want: []Threshold{soft(hardQ(SignalMemoryAvailable, "1Gi"), 30*time.Second)},
		},
		{
			name: "a configured allocatable threshold is kept instead of the twin",
			cfg: ThresholdConfig{
				Hard:                   map[string]string{"memory.available": "100Mi", "allocatableMemory.available": "200Mi"},
				EnforceNodeAllocatable: []string{"pods"},
			},
			want: []Threshold{
				hardQ(SignalMemoryAvailable, "100Mi"),
				hardQ(SignalAllocatableMemoryAvailable, "200Mi"),
			},
		},
		{
			name: "ordered by signal, hard before soft",
			cfg: ThresholdConfig{
				Hard: map[string]string{
					"pid.available": "100", "imagefs.inodesFree": "5%", "imagefs.available": "15%",
					"nodefs.inodesFree": "5%", "nodefs.available": "10%", "memory.available": "100Mi",
				},
				Soft: map[string]string{"pid.available": "500", "nodefs.available": "20%", "memory.available": "1Gi"},
				SoftGracePeriod: map[string]string{
					"pid.available": "1m", "nodefs.available": "2m", "memory.available": "3m",
				},
			},
			want: []Threshold{
				hardQ(SignalMemoryAvailable, "100Mi"),
				soft(hardQ(SignalMemoryAvailable, "1Gi"), 3*time.Minute),
				hardP(SignalNodeFsAvailable, 0.1),
				soft(hardP(SignalNodeFsAvailable, 0.2), 2*time.Minute),
				hardP(SignalNodeFsInodesFree, 0.05),
				hardP(SignalImageFsAvailable, 0.15),
				hardP(SignalImageFsInodesFree, 0.05),
				hardQ(SignalPIDAvailable, "100"),
				soft(hardQ(SignalPIDAvailable, "500"), time.Minute),
			},
		},
		{
			name: "kubelet defaults",
			cfg:  ThresholdConfig{Hard: DefaultHard(), EnforceNodeAllocatable: []string{"pods"}},
			want: []Threshold{
				hardQ(SignalMemoryAvailable, "100Mi"),
				hardQ(SignalAllocatableMemoryAvailable, "100Mi"),
				hardP(SignalNodeFsAvailable, 0.1),
				hardP(SignalNodeFsInodesFree, 0.05),
				hardP(SignalImageFsAvailable, 0.15),
				hardP(SignalImageFsInodesFree, 0.05),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseThresholds(tc.cfg)
			if err != nil {
				t.Fatalf("ParseThresholds: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseThresholds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseThresholdsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       ThresholdConfig
		wantField string
		wantValue string
	}{
		{
			name:      "hard not a quantity",
			cfg:       ThresholdConfig{Hard: map[string]string{"memory.available": "abc"}},
			wantField: "evictionHard[memory.available]", wantValue: "abc",
		},
		{
			name:      "hard zero quantity",
			cfg:       ThresholdConfig{Hard: map[string]string{"memory.available": "0"}},
			wantField: "evictionHard[memory.available]", wantValue: "0",
		},
		{
			name:      "hard negative quantity",
			cfg:       ThresholdConfig{Hard: map[string]string{"memory.available": "-1Mi"}},
			wantField: "evictionHard[memory.available]", wantValue: "-1Mi",
		},
		{
			name:      "percentage above 100",
			cfg:       ThresholdConfig{Hard: map[string]string{"nodefs.available": "120%"}},
			wantField: "evictionHard[nodefs.available]", wantValue: "120%",
		},
		{
			name:      "negative percentage",
			cfg:       ThresholdConfig{Hard: map[string]string{"nodefs.available": "-5%"}},
			wantField: "evictionHard[nodefs.available]", wantValue: "-5%",
		},
		{
			name:      "not a percentage",
			cfg:       ThresholdConfig{Hard: map[string]string{"nodefs.available": "ten%"}},
			wantField: "evictionHard[nodefs.available]", wantValue: "ten%",
		},
		{
			name:      "NaN percentage",
			cfg:       ThresholdConfig{Hard: map[string]string{"nodefs.available": "NaN%"}},
			wantField: "evictionHard[nodefs.available]", wantValue: "NaN%",
		},
		{
			name:      "unknown signal",
			cfg:       ThresholdConfig{Hard: map[string]string{"memory.free": "1Gi"}},
			wantField: "evictionHard[memory.free]", wantValue: "1Gi",
		},
		{
			name: "soft not a quantity",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"memory.available": "lots"},
				SoftGracePeriod: map[string]string{"memory.available": "1m"},
			},
			wantField: "evictionSoft[memory.available]", wantValue: "lots",
		},
		{
			name:      "soft without grace period",
			cfg:       ThresholdConfig{Soft: map[string]string{"memory.available": "1Gi"}},
			wantField: "evictionSoft[memory.available]", wantValue: "1Gi",
		},
		{
			name: "soft with grace period for another signal",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"nodefs.available": "15%"},
				SoftGracePeriod: map[string]string{"memory.available": "1m"},
			},
			wantField: "evictionSoft[nodefs.available]", wantValue: "15%",
		},
		{
			name:      "grace period not a duration",
			cfg:       ThresholdConfig{SoftGracePeriod: map[string]string{"memory.available": "soon"}},
			wantField: "evictionSoftGracePeriod[memory.available]", wantValue: "soon",
		},
		{
			name:      "negative grace period",
			cfg:       ThresholdConfig{SoftGracePeriod: map[string]string{"memory.available": "-1m"}},
			wantField: "evictionSoftGracePeriod[memory.available]", wantValue: "-1m",
		},
		{
			name:      "grace period for unknown signal",
			cfg:       ThresholdConfig{SoftGracePeriod: map[string]string{"disk.available": "1m"}},
			wantField: "evictionSoftGracePeriod[disk.available]", wantValue: "1m",
		},
		{
			name:      "minimum reclaim 0%",
			cfg:       ThresholdConfig{MinimumReclaim: map[string]string{"nodefs.available": "0%"}},
			wantField: "evictionMinimumReclaim[nodefs.available]", wantValue: "0%",
		},
		{
			name:      "minimum reclaim above 100%",
			cfg:       ThresholdConfig{MinimumReclaim: map[string]string{"nodefs.available": "150%"}},
			wantField: "evictionMinimumReclaim[nodefs.available]", wantValue: "150%",
		},
		{
			name:      "minimum reclaim bad percentage",
			cfg:       ThresholdConfig{MinimumReclaim: map[string]string{"nodefs.available": "x%"}},
			wantField: "evictionMinimumReclaim[nodefs.available]", wantValue: "x%",
		},
		{
			name:      "minimum reclaim negative",
			cfg:       ThresholdConfig{MinimumReclaim: map[string]string{"memory.available": "-1Mi"}},
			wantField: "evictionMinimumReclaim[memory.available]", wantValue: "-1Mi",
		},
		{
			name:      "minimum reclaim not a quantity",
			cfg:       ThresholdConfig{MinimumReclaim: map[string]string{"memory.available": "some"}},
			wantField: "evictionMinimumReclaim[memory.available]", wantValue: "some",
		},
		{
			name:      "minimum reclaim unknown signal",
			cfg:       ThresholdConfig{MinimumReclaim: map[string]string{"swap.available": "1Gi"}},
			wantField: "evictionMinimumReclaim[swap.available]", wantValue: "1Gi",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseThresholds(tc.cfg)
			if err == nil {
				t.Fatalf("ParseThresholds = %v, want an error", got)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseThresholds error %v (%T) is not a *FieldError", err, err)
			}
			if diff := cmp.Diff([2]string{tc.wantField, tc.wantValue}, [2]string{fe.Field, fe.Value}); diff != "" {
				t.Errorf("field and value (-want +got):\n%s", diff)
			}
			if fe.Reason == "" {
				t.Errorf("error %q has no reason", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantField) || !strings.Contains(msg, tc.wantValue) {
				t.Errorf("error %q does not name field %q and value %q", msg, tc.wantField, tc.wantValue)
			}
			if got != nil {
				t.Errorf("ParseThresholds returned thresholds %v with an error", got)
			}
		})
	}
}

// Configured containerfs thresholds parse (the kubelet accepts them) and are then
// replaced by the ones derived for the node's layout.
func TestConfiguredContainerFsThresholdsAreReplaced(t *testing.T) {
	t.Parallel()
	ts, err := ParseThresholds(ThresholdConfig{Hard: map[string]string{
		"containerfs.available": "50%", "nodefs.available": "10%", "imagefs.available": "15%",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		layout DiskLayout
		want   string
	}{{NoImageFs, "10%"}, {SplitImageFs, "10%"}, {DedicatedImageFs, "15%"}} {
		var got []string
		for _, th := range WithContainerFsThresholds(ts, tc.layout) {
			if th.Signal == SignalContainerFsAvailable {
				got = append(got, th.Value.String())
			}
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: containerfs.available thresholds = %v, want [%s]", tc.layout, got, tc.want)
		}
	}
}
