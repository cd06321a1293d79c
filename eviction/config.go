package eviction

import (
	"errors"
	"time"
)

// Defaults from the kubelet.
const (
	DefaultMonitoringInterval       = 10 * time.Second
	DefaultPressureTransitionPeriod = 5 * time.Minute
	DefaultPodCleanupTimeout        = 30 * time.Second
	DefaultPodCleanupPoll           = time.Second
	// HardEvictionGracePeriod is the grace period given to a pod evicted for a hard
	// threshold or a local-storage limit (the kubelet's immediate eviction).
	HardEvictionGracePeriod = time.Second
)

// Config is the eviction manager's configuration, resolved from a KubeletConfiguration.
type Config struct {
	// Thresholds from ParseThresholds.
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a condition stays after its threshold was
	// last met (evictionPressureTransitionPeriod). Zero means the default, 5m.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriod caps the grace period of soft evictions
	// (evictionMaxPodGracePeriod); the pod's own terminationGracePeriodSeconds is used
	// when it is smaller.
	MaxPodGracePeriod time.Duration
	// MonitoringInterval is the period of the monitoring loop. Zero means 10s.
	MonitoringInterval time.Duration
	// LocalStorageCapacityIsolation enables emptyDir sizeLimit and ephemeral-storage
	// limit evictions (localStorageCapacityIsolation, default true).
	LocalStorageCapacityIsolation bool
	// PodCleanupTimeout bounds the wait for an evicted pod's cleanup. Zero means 30s.
	PodCleanupTimeout time.Duration
	// Layout, when set, is the node's disk layout; when nil it is detected from
	// the first Summary (see DetectLayout).
	Layout *DiskLayout
}

// withDefaults returns c with zero durations replaced by the kubelet's defaults.
func (c Config) withDefaults() Config {
	if c.PressureTransitionPeriod == 0 {
		c.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if c.MonitoringInterval == 0 {
		c.MonitoringInterval = DefaultMonitoringInterval
	}
	if c.PodCleanupTimeout == 0 {
		c.PodCleanupTimeout = DefaultPodCleanupTimeout
	}
	return c
}

func (c Config) validate() error {
	if c.MonitoringInterval < 0 || c.PressureTransitionPeriod < 0 || c.MaxPodGracePeriod < 0 || c.PodCleanupTimeout < 0 {
		return errors.New("eviction config: durations must not be negative")
	}
	for _, t := range c.Thresholds {
		if !t.Signal.known() {
			return errors.New("eviction config: unknown signal " + string(t.Signal))
		}
	}
	return nil
}
