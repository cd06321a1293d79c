package imagegc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		p         Policy
		wantField string // "" means valid
	}{
		{"default", DefaultPolicy(), ""},
		{"disabled", Policy{HighThresholdPercent: 100, LowThresholdPercent: 80}, ""},
		{"equal thresholds", Policy{HighThresholdPercent: 80, LowThresholdPercent: 80}, ""},
		{"zero thresholds", Policy{}, ""},
		{"high above 100", Policy{HighThresholdPercent: 101, LowThresholdPercent: 80}, "imageGCHighThresholdPercent 101"},
		{"high negative", Policy{HighThresholdPercent: -1}, "imageGCHighThresholdPercent -1"},
		{"low negative", Policy{HighThresholdPercent: 85, LowThresholdPercent: -5}, "imageGCLowThresholdPercent -5"},
		{"low above 100", Policy{HighThresholdPercent: 100, LowThresholdPercent: 101}, "imageGCLowThresholdPercent 101"},
		{"low above high", Policy{HighThresholdPercent: 70, LowThresholdPercent: 80}, "imageGCLowThresholdPercent 80 must not exceed imageGCHighThresholdPercent 70"},
		{"max age set", Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: time.Hour}, ""},
		{"max age equals min", Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Hour}, "imageMaximumGCAge 1h0m0s must be greater than imageMinimumGCAge 1h0m0s"},
		{"max age below min", Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Minute}, "imageMaximumGCAge"},
		{"negative min age", Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: -time.Second}, "imageMinimumGCAge -1s"},
		{"negative max age", Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: -time.Second}, "imageMaximumGCAge -1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.p.Validate()
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("Validate() = %v, want ErrInvalidPolicy naming %q", err, tc.wantField)
			}
		})
	}
}

func TestPolicyFromKubelet(t *testing.T) {
	t.Parallel()
	high, low := int32(90), int32(50)
	tests := []struct {
		name string
		kc   *kubeletv1beta1.KubeletConfiguration
		want Policy
	}{
		{"nil", nil, DefaultPolicy()},
		{"empty", &kubeletv1beta1.KubeletConfiguration{}, DefaultPolicy()},
		{"set", &kubeletv1beta1.KubeletConfiguration{
			ImageGCHighThresholdPercent: &high, ImageGCLowThresholdPercent: &low,
			ImageMinimumGCAge: metav1.Duration{Duration: time.Minute},
			ImageMaximumGCAge: metav1.Duration{Duration: time.Hour},
		}, Policy{HighThresholdPercent: 90, LowThresholdPercent: 50, MinAge: time.Minute, MaxAge: time.Hour}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, PolicyFromKubelet(tc.kc)); diff != "" {
				t.Errorf("PolicyFromKubelet (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPeriodicEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Policy
		want bool
	}{
		{DefaultPolicy(), true},
		{Policy{HighThresholdPercent: 100}, false},
		{Policy{HighThresholdPercent: 100, MaxAge: time.Hour}, true},
	} {
		if got := tc.p.PeriodicEnabled(); got != tc.want {
			t.Errorf("%+v.PeriodicEnabled() = %v, want %v", tc.p, got, tc.want)
		}
	}
}
