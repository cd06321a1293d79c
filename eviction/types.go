package eviction

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal names an eviction signal as the kubelet spells it in evictionHard and friends.
type Signal string

// The eviction signals. containerfs.* cannot be configured: their thresholds are
// derived from nodefs.* or imagefs.* according to the node's disk layout.
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalContainerFsAvailable       Signal = "containerfs.available"
	SignalContainerFsInodesFree      Signal = "containerfs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// Signals lists every signal in a fixed order, the order used for output.
var Signals = []Signal{
	SignalMemoryAvailable, SignalAllocatableMemoryAvailable,
	SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree,
	SignalContainerFsAvailable, SignalContainerFsInodesFree,
	SignalPIDAvailable,
}

// Extra resource names the kubelet reclaims besides memory and ephemeral-storage.
const (
	ResourceInodes v1.ResourceName = "inodes"
	ResourcePIDs   v1.ResourceName = "pids"
)

// Resource returns the resource a signal is about: memory, ephemeral-storage,
// inodes or pids. ok is false for an unknown signal.
func (s Signal) Resource() (r v1.ResourceName, ok bool) {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return v1.ResourceMemory, true
	case SignalNodeFsAvailable, SignalImageFsAvailable, SignalContainerFsAvailable:
		return v1.ResourceEphemeralStorage, true
	case SignalNodeFsInodesFree, SignalImageFsInodesFree, SignalContainerFsInodesFree:
		return ResourceInodes, true
	case SignalPIDAvailable:
		return ResourcePIDs, true
	}
	return "", false
}

// Condition returns the node condition a signal drives.
func (s Signal) Condition() (v1.NodeConditionType, bool) {
	switch r, _ := s.Resource(); r {
	case v1.ResourceMemory:
		return v1.NodeMemoryPressure, true
	case v1.ResourceEphemeralStorage, ResourceInodes:
		return v1.NodeDiskPressure, true
	case ResourcePIDs:
		return v1.NodePIDPressure, true
	}
	return "", false
}

func (s Signal) known() bool { _, ok := s.Resource(); return ok }

func (s Signal) isMemory() bool {
	return s == SignalMemoryAvailable || s == SignalAllocatableMemoryAvailable
}

// Operator compares an observation with a threshold. The kubelet has only LessThan.
type Operator string

// OpLessThan: the threshold is met when available < threshold quantity.
const OpLessThan Operator = "LessThan"

// Value is a threshold quantity: either absolute or a fraction of the signal's capacity.
// Exactly one of Quantity and Percentage is set.
type Value struct {
	Quantity   *resource.Quantity
	Percentage float32 // 0 < Percentage < 1 when Quantity is nil
}

// Of returns the value as a quantity against capacity. A percentage is applied to
// capacity's integer value and truncated, as the kubelet does.
func (v Value) Of(capacity *resource.Quantity) *resource.Quantity {
	q := v.of(capacity)
	return &q
}

// of is Of by value, for callers that keep the quantity on their stack.
func (v Value) of(capacity *resource.Quantity) resource.Quantity {
	if v.Quantity != nil {
		return v.Quantity.DeepCopy()
	}
	var c int64
	if capacity != nil {
		c = capacity.Value()
	}
	return *resource.NewQuantity(int64(float64(c)*float64(v.Percentage)), resource.BinarySI)
}

// String renders the value as it would be written in a KubeletConfiguration.
func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return formatPercent(v.Percentage)
}

// Threshold is one eviction threshold. GracePeriod 0 makes it a hard threshold.
type Threshold struct {
	Signal      Signal
	Operator    Operator
	Value       Value
	GracePeriod time.Duration
	// MinReclaim, when set, is how far above the threshold the signal must recover
	// before a pressure episode ends.
	MinReclaim *Value
}

// Hard reports whether the threshold is a hard one (no grace period).
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// Observation is one signal's observed value at a time.
type Observation struct {
	Available *resource.Quantity
	Capacity  *resource.Quantity
	Time      time.Time // when the underlying stats were sampled; zero if unknown
}

// Observations maps a signal to its observation.
type Observations map[Signal]Observation

// DiskLayout is how a node places images and container writable layers.
type DiskLayout int

const (
	// NoImageFs: images and writable layers share the node filesystem.
	NoImageFs DiskLayout = iota
	// DedicatedImageFs: images and writable layers on a separate image filesystem.
	DedicatedImageFs
	// SplitImageFs: images on the image filesystem, writable layers on the node filesystem.
	SplitImageFs
)

func (l DiskLayout) String() string {
	switch l {
	case NoImageFs:
		return "no-imagefs"
	case DedicatedImageFs:
		return "dedicated-imagefs"
	case SplitImageFs:
		return "split-imagefs"
	}
	return "unknown"
}
