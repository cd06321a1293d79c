package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// node is the scripted node: the pods, stats, images and containers the scenario
// says are there, changed by the managers' actions as a real node would change:
// an evicted or preempted pod's memory and disk come back, a removed image's size
// is freed on the image filesystem. Only the simulation goroutine touches it.
type node struct {
	now        time.Time
	pods       []*v1.Pod
	summary    *statsapi.Summary
	images     []*runtimeapi.Image
	containers []*runtimeapi.Container
	imageFs    *ImageFs
	// layout says which filesystems hold images and writable layers, and so
	// which of the Summary's filesystems are one and the same.
	layout eviction.DiskLayout
	emit   func(Event)
	// freed counts bytes freed on disk by image and container removal since the
	// last reset; the eviction pass reports it as Reclaimed.
	freed int64
	// stuck are the pods (by nodeapi.PodName) whose shutdown does not complete.
	stuck map[string]bool
	// terminating are the killed pods whose shutdown has not completed: no
	// longer active, they keep their stats (their resources) until it does.
	terminating []*v1.Pod
	// cleanupChecks counts the eviction manager's PodCleanedUp calls.
	cleanupChecks int
}

var errNoSummary = errors.New("simulate: no summary given yet")

// imageFsMountpoint is where the scripted runtime says its images live; image GC
// asks statfs about it, which the scripted node answers from imageFs.
const imageFsMountpoint = "/var/lib/containerd"

// Summary returns the current stats, stamped with the virtual time. It returns the
// node's own Summary, not a copy: the managers only read it, and only during the
// call that asked for it, on the simulation goroutine.
func (n *node) Summary(context.Context) (*statsapi.Summary, error) {
	if n.summary == nil {
		return nil, errNoSummary
	}
	s := n.summary
	t := metav1.NewTime(n.now)
	if m := s.Node.Memory; m != nil {
		m.Time = t
	}
	for i := range s.Node.SystemContainers {
		if m := s.Node.SystemContainers[i].Memory; m != nil {
			m.Time = t
		}
	}
	for _, fs := range []*statsapi.FsStats{s.Node.Fs, runtimeFs(s, false), runtimeFs(s, true)} {
		if fs != nil {
			fs.Time = t
		}
	}
	if r := s.Node.Rlimit; r != nil {
		r.Time = t
	}
	return s, nil
}

// copySummary deep-copies s (the stats types have no generated DeepCopy).
func copySummary(s *statsapi.Summary) (*statsapi.Summary, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	out := new(statsapi.Summary)
	return out, json.Unmarshal(b, out)
}

func runtimeFs(s *statsapi.Summary, container bool) *statsapi.FsStats {
	if s.Node.Runtime == nil {
		return nil
	}
	if container {
		return s.Node.Runtime.ContainerFs
	}
	return s.Node.Runtime.ImageFs
}

// removePod takes pod off the node and gives back its memory and disk.
func (n *node) removePod(pod *v1.Pod) {
	n.pods = slices.DeleteFunc(n.pods, func(p *v1.Pod) bool { return samePod(p, pod) })
	if n.summary == nil {
		return
	}
	i := slices.IndexFunc(n.summary.Pods, func(ps statsapi.PodStats) bool {
		return (pod.UID != "" && ps.PodRef.UID == string(pod.UID)) || (ps.PodRef.Namespace == pod.Namespace && ps.PodRef.Name == pod.Name)
	})
	if i < 0 {
		return
	}
	ps := n.summary.Pods[i]
	n.summary.Pods = slices.Delete(n.summary.Pods, i, i+1)
	if ps.Memory != nil && ps.Memory.WorkingSetBytes != nil {
		ws := *ps.Memory.WorkingSetBytes
		giveMemory(n.summary.Node.Memory, ws)
		for j := range n.summary.Node.SystemContainers {
			if n.summary.Node.SystemContainers[j].Name == statsapi.SystemContainerPods {
				giveMemory(n.summary.Node.SystemContainers[j].Memory, ws)
			}
		}
	}
	var rootfs, other uint64
	for _, c := range ps.Containers {
		rootfs += used(c.Rootfs)
		other += used(c.Logs)
	}
	for _, v := range ps.VolumeStats {
		other += used(&v.FsStats)
	}
	n.giveContainerFs(rootfs)
	n.giveNodeFs(other)
}

// freeImageBytes records that b bytes were freed on the image filesystem.
func (n *node) freeImageBytes(b uint64) {
	n.freed += int64(b)
	n.giveImageFs(b)
}

