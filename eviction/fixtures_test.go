package eviction

// Shared test builders: pods with requests, limits, priorities and volumes;
// PodStats with working set, rootfs, logs, volumes and process count; and a
// Summary builder. Quantities are written as strings ("1Gi", "800M") so the
// tables read like the kubelet's configuration and the seed's worked examples.

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fixtureTime is the sample time of every stat the builders make unless a test
// sets another one.
var fixtureTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func u64p(v uint64) *uint64 { return &v }
func i64p(v int64) *int64   { return &v }

// bytesOf parses a quantity string ("800M", "1Gi") into its integer value.
func bytesOf(s string) uint64 {
	q := resource.MustParse(s)
	return uint64(q.Value())
}

// qty parses s; it panics on a malformed literal (a bug in the test).
func qty(s string) resource.Quantity { return resource.MustParse(s) }

// resources builds a ResourceList from name, quantity pairs:
// resources("memory", "1Gi", "ephemeral-storage", "2Gi").
func resources(kv ...string) v1.ResourceList {
	if len(kv)%2 != 0 {
		panic("resources: odd number of arguments")
	}
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// podOpt changes a pod made by newTestPod.
type podOpt func(*v1.Pod)

// newTestPod makes a pod in namespace "default" with UID "uid-<name>" and the
// given options applied in order. Without a container option it has none.
func newTestPod(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: types.UID("uid-" + name),
	}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// withContainer adds a regular container with the given requests and limits.
func withContainer(name string, requests, limits v1.ResourceList) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{
			Name: name, Resources: v1.ResourceRequirements{Requests: requests, Limits: limits},
		})
	}
}

// withInitContainer adds an init container with the given requests.
func withInitContainer(name string, requests v1.ResourceList) podOpt {
	return func(p *v1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{
			Name: name, Resources: v1.ResourceRequirements{Requests: requests},
		})
	}
}

// withSidecar adds a restartable init container (restartPolicy Always) with the
// given requests.
func withSidecar(name string, requests v1.ResourceList) podOpt {
	always := v1.ContainerRestartPolicyAlways
	return func(p *v1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{
			Name: name, RestartPolicy: &always, Resources: v1.ResourceRequirements{Requests: requests},
		})
	}
}

// withEphemeralContainer adds an ephemeral (debug) container.
func withEphemeralContainer(name string) podOpt {
	return func(p *v1.Pod) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name},
		})
	}
}

// withPodResources sets the pod-level resources (spec.resources).
func withPodResources(requests, limits v1.ResourceList) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Resources = &v1.ResourceRequirements{Requests: requests, Limits: limits}
	}
}

// withPriority sets spec.priority.
func withPriority(prio int32) podOpt {
	return func(p *v1.Pod) { p.Spec.Priority = &prio }
}

// withGracePeriod sets spec.terminationGracePeriodSeconds.
func withGracePeriod(seconds int64) podOpt {
	return func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = &seconds }
}

// withAnnotation sets an annotation.
func withAnnotation(k, v string) podOpt {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

// withTolerations appends tolerations.
func withTolerations(ts ...v1.Toleration) podOpt {
	return func(p *v1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, ts...) }
}

// withVolume adds a volume with the given source.
func withVolume(name string, src v1.VolumeSource) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: name, VolumeSource: src})
	}
}

// withEmptyDir adds an emptyDir volume; sizeLimit "" means none.
func withEmptyDir(name string, medium v1.StorageMedium, sizeLimit string) podOpt {
	ed := &v1.EmptyDirVolumeSource{Medium: medium}
	if sizeLimit != "" {
		q := resource.MustParse(sizeLimit)
		ed.SizeLimit = &q
	}
	return withVolume(name, v1.VolumeSource{EmptyDir: ed})
}

// Volume sources of the kinds the ranking distinguishes.
var (
	srcConfigMap   = v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}
	srcSecret      = v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}
	srcGitRepo     = v1.VolumeSource{GitRepo: &v1.GitRepoVolumeSource{}}
	srcHostPath    = v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/data"}}
	srcDownwardAPI = v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}
	srcPVC         = v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}
)

// Seed QoS shapes: one container "c" whose requests and limits make the pod
// BestEffort, Guaranteed or Burstable (qos.Class), with the memory request given.
func bestEffort() podOpt { return withContainer("c", nil, nil) }

