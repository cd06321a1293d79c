package containergc

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrInvalidPolicy is the class of Policy.Validate's errors.
var ErrInvalidPolicy = errors.New("invalid container GC policy")

// The CRI labels the kubelet (and nodekeeper's pod workers) put on containers.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// Policy is the container GC policy: the kubelet's deprecated flags
// --minimum-container-ttl-duration, --maximum-dead-containers-per-container and
// --maximum-dead-containers.
type Policy struct {
	// MinAge: containers created less than this long ago are not removed.
	MinAge time.Duration
	// MaxPerPodContainer: dead containers kept per (pod, container name); < 0 means no limit.
	MaxPerPodContainer int
	// MaxContainers: dead containers kept on the node; < 0 means no limit.
	MaxContainers int
}

// DefaultPolicy is the kubelet's: MinAge 0, one dead container per pod
// container, no node limit.
func DefaultPolicy() Policy { return Policy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1} }

// Validate rejects a negative MinAge.
func (p Policy) Validate() error {
	if p.MinAge < 0 {
		return fmt.Errorf("%w: minimum container age %v must not be negative", ErrInvalidPolicy, p.MinAge)
	}
	return nil
}

// PodState tells GC what became of a pod. The agent's pod table implements it;
// it must be safe for concurrent use and must not block.
type PodState interface {
	// IsPodDeleted reports that the pod is gone (deleted, or unknown once all
	// pod sources are ready): all its dead containers and sandboxes may go.
	IsPodDeleted(podUID string) bool
	// IsPodTerminated reports that the pod's containers have all terminated and
	// will not restart; eviction's reclaim removes its dead containers too.
	IsPodTerminated(podUID string) bool
}

// Removal is one container or sandbox a plan removes.
type Removal struct {
	ID        string
	PodUID    string
	Name      string // container name; empty for sandboxes
	CreatedAt time.Time
	// Unknown: the container's state is unknown; it is stopped before removal.
	Unknown bool
	Why     string
}

// Why values.
const (
	WhyPodDeleted    = "pod deleted"
	WhyPodTerminated = "pod terminated"
	WhyPerContainer  = "over maxPerPodContainer"
	WhyTotal         = "over maxContainers"
	WhyOldSandbox    = "older sandbox of the pod"
)

// dead is an evictable container.
type dead struct {
	Removal
	key string // pod UID + "/" + container name
}

// podUIDOf returns a container's pod UID: its label, else its sandbox's UID,
// else its sandbox ID.
func podUIDOf(c *runtimeapi.Container, sandboxUID map[string]string) string {
	if uid := c.GetLabels()[LabelPodUID]; uid != "" {
		return uid
	}
	if uid := sandboxUID[c.GetPodSandboxId()]; uid != "" {
		return uid
	}
	return c.GetPodSandboxId()
}

func nameOf(c *runtimeapi.Container) string {
	if n := c.GetLabels()[LabelContainerName]; n != "" {
		return n
	}
	return c.GetMetadata().GetName()
}

func removeReason(pods PodState, uid string, evictNonDeleted bool) (string, bool) {
	if pods == nil {
		return "", false
	}
	if pods.IsPodDeleted(uid) {
		return WhyPodDeleted, true
	}
	if evictNonDeleted && pods.IsPodTerminated(uid) {
		return WhyPodTerminated, true
	}
	return "", false
}

// newestFirst orders by creation time, newest first, then by ID.
func newestFirst(a, b Removal) int {
	if n := b.CreatedAt.Compare(a.CreatedAt); n != 0 {
		return n
	}
	return cmp.Compare(a.ID, b.ID)
}

