package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// AllocatePod assigns devices to every container of pod that requests device
// resources: init containers first, in order, then app containers, as pod
// admission does. See Allocate. The pod counts as in admission (its devices
// are never freed as inactive) for the whole call, so that calls for
// different pods may overlap: each waits only on the plugins of the
// resources it asks for. On error the pod holds none of the devices this
// call assigned to any of its containers: they are free again at once.
func (m *Manager) AllocatePod(ctx context.Context, pod *v1.Pod) error {
	uid := string(pod.UID)
	defer m.admitting(uid)()
	var got []assigned
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			a, err := m.allocate(ctx, pod, &cs[i])
			got = append(got, a...)
			if err != nil {
				m.release(pod, got)
				return err
			}
		}
	}
	return nil
}

// RequestsDevices reports whether a container of pod, init containers
// included, asks for a device resource: one that a plugin registered or
// that some container still holds. Only such a pod's AllocatePod may wait
// on a plugin (or assign anything); admission need not wait for the others.
func (m *Manager) RequestsDevices(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if len(m.deviceRequests(&cs[i])) > 0 {
				return true
			}
		}
	}
	return false
}

// Allocate assigns devices of every device resource in container's limits,
// calls the plugins' Allocate RPC (bounded by Config.AllocateTimeout) and
// keeps their answers for ContainerOptions. The checkpoint is written in the
// background; ContainerOptions waits for it. Call it for a pod's init containers in order before its app
// containers (AllocatePod does): app containers take the devices that
// non-restartable init containers of the same pod used before any others;
// restartable (sidecar) init containers keep theirs.
//
// A container that already holds devices keeps them (a restart); a changed
// count is an error. Before choosing, devices of pods that Deps.ActivePods no
// longer lists are freed. The choice of devices is made under the Manager's
// lock, the RPCs outside it: calls for other resources go ahead while a
// plugin is slow, and a device reserved for one call is never chosen by
// another. Errors read exactly as the kubelet's and match, with
// errors.Is, ErrUnavailable (unregistered resource, no or too few healthy
// devices, previously assigned devices unhealthy) or ErrPlugin (an RPC failed
// or timed out); on error the container holds none of the devices this call
// assigned.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container) error {
	defer m.admitting(string(pod.UID))()
	got, err := m.allocate(ctx, pod, container)
	if err != nil {
		m.release(pod, got)
	}
	return err
}

// admitting marks the pod as in admission until the returned func is
// called: its devices are not freed as inactive meanwhile.
func (m *Manager) admitting(uid string) (done func()) {
	m.mu.Lock()
	m.inAdmission[uid]++
	m.lastAdmitted = uid
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.inAdmission[uid]--; m.inAdmission[uid] <= 0 {
			delete(m.inAdmission, uid)
		}
		m.mu.Unlock()
	}
}

// assigned names one resource newly assigned to one container.
type assigned struct{ ctr, res string }

// allocate is Allocate for a pod marked in admission. It returns what it
// newly assigned, also on error (the resources before the failing one).
func (m *Manager) allocate(ctx context.Context, pod *v1.Pod, container *v1.Container) ([]assigned, error) {
	uid := string(pod.UID)
	reqs := m.deviceRequests(container)

	m.freeInactive(ctx)
	var got []assigned
	for _, r := range reqs {
		c, err := m.allocateResource(ctx, pod, container.Name, r.name, r.count)
		if err != nil {
			return got, err
		}
		if c {
			got = append(got, assigned{container.Name, r.name})
		}
	}

	restartable := false
	isInit := false
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == container.Name {
			isInit = true
			restartable = nodeapi.IsSidecar(&pod.Spec.InitContainers[i])
		}
	}
	m.mu.Lock()
	// The reuse sets of pods no longer in admission are done with; those
	// of pods whose admission overlaps this one are still needed.
	for other := range m.reuse {
		if other != uid && m.inAdmission[other] == 0 {
			delete(m.reuse, other)
		}
	}
	if m.reuse[uid] == nil {
		m.reuse[uid] = map[string]sets.Set[string]{}
	}
	for res, a := range m.pods[uid][container.Name] {
		if isInit && !restartable {
			m.reuse[uid][res] = m.reuse[uid][res].Union(sets.New(a.ids...))
		} else if m.reuse[uid][res] != nil {
			m.reuse[uid][res].Delete(a.ids...)
		}
	}
	m.mu.Unlock()

	if len(got) > 0 {
		// Written in the background; ContainerOptions waits for it, so
		// the assignment is on disk before the container can use it.
		m.notify()
	}
	return got, nil
}