// The Summary reports each filesystem the node has once per role: the node
// filesystem (logs, volumes), the image filesystem (images) and the container
// filesystem (writable layers); CRI's ImageFsInfo, which image GC reads,
// reports the image filesystem. The give functions free b bytes on the
// filesystem of one role, and so on every role the layout puts on it:
//
//	layout      node fs holds          image fs holds    container fs is
//	no imagefs  every role             (the node fs)     (the node fs)
//	dedicated   logs, volumes          images, layers    (the image fs)
//	split       logs, volumes, layers  images            (the node fs)

// giveNodeFs frees b bytes on the node filesystem.
func (n *node) giveNodeFs(b uint64) {
	if n.layout == eviction.NoImageFs {
		n.giveImageFs(b) // the same filesystem
		return
	}
	rt := n.runtimeFs()
	if n.layout == eviction.SplitImageFs {
		giveFs(b, n.nodeFs(), rt.ContainerFs)
	} else {
		giveFs(b, n.nodeFs())
	}
}

// giveImageFs frees b bytes on the image filesystem.
func (n *node) giveImageFs(b uint64) {
	if fs := n.imageFs; fs != nil {
		fs.AvailableBytes = min(fs.AvailableBytes+b, max(fs.CapacityBytes, fs.AvailableBytes))
	}
	rt := n.runtimeFs()
	switch n.layout {
	case eviction.NoImageFs:
		giveFs(b, n.nodeFs(), rt.ImageFs, rt.ContainerFs)
	case eviction.DedicatedImageFs:
		giveFs(b, rt.ImageFs, rt.ContainerFs)
	default:
		giveFs(b, rt.ImageFs)
	}
}

// nodeFs returns the Summary's node filesystem, nil without a Summary.
func (n *node) nodeFs() *statsapi.FsStats {
	if n.summary == nil {
		return nil
	}
	return n.summary.Node.Fs
}

// giveContainerFs frees b bytes on the filesystem of the writable layers.
func (n *node) giveContainerFs(b uint64) {
	if n.layout == eviction.DedicatedImageFs {
		n.giveImageFs(b)
	} else {
		n.giveNodeFs(b)
	}
}

// runtimeFs returns the Summary's runtime filesystems, empty when it has none.
func (n *node) runtimeFs() statsapi.RuntimeStats {
	if n.summary != nil && n.summary.Node.Runtime != nil {
		return *n.summary.Node.Runtime
	}
	return statsapi.RuntimeStats{}
}

func giveMemory(m *statsapi.MemoryStats, b uint64) {
	if m == nil || m.AvailableBytes == nil {
		return
	}
	*m.AvailableBytes += b
	if m.WorkingSetBytes != nil {
		*m.WorkingSetBytes -= min(b, *m.WorkingSetBytes)
	}
}

// giveFs frees b bytes on each of fss, once per distinct one.
func giveFs(b uint64, fss ...*statsapi.FsStats) {
	for i, fs := range fss {
		if fs == nil || fs.AvailableBytes == nil || slices.Contains(fss[:i], fs) {
			continue
		}
		*fs.AvailableBytes += b
		if fs.CapacityBytes != nil {
			*fs.AvailableBytes = min(*fs.AvailableBytes, *fs.CapacityBytes)
		}
		if fs.UsedBytes != nil {
			*fs.UsedBytes -= min(b, *fs.UsedBytes)
		}
	}
}

func used(fs *statsapi.FsStats) uint64 {
	if fs == nil || fs.UsedBytes == nil {
		return 0
	}
	return *fs.UsedBytes
}

// The CRI subset the garbage collectors use.

func (n *node) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return slices.Clone(n.images), nil
}

func (n *node) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	for _, img := range n.images {
		if img.Id == spec.GetImage() || slices.Contains(img.RepoTags, spec.GetImage()) {
			return &runtimeapi.ImageStatusResponse{Image: img}, nil
		}
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (n *node) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	i := slices.IndexFunc(n.images, func(img *runtimeapi.Image) bool {
		return img.Id == spec.GetImage() || slices.Contains(img.RepoTags, spec.GetImage())
	})
	if i < 0 {
		return nil // removing a missing image succeeds, as in CRI
	}
	img := n.images[i]
	n.images = slices.Delete(n.images, i, i+1)
	n.emit(Event{Event: EventImageRemoved, ID: img.Id, Size: ptr(int64(img.Size))})
	n.freeImageBytes(img.Size)
	return nil
}

