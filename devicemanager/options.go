package devicemanager

import (
	"context"
	"log/slog"
	"slices"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// ContainerOptions is what the device plugins asked the runtime to give one
// container, merged over its resources and ready for a CRI ContainerConfig.
// The caller owns the value; append the slices to ContainerConfig.Envs,
// Mounts, Devices and CDIDevices and merge Annotations into its annotations.
type ContainerOptions struct {
	Envs        []*runtimeapi.KeyValue  // environment variables, sorted per resource
	Mounts      []*runtimeapi.Mount     // host paths to bind-mount
	Devices     []*runtimeapi.Device    // device nodes with cgroup permissions
	Annotations map[string]string       // nil when no plugin set any
	CDIDevices  []*runtimeapi.CDIDevice // fully qualified CDI device names
}

// ContainerOptions returns the runtime options for a container that passed
// Allocate. It first waits until the checkpoint holds the container's
// devices (so it needs Run to be active), then calls PreStartContainer (bounded by
// Config.PreStartTimeout) for each resource whose plugin asked for it, and it
// allocates again when a device resource in the container's limits has no
// assignment (a node restart before the plugin was back). Call it right
// before creating the container.
//
// It returns nil and no error when the container holds no devices. A pod
// that Deps.ActivePods no longer lists is never given devices here: its
// container gets the ones it still holds, or nil once they were freed.
//
// Merging follows the kubelet: resources in name order; the first value of an
// environment variable or annotation wins, as does the first mount or device
// for a container path; CDI devices are listed once. Conflicts are logged.
func (m *Manager) ContainerOptions(ctx context.Context, pod *v1.Pod, container *v1.Container) (*ContainerOptions, error) {
	uid := string(pod.UID)
	reallocate := false
	for _, r := range m.deviceRequests(container) {
		m.mu.Lock()
		a := m.pods.get(uid, container.Name, r.name)
		m.mu.Unlock()
		if a == nil {
			reallocate = true
		}
	}
	if reallocate && !m.podActive(pod) {
		// Its devices may have gone to other pods already.
		m.log.Info("Pod is no longer active; not allocating devices again",
			"pod", nodeapi.PodName(pod), "podUID", uid, "containerName", container.Name)
		reallocate = false
	}
	if reallocate {
		m.log.Info("Container has device resources without an assignment; allocating again",
			"pod", nodeapi.PodName(pod), "podUID", uid, "containerName", container.Name)
		if err := m.Allocate(ctx, pod, container); err != nil {
			return nil, err
		}
	}

	if err := m.refreshRecovered(ctx, uid, container.Name); err != nil {
		return nil, err
	}

	type prestart struct {
		res    string
		client rpcClient
		ids    []string
	}
	var calls []prestart
	var resps []*pluginapi.ContainerAllocateResponse
	ids := map[string][]string{}
	m.mu.Lock()
	byRes := m.pods[uid][container.Name]
	if len(byRes) == 0 {
		m.mu.Unlock()
		return nil, nil
	}
	for _, res := range sortedKeys(byRes) {
		a := byRes[res]
		resps = append(resps, a.resp)
		ids[res] = a.ids
		rs := m.resources[res]
		if rs == nil {
			continue
		}
		ep := rs.ep
		if ep == nil || !ep.opts.GetPreStartRequired() {
			continue
		}
		calls = append(calls, prestart{res: res, client: ep.client, ids: slices.Clone(a.ids)})
	}
	m.mu.Unlock()

	if err := m.persist(ctx); err != nil {
		return nil, err
	}
	for _, c := range calls {
		pctx, cancel := context.WithTimeout(ctx, m.cfg.PreStartTimeout)
		_, err := c.client.PreStartContainer(pctx, &pluginapi.PreStartContainerRequest{DevicesIds: c.ids})
		cancel()
		if err != nil {
			return nil, classed(ErrPlugin, "device plugin PreStartContainer rpc failed with err: %w", err)
		}
	}
	out := m.mergeOptions(uid, container.Name, resps)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationDevices] = devicesAnnotation(ids)
	return out, nil
}

// podActive reports whether Deps.ActivePods lists pod; without
// Deps.ActivePods every pod counts as active.
func (m *Manager) podActive(pod *v1.Pod) bool {
	if m.deps.ActivePods == nil {
		return true
	}
	for _, p := range m.deps.ActivePods() {
		if p.UID == pod.UID {
			return true
		}
	}
	return false
}

func (m *Manager) mergeOptions(uid, ctr string, resps []*pluginapi.ContainerAllocateResponse) *ContainerOptions {
	out := &ContainerOptions{}
	envs, mounts, devices, annotations := firstWins{}, firstWins{}, firstWins{}, firstWins{}
	cdi := map[string]bool{}
	log := m.log.With("podUID", uid, "containerName", ctr)
	for _, r := range resps {
		for _, k := range sortedKeys(r.GetEnvs()) {
			v := r.Envs[k]
			if envs.keep(log, "Device plugins set an environment variable differently; keeping the first", "name", k, v) {
				out.Envs = append(out.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
			}
		}
		for _, mt := range r.GetMounts() {
			if mounts.keep(log, "Device plugins mount different host paths at one container path; keeping the first",
				"containerPath", mt.ContainerPath, mt.HostPath) {
				out.Mounts = append(out.Mounts, &runtimeapi.Mount{ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, Readonly: mt.ReadOnly})
			}
		}
		for _, d := range r.GetDevices() {
			if devices.keep(log, "Device plugins map different host devices at one container path; keeping the first",
				"containerPath", d.ContainerPath, d.HostPath) {
				out.Devices = append(out.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
			}
		}
		for _, k := range sortedKeys(r.GetAnnotations()) {
			annotations.keep(log, "Device plugins set an annotation differently; keeping the first", "key", k, r.Annotations[k])
		}
		for _, c := range r.GetCdiDevices() {
			if c == nil || c.Name == "" || cdi[c.Name] {
				continue
			}
			cdi[c.Name] = true
			out.CDIDevices = append(out.CDIDevices, &runtimeapi.CDIDevice{Name: c.Name})
		}
	}
	if len(annotations) > 0 {
		out.Annotations = annotations
	}
	return out
}

// firstWins maps a key (an environment variable, a container path, an
// annotation) to the first value a plugin gave it.
type firstWins map[string]string

// keep records value for key and reports true when key is new. Otherwise it
// keeps the first value and, when value differs, logs msg with the key under
// keyAttr and both values.
func (f firstWins) keep(log *slog.Logger, msg, keyAttr, key, value string) bool {
	if old, ok := f[key]; ok {
		if old != value {
			log.Warn(msg, keyAttr, key, "kept", old, "ignored", value)
		}
		return false
	}
	f[key] = value
	return true
}
