package devicemanager

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// AnnotationDevices is the container annotation ContainerOptions adds: the
// container's device IDs by resource name, as a JSON object of string
// arrays. It lets the assignments be rebuilt from the runtime when the
// checkpoint is lost or corrupt.
const AnnotationDevices = "devices.nodekeeper.io/ids"

// The CRI labels that name a container's pod and container (the kubelet's).
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

// ReasonCheckpointRecovered is the node event's reason when the assignments
// were rebuilt from the runtime.
const ReasonCheckpointRecovered = "DeviceCheckpointRecovered"

// HeldDevices is what one container of the runtime holds, by its
// AnnotationDevices annotation.
type HeldDevices struct {
	PodUID, ContainerName string
	// Devices maps a resource name to device IDs.
	Devices map[string][]string
}

// ContainerLister is the part of CRI RuntimeDevices uses.
type ContainerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// RuntimeDevices returns a Deps.RuntimeDevices that reads the devices of the
// runtime's containers that have not exited (created or running) from their
// AnnotationDevices annotations. A container whose annotation does not parse
// is skipped.
func RuntimeDevices(rt ContainerLister) func(ctx context.Context) ([]HeldDevices, error) {
	return func(ctx context.Context) ([]HeldDevices, error) {
		ctrs, err := rt.ListContainers(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("list containers for their devices: %w", err)
		}
		var out []HeldDevices
		for _, c := range ctrs {
			if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING && c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
				continue
			}
			devs, ok := parseDevicesAnnotation(c.Annotations[AnnotationDevices])
			uid, name := c.Labels[labelPodUID], c.Labels[labelContainerName]
			if !ok || uid == "" || name == "" {
				continue
			}
			out = append(out, HeldDevices{PodUID: uid, ContainerName: name, Devices: devs})
		}
		return out, nil
	}
}

func parseDevicesAnnotation(s string) (map[string][]string, bool) {
	if s == "" {
		return nil, false
	}
	var devs map[string][]string
	if err := json.Unmarshal([]byte(s), &devs); err != nil || len(devs) == 0 {
		return nil, false
	}
	return devs, true
}

// devicesAnnotation renders ids (resource → device IDs) for AnnotationDevices.
func devicesAnnotation(ids map[string][]string) string {
	b, err := json.Marshal(ids)
	if err != nil {
		panic(fmt.Sprintf("devicemanager: marshal device IDs: %v", err)) // a map of string slices always marshals
	}
	return string(b)
}

// recoverFromRuntime rebuilds the assignments of the runtime's live
// containers after the checkpoint was found unreadable: their devices count
// as used again, so they are never given to another container, and the
// plugin's answer is asked for again (with the same devices) when such a
// container is next created. It reports the outcome as a node event and in
// nodekeeper_device_checkpoint_recoveries_total.
func (m *Manager) recoverFromRuntime(ctx context.Context) {
	held, err := m.deps.RuntimeDevices(ctx)
	if err != nil {
		m.metrics.recoveries.WithLabelValues("failed").Inc()
		m.log.Error("Device checkpoint unreadable and the runtime's containers could not be read; device assignments are lost", "err", err)
		m.event(v1.EventTypeWarning, ReasonCheckpointRecovered,
			"Device checkpoint was unreadable (%v); reading the runtime's containers failed (%v): device assignments are lost", m.corrupt, err)
		return
	}
	containers, assignments := 0, 0
	m.mu.Lock()
	for _, h := range held {
		added := false
		for res, ids := range h.Devices {
			ids = slices.Compact(slices.Sorted(slices.Values(ids)))
			if len(ids) == 0 || m.pods.get(h.PodUID, h.ContainerName, res) != nil {
				continue
			}
			m.pods.put(h.PodUID, h.ContainerName, res, &allocation{
				devices: checkpoint.DevicesPerNUMA{checkpoint.NodeWithoutTopology: ids}, ids: ids,
			})
			m.used.add(res, ids...)
			assignments++
			added = true
		}
		if added {
			containers++
		}
	}
	m.mu.Unlock()
	m.metrics.recoveries.WithLabelValues("rebuilt").Inc()
	m.metrics.recovered.WithLabelValues().Add(float64(assignments))
	m.log.Warn("Device checkpoint was unreadable; rebuilt device assignments from the runtime's containers",
		"containers", containers, "assignments", assignments, "checkpointErr", m.corrupt)
	m.event(v1.EventTypeWarning, ReasonCheckpointRecovered,
		"Device checkpoint was unreadable (%v); rebuilt %d device assignments of %d containers from the runtime", m.corrupt, assignments, containers)
	m.notify()
}

