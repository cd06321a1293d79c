package devicemanager

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
)

// resourceState is what the Manager knows about one device resource. Its
// fields are guarded by Manager.mu. The sets, slices and maps they hold are
// replaced, never modified in place, so a reader may keep one after
// unlocking (the checkpoint writer keeps order).
type resourceState struct {
	healthy   sets.Set[string]
	unhealthy sets.Set[string]
	// order is healthy, sorted.
	order []string
	// numa maps a device ID to the NUMA nodes it reported; absent or empty
	// means no topology.
	numa map[string][]int64
	// ep is the live endpoint, nil for a resource restored from the
	// checkpoint that has not re-registered.
	ep *endpoint
	// stoppedAt is when the resource lost its plugin; zero while connected.
	stoppedAt time.Time
}

func newResourceState() *resourceState {
	return &resourceState{healthy: sets.New[string](), unhealthy: sets.New[string](), numa: map[string][]int64{}}
}

// deviceSets is a resource's device state built from one ListAndWatch
// message, outside any lock: under Manager.mu an update only assigns it.
type deviceSets struct {
	healthy   sets.Set[string]
	unhealthy sets.Set[string]
	// order is the healthy IDs sorted: the default allocation order.
	order   []string
	numa    map[string][]int64
	dropped int // devices without an ID
}

// newDeviceSets reads one ListAndWatch message. A device listed twice takes
// its last health; a device without an ID is dropped and counted.
func newDeviceSets(devs []*pluginapi.Device) deviceSets {
	ds := deviceSets{
		healthy:   make(sets.Set[string], len(devs)),
		unhealthy: sets.New[string](),
		numa:      make(map[string][]int64, len(devs)),
		order:     make([]string, 0, len(devs)),
	}
	var nodes []int64 // shared backing store for the NUMA lists
	for _, d := range devs {
		if d == nil || d.ID == "" {
			ds.dropped++
			continue
		}
		if d.Health == pluginapi.Healthy {
			ds.unhealthy.Delete(d.ID)
			ds.healthy.Insert(d.ID)
		} else {
			ds.healthy.Delete(d.ID)
			ds.unhealthy.Insert(d.ID)
		}
		start := len(nodes)
		for _, n := range d.GetTopology().GetNodes() {
			if n != nil {
				nodes = append(nodes, n.ID)
			}
		}
		ds.numa[d.ID] = nodes[start:len(nodes):len(nodes)]
	}
	// Plugins usually list devices in order: keep it when they do.
	for _, d := range devs {
		if d != nil && ds.healthy.Has(d.ID) {
			ds.order = append(ds.order, d.ID)
		}
	}
	if !slices.IsSorted(ds.order) || len(ds.order) != ds.healthy.Len() {
		ds.order = sortedIDs(ds.healthy)
	}
	return ds
}

// setDevices gives r the device sets of ds, connected. Call with
// Manager.mu held.
func (r *resourceState) setDevices(ds deviceSets) {
	r.healthy, r.unhealthy, r.order, r.numa = ds.healthy, ds.unhealthy, ds.order, ds.numa
	r.stoppedAt = time.Time{}
}

// setUnhealthy makes every device of r unhealthy. The stop time is the
// first loss: failed reconnects do not extend the grace period. Call with
// Manager.mu held.
func (r *resourceState) setUnhealthy(now time.Time) {
	r.unhealthy = r.unhealthy.Union(r.healthy)
	r.healthy = sets.New[string]()
	r.order = nil
	if r.stoppedAt.IsZero() {
		r.stoppedAt = now
	}
}

// graceExpired reports whether the resource has been without a plugin for
// longer than grace at now.
func (r *resourceState) graceExpired(now time.Time, grace time.Duration) bool {
	return !r.stoppedAt.IsZero() && now.Sub(r.stoppedAt) > grace
}

// perNUMA groups ids by the NUMA nodes the resource reported for them.
func (r *resourceState) perNUMA(ids []string) checkpoint.DevicesPerNUMA {
	out := checkpoint.DevicesPerNUMA{}
	for _, id := range ids {
		nodes := r.numa[id]
		if len(nodes) == 0 {
			out[checkpoint.NodeWithoutTopology] = append(out[checkpoint.NodeWithoutTopology], id)
			continue
		}
		for _, n := range nodes {
			out[n] = append(out[n], id)
		}
	}
	return out
}

// allocation is one resource's devices for one container and the plugin's
// answer for them.
type allocation struct {
	devices checkpoint.DevicesPerNUMA
	ids     []string // sorted, each once
	resp    *pluginapi.ContainerAllocateResponse
}

// inFlight counts a resource's reservations whose Allocate RPC is in
// progress. settled is closed, and replaced, whenever one of them ends.
type inFlight struct {
	n       int
	settled chan struct{}
}

// podDevices maps pod UID → container name → resource name → allocation.
type podDevices map[string]map[string]map[string]*allocation

func (p podDevices) get(pod, ctr, res string) *allocation {
	return p[pod][ctr][res]
}

func (p podDevices) put(pod, ctr, res string, a *allocation) {
	if p[pod] == nil {
		p[pod] = map[string]map[string]*allocation{}
	}
	if p[pod][ctr] == nil {
		p[pod][ctr] = map[string]*allocation{}
	}
	p[pod][ctr][res] = a
}

// remove deletes one allocation, and the maps it leaves empty.
func (p podDevices) remove(pod, ctr, res string) {
	delete(p[pod][ctr], res)
	if len(p[pod][ctr]) == 0 {
		delete(p[pod], ctr)
	}
	if len(p[pod]) == 0 {
		delete(p, pod)
	}
}

// inUse counts, per resource and device, the allocations and in-flight
// reservations holding the device. A device shared by an init container and
// an app container of one pod is counted twice.
type inUse map[string]map[string]int

func (u inUse) add(res string, ids ...string) {
	if u[res] == nil {
		u[res] = map[string]int{}
	}
	for _, id := range ids {
		u[res][id]++
	}
}

func (u inUse) remove(res string, ids ...string) {
	m := u[res]
	for _, id := range ids {
		if m[id] <= 1 {
			delete(m, id)
		} else {
			m[id]--
		}
	}
	if len(m) == 0 {
		delete(u, res)
	}
}

func (u inUse) has(res, id string) bool { return u[res][id] > 0 }

// sortedIDs returns the set's members in order.
func sortedIDs(s sets.Set[string]) []string {
	out := s.UnsortedList()
	slices.Sort(out)
	return out
}

// quoted renders device IDs for logs with Go quoting, so NUL and control
// characters in plugin-chosen IDs cannot corrupt a log line.
type quoted []string

func (q quoted) LogValue() slog.Value { return slog.StringValue(fmt.Sprintf("%q", []string(q))) }