// release frees what a failed allocation of pod assigned: the pod will not
// run (admission rejects it), so its new devices go back at once rather
// than when the pod is next seen inactive. Devices the pod held before the
// call stay.
func (m *Manager) release(pod *v1.Pod, got []assigned) {
	if len(got) == 0 {
		return
	}
	uid := string(pod.UID)
	var freed []string
	m.mu.Lock()
	for _, g := range got {
		a := m.pods.get(uid, g.ctr, g.res)
		if a == nil {
			continue
		}
		m.used.remove(g.res, a.ids...)
		m.pods.remove(uid, g.ctr, g.res)
		freed = append(freed, a.ids...)
	}
	delete(m.reuse, uid)
	m.mu.Unlock()
	m.log.Info("Released the devices of a pod whose allocation failed", "pod", nodeapi.PodName(pod), "podUID", uid, "devices", quoted(freed))
	m.notify()
}

type deviceRequest struct {
	name  string
	count int
}

// deviceRequests lists the container's limits that name device resources:
// registered ones and ones that some container still holds. Other extended
// resources are not the device manager's business.
func (m *Manager) deviceRequests(c *v1.Container) []deviceRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []deviceRequest
	for name, q := range c.Resources.Limits {
		res := string(name)
		_, registered := m.resources[res]
		_, held := m.used[res]
		if !registered && !held {
			continue
		}
		if n := q.Value(); n > 0 {
			out = append(out, deviceRequest{name: res, count: int(n)})
		}
	}
	slices.SortFunc(out, func(a, b deviceRequest) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return out
}

// freeInactive frees the devices of pods that are not active, when the pod
// sources are complete. Pods in admission (an Allocate in flight, or the
// last pod Allocate was called for, whose other containers may follow) count
// as active.
func (m *Manager) freeInactive(ctx context.Context) {
	if m.deps.ActivePods == nil || (m.deps.SourcesReady != nil && !m.deps.SourcesReady()) {
		return
	}
	active := sets.New[string]()
	for _, p := range m.deps.ActivePods() {
		active.Insert(string(p.UID))
	}
	inactive := func() []string {
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []string
		for uid := range m.pods {
			if !active.Has(uid) && m.inAdmission[uid] == 0 && uid != m.lastAdmitted {
				out = append(out, uid)
			}
		}
		return out
	}
	candidates := inactive()
	// A pod whose containers still run with their devices keeps them, even
	// when ActivePods does not list it (a pod table not yet complete).
	keep := m.stillHeld(ctx, candidates)
	var freed []string
	m.mu.Lock()
	for _, uid := range candidates {
		ctrs, ok := m.pods[uid]
		if !ok || keep[uid] || active.Has(uid) || m.inAdmission[uid] > 0 || uid == m.lastAdmitted {
			continue
		}
		for _, byRes := range ctrs {
			for res, a := range byRes {
				m.used.remove(res, a.ids...)
			}
		}
		delete(m.pods, uid)
		delete(m.reuse, uid)
		freed = append(freed, uid)
	}
	m.mu.Unlock()
	if len(freed) > 0 {
		slices.Sort(freed)
		m.log.Info("Freed devices of pods that are no longer active", "podUIDs", freed)
		m.notify()
	}
}

// choice is the outcome of the locked part of an allocation.
type choice struct {
	devices  []string // all devices for the container, sorted
	reserved []string // the new ones, counted in used until committed or released
	client   rpcClient
	opts     *pluginapi.DevicePluginOptions
}

