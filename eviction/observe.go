package eviction

import (
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// Observe derives the signal observations from a stats Summary, as the kubelet's
// makeSignalObservations does. A signal whose stats are missing is absent.
//
//   - memory.available: node memory availableBytes; capacity = available + workingSet.
//   - allocatableMemory.available: the "pods" system container, computed the same way.
//   - nodefs.*: node fs; imagefs.*: runtime imageFs; containerfs.*: runtime containerFs.
//   - pid.available: rlimit maxpid − curproc; capacity = maxpid.
func Observe(s *statsapi.Summary) Observations {
	obs := make(Observations)
	if s == nil {
		return obs
	}
	var qs quantityArena
	if m := s.Node.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		obs[SignalMemoryAvailable] = memoryObservation(&qs, m)
	}
	for i := range s.Node.SystemContainers {
		c := &s.Node.SystemContainers[i]
		if c.Name != statsapi.SystemContainerPods {
			continue
		}
		if m := c.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
			obs[SignalAllocatableMemoryAvailable] = memoryObservation(&qs, m)
		}
	}
	addFs(obs, &qs, s.Node.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if rt := s.Node.Runtime; rt != nil {
		addFs(obs, &qs, rt.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
		addFs(obs, &qs, rt.ContainerFs, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	}
	if r := s.Node.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		obs[SignalPIDAvailable] = Observation{
			Available: qs.new(*r.MaxPID-*r.NumOfRunningProcesses, resource.DecimalSI),
			Capacity:  qs.new(*r.MaxPID, resource.DecimalSI),
			Time:      r.Time.Time,
		}
	}
	return obs
}

// quantityArena hands out the quantities of one Observe call from a few shared
// allocations instead of one each (a pass every 10 s made ten).
type quantityArena []resource.Quantity

func (qs *quantityArena) new(v int64, f resource.Format) *resource.Quantity {
	if len(*qs) == cap(*qs) {
		*qs = make([]resource.Quantity, 0, 8) // earlier pointers keep the full array alive
	}
	*qs = append(*qs, *resource.NewQuantity(v, f))
	return &(*qs)[len(*qs)-1]
}

func memoryObservation(qs *quantityArena, m *statsapi.MemoryStats) Observation {
	avail, ws := quantity.Int64Sat(*m.AvailableBytes), quantity.Int64Sat(*m.WorkingSetBytes)
	capacity := int64(math.MaxInt64) // saturated when the sum overflows
	if avail <= math.MaxInt64-ws {
		capacity = avail + ws
	}
	return Observation{
		Available: qs.new(avail, resource.BinarySI),
		Capacity:  qs.new(capacity, resource.BinarySI),
		Time:      m.Time.Time,
	}
}

func addFs(obs Observations, qs *quantityArena, fs *statsapi.FsStats, bytesSignal, inodesSignal Signal) {
	if fs == nil {
		return
	}
	if fs.AvailableBytes != nil && fs.CapacityBytes != nil {
		obs[bytesSignal] = Observation{
			Available: qs.new(quantity.Int64Sat(*fs.AvailableBytes), resource.BinarySI),
			Capacity:  qs.new(quantity.Int64Sat(*fs.CapacityBytes), resource.BinarySI),
			Time:      fs.Time.Time,
		}
	}
	if fs.InodesFree != nil && fs.Inodes != nil {
		obs[inodesSignal] = Observation{
			Available: qs.new(quantity.Int64Sat(*fs.InodesFree), resource.DecimalSI),
			Capacity:  qs.new(quantity.Int64Sat(*fs.Inodes), resource.DecimalSI),
			Time:      fs.Time.Time,
		}
	}
}

// DetectLayout infers the node's disk layout from a Summary. The Summary carries no
// device numbers, so two filesystems are taken to be the same when they report the
// same capacity and available bytes (the kubelet reports the root filesystem's
// numbers for imageFs when images live there).
func DetectLayout(s *statsapi.Summary) DiskLayout {
	if s == nil || s.Node.Runtime == nil || s.Node.Runtime.ImageFs == nil {
		return NoImageFs
	}
	img := s.Node.Runtime.ImageFs
	if sameFs(img, s.Node.Fs) {
		return NoImageFs
	}
	if cfs := s.Node.Runtime.ContainerFs; cfs != nil && !sameFs(cfs, img) {
		return SplitImageFs
	}
	return DedicatedImageFs
}

func sameFs(a, b *statsapi.FsStats) bool {
	if a == nil || b == nil {
		return a == b
	}
	return eqPtr(a.CapacityBytes, b.CapacityBytes) && eqPtr(a.AvailableBytes, b.AvailableBytes)
}

func eqPtr(a, b *uint64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// WithContainerFsThresholds replaces any containerfs thresholds with copies of the
// nodefs or imagefs ones, as the kubelet does for the node's layout: with no image
// filesystem or a split one, writable layers live on nodefs; with a dedicated one,
// on imagefs.
func WithContainerFsThresholds(ts []Threshold, layout DiskLayout) []Threshold {
	out := make([]Threshold, 0, len(ts)+2)
	for _, t := range ts {
		if t.Signal != SignalContainerFsAvailable && t.Signal != SignalContainerFsInodesFree {
			out = append(out, t)
		}
	}
	from := map[Signal]Signal{SignalNodeFsAvailable: SignalContainerFsAvailable, SignalNodeFsInodesFree: SignalContainerFsInodesFree}
	if layout == DedicatedImageFs {
		from = map[Signal]Signal{SignalImageFsAvailable: SignalContainerFsAvailable, SignalImageFsInodesFree: SignalContainerFsInodesFree}
	}
	n := len(out)
	for _, t := range out[:n] {
		if to, ok := from[t.Signal]; ok {
			t.Signal = to
			out = append(out, t)
		}
	}
	sortThresholds(out)
	return out
}