func guaranteed(mem string) podOpt {
	r := resources("cpu", "500m", "memory", mem)
	return withContainer("c", r, r)
}

func burstable(memRequest, memLimit string) podOpt {
	return withContainer("c", resources("memory", memRequest), resources("memory", memLimit))
}

// statsOpt changes PodStats made by newPodStats.
type statsOpt func(*statsapi.PodStats)

// newPodStats makes stats referring to pod (name, namespace, UID), sampled at
// fixtureTime, with the options applied in order.
func newPodStats(pod *v1.Pod, opts ...statsOpt) statsapi.PodStats {
	ps := statsapi.PodStats{PodRef: statsapi.PodReference{
		Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID),
	}}
	for _, o := range opts {
		o(&ps)
	}
	return ps
}

// container returns the container stats named name, adding them if absent.
func containerStats(ps *statsapi.PodStats, name string) *statsapi.ContainerStats {
	for i := range ps.Containers {
		if ps.Containers[i].Name == name {
			return &ps.Containers[i]
		}
	}
	ps.Containers = append(ps.Containers, statsapi.ContainerStats{Name: name})
	return &ps.Containers[len(ps.Containers)-1]
}

func usedFs(bytes, inodes uint64) *statsapi.FsStats {
	return &statsapi.FsStats{Time: metav1.NewTime(fixtureTime), UsedBytes: u64p(bytes), InodesUsed: u64p(inodes)}
}

// podWorkingSet sets the pod-level memory working set (what the ranking reads).
func podWorkingSet(s string) statsOpt {
	return func(ps *statsapi.PodStats) {
		ps.Memory = &statsapi.MemoryStats{Time: metav1.NewTime(fixtureTime), WorkingSetBytes: u64p(bytesOf(s))}
	}
}

// ctrWorkingSet sets a container's memory working set (what the message reads).
func ctrWorkingSet(name, s string) statsOpt {
	return func(ps *statsapi.PodStats) {
		containerStats(ps, name).Memory = &statsapi.MemoryStats{
			Time: metav1.NewTime(fixtureTime), WorkingSetBytes: u64p(bytesOf(s)),
		}
	}
}

// ctrRootfs sets a container's writable-layer usage in bytes and inodes.
func ctrRootfs(name, bytes string, inodes uint64) statsOpt {
	return func(ps *statsapi.PodStats) { containerStats(ps, name).Rootfs = usedFs(bytesOf(bytes), inodes) }
}

// ctrLogs sets a container's log usage in bytes and inodes.
func ctrLogs(name, bytes string, inodes uint64) statsOpt {
	return func(ps *statsapi.PodStats) { containerStats(ps, name).Logs = usedFs(bytesOf(bytes), inodes) }
}

// volumeUsage adds stats for the volume named name.
func volumeUsage(name, bytes string, inodes uint64) statsOpt {
	return func(ps *statsapi.PodStats) {
		ps.VolumeStats = append(ps.VolumeStats, statsapi.VolumeStats{Name: name, FsStats: *usedFs(bytesOf(bytes), inodes)})
	}
}

// ephemeralUsage sets the pod's total ephemeral-storage figure.
func ephemeralUsage(bytes string) statsOpt {
	return func(ps *statsapi.PodStats) { ps.EphemeralStorage = usedFs(bytesOf(bytes), 0) }
}

// processes sets the pod's process count.
func processes(n uint64) statsOpt {
	return func(ps *statsapi.PodStats) { ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: u64p(n)} }
}

// fsInfo is a node filesystem as the Summary reports it.
func fsInfo(capacity, available string, inodes, inodesFree uint64) *statsapi.FsStats {
	return &statsapi.FsStats{
		Time:           metav1.NewTime(fixtureTime),
		CapacityBytes:  u64p(bytesOf(capacity)),
		AvailableBytes: u64p(bytesOf(available)),
		UsedBytes:      u64p(bytesOf(capacity) - bytesOf(available)),
		Inodes:         u64p(inodes),
		InodesFree:     u64p(inodesFree),
		InodesUsed:     u64p(inodes - inodesFree),
	}
}

// summaryBuilder builds a stats Summary step by step.
type summaryBuilder struct{ s statsapi.Summary }