// PlanContainers returns the dead containers to remove at now, in removal order.
// sandboxes only resolve pod UIDs of containers without the pod UID label.
// evictNonDeleted also removes every dead container of terminated pods.
func PlanContainers(containers []*runtimeapi.Container, sandboxes []*runtimeapi.PodSandbox, p Policy, pods PodState, evictNonDeleted bool, now time.Time) []Removal {
	sandboxUID := make(map[string]string, len(sandboxes))
	for _, s := range sandboxes {
		sandboxUID[s.GetId()] = s.GetMetadata().GetUid()
	}
	units := map[string][]dead{}
	for _, c := range containers {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		created := time.Unix(0, c.GetCreatedAt())
		if now.Sub(created) < p.MinAge {
			continue
		}
		uid, name := podUIDOf(c, sandboxUID), nameOf(c)
		d := dead{Removal: Removal{ID: c.GetId(), PodUID: uid, Name: name, CreatedAt: created,
			Unknown: c.GetState() == runtimeapi.ContainerState_CONTAINER_UNKNOWN}, key: uid + "/" + name}
		units[d.key] = append(units[d.key], d)
	}
	keys := make([]string, 0, len(units))
	for k, u := range units {
		slices.SortFunc(u, func(a, b dead) int { return newestFirst(a.Removal, b.Removal) })
		keys = append(keys, k)
	}
	slices.Sort(keys)

	var out []Removal
	take := func(ds []dead, why string) {
		for _, d := range ds {
			d.Why = why
			out = append(out, d.Removal)
		}
	}
	// Pods that are gone lose all their dead containers.
	for _, k := range keys {
		u := units[k]
		if why, ok := removeReason(pods, u[0].PodUID, evictNonDeleted); ok {
			take(u, why)
			delete(units, k)
		}
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { _, ok := units[k]; return !ok })
	// keepNewest cuts every group to n, oldest removed first.
	keepNewest := func(n int, why string) {
		for _, k := range keys {
			if u := units[k]; len(u) > n {
				take(oldestFirst(u[n:]), why)
				units[k] = u[:n]
			}
		}
	}
	if p.MaxPerPodContainer >= 0 {
		keepNewest(p.MaxPerPodContainer, WhyPerContainer)
	}
	if p.MaxContainers >= 0 && total(units) > p.MaxContainers {
		keepNewest(max(p.MaxContainers/max(len(keys), 1), 1), WhyTotal)
		if total(units) > p.MaxContainers {
			var flat []dead
			for _, k := range keys {
				flat = append(flat, units[k]...)
			}
			slices.SortFunc(flat, func(a, b dead) int { return newestFirst(a.Removal, b.Removal) })
			take(oldestFirst(flat[p.MaxContainers:]), WhyTotal)
		}
	}
	return out
}

// oldestFirst reverses a newest-first slice.
func oldestFirst(ds []dead) []dead {
	out := slices.Clone(ds)
	slices.Reverse(out)
	return out
}

func total(units map[string][]dead) int {
	n := 0
	for _, u := range units {
		n += len(u)
	}
	return n
}

// PlanSandboxes returns the sandboxes to remove given the containers that
// remain. A sandbox is kept while it is ready or holds a container. Of a pod
// that still exists the newest sandbox is kept; of a deleted pod (or, with
// evictNonDeleted, a terminated one) none is.
func PlanSandboxes(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container, pods PodState, evictNonDeleted bool) []Removal {
	hasContainers := make(map[string]bool, len(containers))
	for _, c := range containers {
		hasContainers[c.GetPodSandboxId()] = true
	}
	type sb struct {
		Removal
		active bool
	}
	byPod := map[string][]sb{}
	for _, s := range sandboxes {
		uid := s.GetMetadata().GetUid()
		byPod[uid] = append(byPod[uid], sb{
			Removal: Removal{ID: s.GetId(), PodUID: uid, CreatedAt: time.Unix(0, s.GetCreatedAt())},
			active:  s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || hasContainers[s.GetId()],
		})
	}
	uids := make([]string, 0, len(byPod))
	for uid := range byPod {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var out []Removal
	for _, uid := range uids {
		sbs := byPod[uid]
		slices.SortFunc(sbs, func(a, b sb) int { return newestFirst(a.Removal, b.Removal) })
		keep, why := 1, WhyOldSandbox
		if w, ok := removeReason(pods, uid, evictNonDeleted); ok {
			keep, why = 0, w
		}
		for i := len(sbs) - 1; i >= keep; i-- {
			if !sbs[i].active {
				sbs[i].Why = why
				out = append(out, sbs[i].Removal)
			}
		}
	}
	return out
}