func (m *Manager) event(typ, reason, format string, args ...any) {
	if m.deps.Recorder == nil {
		return
	}
	m.deps.Recorder.Eventf(nodeapi.NodeRef(m.deps.NodeName), typ, reason, format, args...)
}

// refreshRecovered asks the plugins for their answer to the container's
// recovered assignments (which have none), with the same devices.
func (m *Manager) refreshRecovered(ctx context.Context, uid, ctr string) error {
	type todo struct {
		res    string
		ids    []string
		client rpcClient
	}
	var calls []todo
	m.mu.Lock()
	for _, res := range sortedKeys(m.pods[uid][ctr]) {
		a := m.pods[uid][ctr][res]
		if a.resp != nil {
			continue
		}
		rs := m.resources[res]
		if rs == nil || rs.ep == nil {
			m.mu.Unlock()
			return classed(ErrUnavailable, "devices %q of resource %s were recovered from the runtime and its plugin is not registered", a.ids, res)
		}
		calls = append(calls, todo{res: res, ids: a.ids, client: rs.ep.client})
	}
	m.mu.Unlock()
	for _, c := range calls {
		actx, cancel := context.WithTimeout(ctx, m.cfg.AllocateTimeout)
		resp, err := c.client.Allocate(actx, &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: c.ids}},
		})
		cancel()
		if err == nil && len(resp.GetContainerResponses()) == 0 {
			err = fmt.Errorf("no containers return in allocation response %v", resp)
		}
		if err != nil {
			return classed(ErrPlugin, "%w", err)
		}
		m.mu.Lock()
		if a := m.pods.get(uid, ctr, c.res); a != nil && a.resp == nil {
			devices := checkpoint.DevicesPerNUMA{checkpoint.NodeWithoutTopology: a.ids}
			if rs := m.resources[c.res]; rs != nil {
				devices = rs.perNUMA(a.ids)
			}
			m.pods.put(uid, ctr, c.res, &allocation{devices: devices, ids: a.ids, resp: resp.ContainerResponses[0]})
		}
		m.mu.Unlock()
	}
	if len(calls) > 0 {
		m.notify()
	}
	return nil
}

// stillHeld returns the pods among uids whose containers the runtime still
// runs with devices; nil without Deps.RuntimeDevices or when the runtime
// cannot be read (then every pod among uids is kept).
func (m *Manager) stillHeld(ctx context.Context, uids []string) (keep map[string]bool) {
	if m.deps.RuntimeDevices == nil || len(uids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.DialTimeout)
	defer cancel()
	held, err := m.deps.RuntimeDevices(ctx)
	keep = map[string]bool{}
	if err != nil {
		m.log.Error("Listing the runtime's containers before freeing devices; keeping them", "err", err)
		for _, u := range uids {
			keep[u] = true
		}
		return keep
	}
	for _, h := range held {
		keep[h.PodUID] = true
	}
	return keep
}

// containerRunning reports whether the runtime runs the container: by
// Deps.ContainerRunning, else by Deps.RuntimeDevices (a live container with
// devices), else false.
func (m *Manager) containerRunning(ctx context.Context, uid, ctr string) bool {
	if m.deps.ContainerRunning != nil {
		return m.deps.ContainerRunning(uid, ctr)
	}
	if m.deps.RuntimeDevices == nil {
		return false
	}
	held, err := m.deps.RuntimeDevices(ctx)
	if err != nil {
		m.log.Error("Listing the runtime's containers", "err", err)
		return false
	}
	for _, h := range held {
		if h.PodUID == uid && h.ContainerName == ctr {
			return true
		}
	}
	return false
}