func newSummary() *summaryBuilder {
	return &summaryBuilder{s: statsapi.Summary{Node: statsapi.NodeStats{NodeName: "node"}}}
}

func memStats(available, workingSet string) *statsapi.MemoryStats {
	return &statsapi.MemoryStats{
		Time:            metav1.NewTime(fixtureTime),
		AvailableBytes:  u64p(bytesOf(available)),
		WorkingSetBytes: u64p(bytesOf(workingSet)),
	}
}

// memory sets the node's available memory and working set.
func (b *summaryBuilder) memory(available, workingSet string) *summaryBuilder {
	b.s.Node.Memory = memStats(available, workingSet)
	return b
}

// allocatable sets the memory of the "pods" system container.
func (b *summaryBuilder) allocatable(available, workingSet string) *summaryBuilder {
	b.s.Node.SystemContainers = append(b.s.Node.SystemContainers,
		statsapi.ContainerStats{Name: statsapi.SystemContainerPods, Memory: memStats(available, workingSet)})
	return b
}

// systemContainer adds a system container with the given memory.
func (b *summaryBuilder) systemContainer(name, available, workingSet string) *summaryBuilder {
	b.s.Node.SystemContainers = append(b.s.Node.SystemContainers,
		statsapi.ContainerStats{Name: name, Memory: memStats(available, workingSet)})
	return b
}

func (b *summaryBuilder) runtime() *statsapi.RuntimeStats {
	if b.s.Node.Runtime == nil {
		b.s.Node.Runtime = &statsapi.RuntimeStats{}
	}
	return b.s.Node.Runtime
}

func (b *summaryBuilder) nodeFs(fs *statsapi.FsStats) *summaryBuilder {
	b.s.Node.Fs = fs
	return b
}

func (b *summaryBuilder) imageFs(fs *statsapi.FsStats) *summaryBuilder {
	b.runtime().ImageFs = fs
	return b
}

func (b *summaryBuilder) containerFs(fs *statsapi.FsStats) *summaryBuilder {
	b.runtime().ContainerFs = fs
	return b
}

// pids sets the node rlimit stats.
func (b *summaryBuilder) pids(maxPID, running int64) *summaryBuilder {
	b.s.Node.Rlimit = &statsapi.RlimitStats{Time: metav1.NewTime(fixtureTime), MaxPID: i64p(maxPID), NumOfRunningProcesses: i64p(running)}
	return b
}

// pods appends pod stats.
func (b *summaryBuilder) pods(ps ...statsapi.PodStats) *summaryBuilder {
	b.s.Pods = append(b.s.Pods, ps...)
	return b
}

func (b *summaryBuilder) build() *statsapi.Summary {
	s := b.s
	return &s
}

// statsOf indexes pod stats the way the manager does.
func statsOf(ps ...statsapi.PodStats) StatsFunc { return PodStatsFunc(ps) }

// names lists the pod names of a ranking, in order.
func names(rs []Ranked) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Pod.Name
	}
	return out
}

// podNames lists the names of pods.
func podNames(ps []*v1.Pod) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// obsAt is an observation with an available amount and capacity.
func obsAt(available, capacity string, at time.Time) Observation {
	a, c := resource.MustParse(available), resource.MustParse(capacity)
	return Observation{Available: &a, Capacity: &c, Time: at}
}

// obsOf is obsAt at fixtureTime.
func obsOf(available, capacity string) Observation { return obsAt(available, capacity, fixtureTime) }

// qtyp parses s into a fresh *Quantity.
func qtyp(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// thrQ is a hard LessThan threshold with a quantity.
func thrQ(s Signal, q string) Threshold {
	return Threshold{Signal: s, Operator: OpLessThan, Value: Value{Quantity: qtyp(q)}}
}

// thrP is a hard LessThan threshold with a fraction of capacity (0.1 = 10%).
func thrP(s Signal, p float32) Threshold {
	return Threshold{Signal: s, Operator: OpLessThan, Value: Value{Percentage: p}}
}

// graced turns t into a soft threshold with grace period d.
func graced(t Threshold, d time.Duration) Threshold {
	t.GracePeriod = d
	return t
}

// withMinReclaim sets t's minimum reclaim.
func withMinReclaim(t Threshold, v Value) Threshold {
	t.MinReclaim = &v
	return t
}