func (n *node) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	if n.imageFs == nil {
		return nil, errors.New("simulate: no imageFs given yet")
	}
	used := n.imageFs.CapacityBytes - min(n.imageFs.AvailableBytes, n.imageFs.CapacityBytes)
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		Timestamp: n.now.UnixNano(),
		FsId:      &runtimeapi.FilesystemIdentifier{Mountpoint: imageFsMountpoint},
		UsedBytes: &runtimeapi.UInt64Value{Value: used},
	}}}, nil
}

// statfs reports the image filesystem's capacity and free bytes for image GC.
func (n *node) statfs() (capacity, available uint64, err error) {
	if n.imageFs == nil {
		return 0, 0, errors.New("simulate: no imageFs given yet")
	}
	return n.imageFs.CapacityBytes, n.imageFs.AvailableBytes, nil
}

func (n *node) ListContainers(_ context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var out []*runtimeapi.Container
	for _, c := range n.containers {
		if f != nil && f.State != nil && c.State != f.State.State {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

func (n *node) RemoveContainer(_ context.Context, id string) error {
	i := slices.IndexFunc(n.containers, func(c *runtimeapi.Container) bool { return c.Id == id })
	if i < 0 {
		return nil
	}
	n.containers = slices.Delete(n.containers, i, i+1)
	n.emit(Event{Event: EventContainerRemoved, ID: id})
	return nil
}

func ptr[T any](v T) *T { return &v }

// ActivePods returns the scripted pods: every pod on the node is active.
func (n *node) ActivePods() []*v1.Pod { return slices.Clone(n.pods) }

// IsPodDeleted answers container GC: a pod that is neither active nor
// terminating is deleted.
func (n *node) IsPodDeleted(uid string) bool {
	has := func(p *v1.Pod) bool { return string(p.UID) == uid }
	return !slices.ContainsFunc(n.pods, has) && !slices.ContainsFunc(n.terminating, has)
}

// IsPodTerminated answers container GC: a pod that is neither active nor
// terminating is terminated.
func (n *node) IsPodTerminated(uid string) bool { return n.IsPodDeleted(uid) }

// podCleanedUp answers the eviction manager: a killed pod is cleaned up once
// its shutdown has completed.
func (n *node) podCleanedUp(pod *v1.Pod) bool {
	n.cleanupChecks++
	return n.podCleanedUpQuiet(pod)
}

// podCleanedUpQuiet is podCleanedUp without counting the check.
func (n *node) podCleanedUpQuiet(pod *v1.Pod) bool {
	return !slices.ContainsFunc(n.terminating, func(p *v1.Pod) bool { return samePod(p, pod) })
}

// startTerminating takes a killed stuck pod off the active pods; it keeps its stats.
func (n *node) startTerminating(pod *v1.Pod) {
	n.pods = slices.DeleteFunc(n.pods, func(p *v1.Pod) bool { return samePod(p, pod) })
	if !slices.ContainsFunc(n.terminating, func(p *v1.Pod) bool { return samePod(p, pod) }) {
		n.terminating = append(n.terminating, pod)
	}
}

// finishTerminating completes the shutdown of the terminating pod called name,
// giving back its resources, and returns it; nil when no such pod terminates.
func (n *node) finishTerminating(name string) *v1.Pod {
	i := slices.IndexFunc(n.terminating, func(p *v1.Pod) bool { return nodeapi.PodName(p) == name })
	if i < 0 {
		return nil
	}
	pod := n.terminating[i]
	n.terminating = slices.Delete(n.terminating, i, i+1)
	n.removePod(pod)
	return pod
}

func samePod(a, b *v1.Pod) bool {
	return a.UID == b.UID && a.Namespace == b.Namespace && a.Name == b.Name
}

// The rest of container GC's CRI subset: the scenario has no sandboxes.

func (n *node) StopContainer(context.Context, string, int64) error { return nil }

func (n *node) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, nil
}

func (n *node) RemovePodSandbox(context.Context, string) error { return nil }

// recorder turns the managers' events into timeline records: the image GC
// failures. The others (Evicted, Preempting, EvictionThresholdMet) have records
// of their own.
type recorder struct{ s *sim }

func (r recorder) Event(_ k8sruntime.Object, _, reason, message string) {
	switch reason {
	case EventImageGCFailed, EventFreeDiskSpaceFailed, EventInvalidDiskCapacity:
		r.s.emit(Event{Event: reason, Message: message})
	}
}

func (r recorder) Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r recorder) AnnotatedEventf(object k8sruntime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}
