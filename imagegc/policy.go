package imagegc

import (
	"errors"
	"fmt"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// ErrInvalidPolicy is the class of Policy.Validate's errors.
var ErrInvalidPolicy = errors.New("invalid image GC policy")

// Policy is the image GC policy, the KubeletConfiguration fields of the same names.
type Policy struct {
	// HighThresholdPercent: at or above this image filesystem usage, GC frees
	// space. 100 disables the periodic space-based GC (not eviction's reclaim).
	HighThresholdPercent int
	// LowThresholdPercent: the usage GC frees down to.
	LowThresholdPercent int
	// MinAge: images first detected less than this long ago are not removed.
	MinAge time.Duration
	// MaxAge: unused images not used for longer than this are removed
	// regardless of usage; images never used have always passed it. It applies
	// once GC has run longer than it. Zero disables it.
	MaxAge time.Duration
}

// DefaultPolicy is the kubelet's default policy: 85 / 80, 2m, max age off.
func DefaultPolicy() Policy {
	return Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
}

// PolicyFromKubelet reads the policy from a defaulted KubeletConfiguration.
// Unset fields take the kubelet's defaults.
func PolicyFromKubelet(kc *kubeletv1beta1.KubeletConfiguration) Policy {
	p := DefaultPolicy()
	if kc == nil {
		return p
	}
	if kc.ImageGCHighThresholdPercent != nil {
		p.HighThresholdPercent = int(*kc.ImageGCHighThresholdPercent)
	}
	if kc.ImageGCLowThresholdPercent != nil {
		p.LowThresholdPercent = int(*kc.ImageGCLowThresholdPercent)
	}
	if kc.ImageMinimumGCAge.Duration != 0 {
		p.MinAge = kc.ImageMinimumGCAge.Duration
	}
	p.MaxAge = kc.ImageMaximumGCAge.Duration
	return p
}

// Validate reports the first invalid field, named as in KubeletConfiguration:
// the thresholds must be in [0, 100] with low ≤ high, the ages must not be
// negative, and a non-zero maximum age must exceed the minimum age.
func (p Policy) Validate() error {
	switch {
	case p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100:
		return fmt.Errorf("%w: imageGCHighThresholdPercent %d must be in [0, 100]", ErrInvalidPolicy, p.HighThresholdPercent)
	case p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100:
		return fmt.Errorf("%w: imageGCLowThresholdPercent %d must be in [0, 100]", ErrInvalidPolicy, p.LowThresholdPercent)
	case p.LowThresholdPercent > p.HighThresholdPercent:
		return fmt.Errorf("%w: imageGCLowThresholdPercent %d must not exceed imageGCHighThresholdPercent %d",
			ErrInvalidPolicy, p.LowThresholdPercent, p.HighThresholdPercent)
	case p.MinAge < 0:
		return fmt.Errorf("%w: imageMinimumGCAge %v must not be negative", ErrInvalidPolicy, p.MinAge)
	case p.MaxAge < 0:
		return fmt.Errorf("%w: imageMaximumGCAge %v must not be negative", ErrInvalidPolicy, p.MaxAge)
	case p.MaxAge != 0 && p.MaxAge <= p.MinAge:
		return fmt.Errorf("%w: imageMaximumGCAge %v must be greater than imageMinimumGCAge %v (or 0 to disable it)",
			ErrInvalidPolicy, p.MaxAge, p.MinAge)
	}
	return nil
}

// PeriodicEnabled reports whether the periodic GC loop runs at all: the kubelet
// does not start it when high = 100 and the maximum age is off.
func (p Policy) PeriodicEnabled() bool {
	return p.HighThresholdPercent < 100 || p.MaxAge > 0
}