// allocateResource gives one resource to one container. It reports whether
// it assigned anything new.
func (m *Manager) allocateResource(ctx context.Context, pod *v1.Pod, ctr, res string, need int) (bool, error) {
	uid := string(pod.UID)
	running := false
	m.mu.Lock()
	held := m.pods.get(uid, ctr, res) != nil
	m.mu.Unlock()
	// A container that runs keeps its devices without any check while the
	// pod sources are incomplete (the kubelet's rule), and, beyond the
	// kubelet, whenever it already holds them: re-admitting a running pod
	// after a restart of the agent never fails on its plugin being away.
	if (m.deps.SourcesReady != nil && !m.deps.SourcesReady()) || held {
		running = m.containerRunning(ctx, uid, ctr)
	}
	log := m.log.With("pod", nodeapi.PodName(pod), "podUID", uid, "containerName", ctr, "resourceName", res)

	var ch *choice
	var askPreferred *pluginapi.ContainerPreferredAllocationRequest
	var err error
	for waited := false; ; waited = true {
		var wait <-chan struct{}
		ch, askPreferred, wait, err = m.chooseOrWait(uid, ctr, res, need, running, nil)
		if wait == nil {
			break
		}
		// Too few free devices, but other allocations of the resource
		// are in flight: as the kubelet, which allocates one pod after
		// the other, the container gets the devices a failed one frees.
		if !waited {
			log.Info("Waiting for devices reserved by allocations in progress", "err", err)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return false, err
		}
	}
	if err != nil || ch == nil {
		return false, err
	}
	if askPreferred != nil {
		preferred, err := m.preferred(ctx, ch.client, askPreferred)
		if err != nil {
			return false, err
		}
		// With the plugin's answer, too few devices is final (another
		// container took some meanwhile), and chooseOrWait never waits.
		ch, _, _, err = m.chooseOrWait(uid, ctr, res, need, running, preferred)
		if err != nil || ch == nil {
			return false, err
		}
	}

	start := m.clock.Now()
	// AllocateTimeout is a network deadline: a real-time context deadline,
	// not the Manager's clock.
	actx, cancel := context.WithTimeout(ctx, m.cfg.AllocateTimeout)
	resp, err := ch.client.Allocate(actx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ch.devices}},
	})
	cancel()
	m.metrics.allocDuration.WithLabelValues(res).Observe(m.clock.Since(start).Seconds())
	if err == nil && len(resp.GetContainerResponses()) == 0 {
		err = fmt.Errorf("no containers return in allocation response %v", resp)
	}
	if err != nil {
		m.mu.Lock()
		m.used.remove(res, ch.reserved...)
		m.settle(res, ch)
		m.mu.Unlock()
		// The RPC's error as it is, as the kubelet reports it.
		return false, classed(ErrPlugin, "%w", err)
	}

	m.mu.Lock()
	rs := m.resources[res]
	if rs == nil {
		rs = newResourceState()
	}
	m.pods.put(uid, ctr, res, &allocation{devices: rs.perNUMA(ch.devices), ids: ch.devices, resp: resp.ContainerResponses[0]})
	// The reused devices are now held by this container as well.
	m.used.add(res, without(ch.devices, ch.reserved)...)
	m.settle(res, ch)
	m.mu.Unlock()
	log.Info("Allocated devices", "devices", quoted(ch.devices))
	return true, nil
}

// chooseOrWait is choose under m.mu. A choice that reserved devices counts
// as in flight until settle. When there are too few free devices while
// other reservations of res are in flight, and preferred is nil, it also
// returns a channel closed when one of them settles: the caller may wait
// for it and choose again.
func (m *Manager) chooseOrWait(uid, ctr, res string, need int, running bool, preferred []string) (*choice, *pluginapi.ContainerPreferredAllocationRequest, <-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ask, err := m.choose(uid, ctr, res, need, running, preferred)
	var short *shortError
	if f := m.inFlight[res]; f != nil && preferred == nil && errors.As(err, &short) {
		return nil, nil, f.settled, err
	}
	if ch != nil && len(ch.reserved) > 0 {
		f := m.inFlight[res]
		if f == nil {
			f = &inFlight{settled: make(chan struct{})}
			m.inFlight[res] = f
		}
		f.n++
	}
	return ch, ask, nil, err
}

// settle ends ch's reservation of res being in flight (its devices are now
// assigned or free again) and wakes the allocations waiting for one. Call
// with m.mu held.
func (m *Manager) settle(res string, ch *choice) {
	f := m.inFlight[res]
	if len(ch.reserved) == 0 || f == nil {
		return
	}
	close(f.settled) // a close, not a send: never blocks
	f.settled = make(chan struct{})
	if f.n--; f.n <= 0 {
		delete(m.inFlight, res)
	}
}

func without(all, drop []string) []string {
	d := sets.New(drop...)
	var out []string
	for _, id := range all {
		if !d.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

// choose decides, under m.mu, which devices the container gets. It returns
// a nil choice when nothing needs allocating. When the plugin can suggest a
// choice and preferred is nil, it returns the request to send instead of
// reserving; the caller asks outside the lock and calls again with the
// answer. A non-nil choice has its new devices reserved in m.used.
func (m *Manager) choose(uid, ctr, res string, need int, running bool, preferred []string) (*choice, *pluginapi.ContainerPreferredAllocationRequest, error) {
	prev := m.pods.get(uid, ctr, res)
	if prev != nil && len(prev.ids) != need {
		return nil, nil, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d",
			uid, ctr, res, len(prev.ids), need)
	}
	if running {
		return nil, nil, nil
	}
	rs, ok := m.resources[res]
	if !ok {
		return nil, nil, classed(ErrUnavailable, "cannot allocate unregistered device %s", res)
	}
	if rs.healthy.Len() == 0 {
		return nil, nil, classed(ErrUnavailable, "no healthy devices present; cannot allocate unhealthy devices %s", res)
	}
	if prev != nil {
		if !rs.healthy.HasAll(prev.ids...) {
			return nil, nil, classed(ErrUnavailable, "previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s", res)
		}
		return nil, nil, nil
	}
	if rs.ep == nil {
		return nil, nil, errStopped(res)
	}

	// Devices the pod's init containers used come first.
	var picked []string
	for _, id := range sortedIDs(m.reuse[uid][res]) {
		if len(picked) == need {
			break
		}
		picked = append(picked, id)
	}
	remaining := need - len(picked)
	if remaining == 0 {
		return &choice{devices: sorted(picked), client: rs.ep.client, opts: rs.ep.opts}, nil, nil
	}
	if preferred == nil && rs.ep.opts.GetGetPreferredAllocationAvailable() {
		var available []string
		for _, id := range rs.order {
			if !m.used.has(res, id) {
				available = append(available, id)
			}
		}
		if len(available) < remaining {
			return nil, nil, errTooFew(res, remaining, len(available))
		}
		if len(available) > remaining {
			return &choice{client: rs.ep.client}, &pluginapi.ContainerPreferredAllocationRequest{
				AvailableDeviceIDs:   append(slices.Clone(picked), available...),
				MustIncludeDeviceIDs: slices.Clone(picked),
				AllocationSize:       int32(need),
			}, nil
		}
	}
	// The plugin's suggestion first, as far as it is free and valid, then
	// the free healthy devices in order.
	// taken mirrors reserved as a set, so that each check is O(1) and a
	// large request stays linear in the devices.
	reserved := make([]string, 0, remaining)
	taken := make(map[string]struct{}, remaining)
	reserve := func(id string) {
		reserved = append(reserved, id)
		taken[id] = struct{}{}
	}
	for _, id := range preferred {
		if len(reserved) == remaining {
			break
		}
		if _, dup := taken[id]; !dup && rs.healthy.Has(id) && !m.used.has(res, id) {
			reserve(id)
		}
	}
	free := len(reserved)
	for _, id := range rs.order {
		if _, dup := taken[id]; dup || m.used.has(res, id) {
			continue
		}
		free++
		if len(reserved) < remaining {
			reserve(id)
		}
		if len(reserved) == remaining && preferred == nil {
			break
		}
	}
	if len(reserved) < remaining {
		if preferred != nil {
			// Enough devices were free before the plugin was asked;
			// another container took some meanwhile.
			return nil, nil, classed(ErrUnavailable, "unexpectedly allocated less resources than required. Requested: %d, Got: %d",
				need, len(picked)+len(reserved))
		}
		return nil, nil, errTooFew(res, remaining, free)
	}
	m.used.add(res, reserved...)
	return &choice{devices: sorted(append(picked, reserved...)), reserved: reserved, client: rs.ep.client, opts: rs.ep.opts}, nil, nil
}

func errTooFew(res string, requested, available int) error {
	return &shortError{classed(ErrUnavailable, "requested number of devices unavailable for %s. Requested: %d, Available: %d",
		res, requested, available)}
}

// shortError marks errTooFew's errors: too few free devices, which devices
// in flight may still change.
type shortError struct{ error }

func (e *shortError) Unwrap() error { return e.error }

func sorted(ids []string) []string {
	slices.Sort(ids)
	return ids
}

// preferred asks the plugin for its choice.
func (m *Manager) preferred(ctx context.Context, c rpcClient, req *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	pctx, cancel := context.WithTimeout(ctx, m.cfg.AllocateTimeout)
	defer cancel()
	resp, err := c.GetPreferredAllocation(pctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{req},
	})
	if err != nil {
		return nil, classed(ErrPlugin, "device plugin GetPreferredAllocation rpc failed with err: %w", err)
	}
	if len(resp.GetContainerResponses()) == 0 {
		return []string{}, nil
	}
	ids := resp.ContainerResponses[0].GetDeviceIDs()
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}
