package podruntime

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// CPU shares and CFS quota as the kubelet derives them from requests and
// limits.
const (
	minShares    = 2
	sharesPerCPU = 1024
	quotaPeriod  = 100000 // µs
	minQuota     = 1000   // µs: the smallest quota the kernel accepts
)

// Default masked and read-only /proc and /sys paths of a container that is
// not privileged, the same lists the kubelet sends.
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
		"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// containerHash is the io.kubernetes.container.hash annotation: an FNV-32a
// hash of the container's spec as JSON. A container whose spec changes gets a
// new hash, and the running one is restarted.
func containerHash(c *v1.Container) string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("podruntime: marshal container %q: %v", c.Name, err)) // a v1.Container always marshals
	}
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// containerKind is "init", "sidecar" or "" (a regular container) for c of pod.
func containerKind(pod *v1.Pod, c *v1.Container) string {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			if nodeapi.IsSidecar(&pod.Spec.InitContainers[i]) {
				return "sidecar"
			}
			return "init"
		}
	}
	return ""
}

// containerInput is what a container's config is built from besides its spec.
type containerInput struct {
	pod          *v1.Pod
	container    *v1.Container
	restartCount int
	sandboxID    string
	podIPs       []string // the sandbox's IPs; empty for host network
	hostIP       string
	nodeName     string
	podsDir      string
	memCapacity  int64
	cpus         int
	// swap is the node's swap setting for containers.
	swap Swap
	// oomGroup sets memory.oom.group on the container's cgroup (Config.OOMGroup).
	oomGroup bool
	// termLog is the host file mounted at the termination message path; ""
	// makes one under podsDir.
	termLog string
	// hostsFile is the host's hosts file, the base of a host-network pod's.
	hostsFile string
	// clusterDomain is the kubelet's clusterDomain, in the FQDN the hosts
	// file gives a pod with a subdomain.
	clusterDomain string
	// volumes gives the host directories of the volumes the node writes
	// (configMap, secret, downwardAPI, projected); nil: none are set up.
	volumes volumePaths
	// env holds the API objects the environment reads; nil on a node
	// without an API server.
	env *volumes.EnvObjects
	// targetID, for an ephemeral container with a target, is the runtime ID
	// of the container whose process namespace it joins.
	targetID string
	// supportsRRO: the runtime supports recursive read-only mounts.
	supportsRRO bool
}

// volumePaths finds the host directory of a volume the node writes;
// *volumes.Manager implements it.
type volumePaths interface {
	// HostPath returns the volume's directory and whether it has been
	// written.
	HostPath(pod *v1.Pod, v *v1.Volume) (path string, ready bool)
}

// containerConfig builds the CRI ContainerConfig of in.container. It makes
// the host directories and files the mounts need (emptyDir, hostPath with a
// *OrCreate type, the termination log).
func containerConfig(in containerInput) (*runtimeapi.ContainerConfig, error) {
	pod, c := in.pod, in.container
	env, err := containerEnv(in)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, kv := range env {
		vars[kv.Key] = string(kv.Value)
	}
	cmd := make([]string, len(c.Command))
	for i, s := range c.Command {
		cmd[i] = nodeapi.ExpandVars(s, mapVars(vars))
	}
	args := make([]string, len(c.Args))
	for i, s := range c.Args {
		args[i] = nodeapi.ExpandVars(s, mapVars(vars))
	}
	mounts, err := containerMounts(in, vars)
	if err != nil {
		return nil, err
	}
	labels := podLabels(pod)
	labels[labelContainerName] = c.Name
	labels[labelKubeletManaged] = "true"
	grace := int64(defaultGracePeriod)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = v1.TerminationMessagePathDefault
	}
	termPolicy := c.TerminationMessagePolicy
	if termPolicy == "" {
		termPolicy = v1.TerminationMessageReadFile
	}
	annotations := map[string]string{
		annoContainerHash: containerHash(c),
		annoRestartCount:  strconv.Itoa(in.restartCount),
		annoTermMsgPath:   termPath,
		annoTermMsgPolicy: string(termPolicy),
		annoPodGrace:      strconv.FormatInt(grace, 10),
		annoSandboxID:     in.sandboxID,
		annoImage:         c.Image,
	}
	if kind := containerKind(pod, c); kind != "" {
		annotations[annoInitKind] = kind
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		b, err := json.Marshal(c.Lifecycle.PreStop)
		if err != nil {
			return nil, err
		}
		annotations[annoPreStop] = string(b)
	}
	if len(c.Ports) > 0 {
		b, err := json.Marshal(c.Ports)
		if err != nil {
			return nil, err
		}
		annotations[annoPorts] = string(b)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(in.restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image},
		Command:     cmd,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        env,
		Mounts:      mounts,
		Labels:      labels,
		Annotations: annotations,
		LogPath:     filepath.Join(c.Name, strconv.Itoa(in.restartCount)+".log"),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       containerResources(pod, c, in.memCapacity, in.oomGroup),
			SecurityContext: containerSecurity(pod, c),
		},
	}
	applySwap(cfg.Linux.Resources, pod, c, in.memCapacity, in.swap)
	if ns := cfg.Linux.SecurityContext.NamespaceOptions; in.targetID != "" && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		// An ephemeral container sees its target's processes; in a pod that
		// shares one process namespace (or the host's) it sees them anyway.
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, in.targetID
	}
	return cfg, nil
}

// containerResources are the container's cpu shares (from the request, at
// least 2), CFS quota (from the limit), memory limit and oom_score_adj, and
// with oomGroup (cgroup v2 only) memory.oom.group=1 in the unified resources,
// so that the kernel's OOM killer ends the whole container, as the kubelet
// asks unless singleProcessOOMKill.
func containerResources(pod *v1.Pod, c *v1.Container, memCapacity int64, oomGroup bool) *runtimeapi.LinuxContainerResources {
	req, lim := nodeapi.ContainerRequests(c), c.Resources.Limits
	r := &runtimeapi.LinuxContainerResources{
		CpuShares:   milliToShares(req.Cpu().MilliValue()),
		OomScoreAdj: int64(qos.OOMScoreAdj(pod, c, memCapacity)),
	}
	if oomGroup {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	if q, ok := lim[v1.ResourceCPU]; ok {
		r.CpuPeriod = quotaPeriod
		r.CpuQuota = milliToQuota(q.MilliValue())
	}
	if q, ok := lim[v1.ResourceMemory]; ok {
		r.MemoryLimitInBytes = q.Value()
	}
	return r
}

// milliToShares converts a cpu request in millicores to cgroup v1 cpu.shares.
func milliToShares(milli int64) int64 {
	if milli <= 0 {
		return minShares
	}
	s := milli * sharesPerCPU / 1000
	return max(s, minShares)
}

// milliToQuota converts a cpu limit in millicores to a CFS quota per
// quotaPeriod; no limit (0) is no quota.
func milliToQuota(milli int64) int64 {
	if milli <= 0 {
		return 0
	}
	return max(milli*quotaPeriod/1000, minQuota)
}

// containerSecurity is the container's Linux security context.
func containerSecurity(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerSecurityContext {
	s := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaceOptions(pod)}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			s.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			s.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		s.SupplementalGroups = append(s.SupplementalGroups, psc.SupplementalGroups...)
		if psc.FSGroup != nil {
			s.SupplementalGroups = append(s.SupplementalGroups, *psc.FSGroup)
		}
	}
	privileged := false
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			s.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			s.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		if sc.Privileged != nil {
			privileged = *sc.Privileged
		}
		if sc.ReadOnlyRootFilesystem != nil {
			s.ReadonlyRootfs = *sc.ReadOnlyRootFilesystem
		}
		if sc.AllowPrivilegeEscalation != nil {
			s.NoNewPrivs = !*sc.AllowPrivilegeEscalation
		}
		if caps := sc.Capabilities; caps != nil {
			s.Capabilities = &runtimeapi.Capability{}
			for _, a := range caps.Add {
				s.Capabilities.AddCapabilities = append(s.Capabilities.AddCapabilities, string(a))
			}
			for _, d := range caps.Drop {
				s.Capabilities.DropCapabilities = append(s.Capabilities.DropCapabilities, string(d))
			}
		}
	}
	s.Privileged = privileged
	if !privileged {
		s.MaskedPaths = defaultMaskedPaths
		s.ReadonlyPaths = defaultReadonlyPaths
	}
	return s
}

// noAPIServer is the tail of the error of an env source that needs an API
// server on a node without one.
const noAPIServer = "which a node without an API server does not have"

// containerEnv is the container's environment: the envFrom sources' keys
// first (each with its prefix, a later source replacing an earlier one's
// value), then env in spec order, each value with $(NAME) references to the
// names before it and to the service variables expanded, valueFrom resolved
// through the downward API, ConfigMaps and Secrets, and last the service
// variables (in name order) whose names nothing else defined. A missing
// ConfigMap, Secret or key fails the container with the kubelet's message,
// unless the reference is optional, which skips it.
func containerEnv(in containerInput) ([]*runtimeapi.KeyValue, error) {
	c := in.container
	defined := map[string]string{}
	var out []*runtimeapi.KeyValue
	index := map[string]int{}
	set := func(name, val string) {
		defined[name] = val
		if j, ok := index[name]; ok {
			out[j].Value = []byte(val) // a later definition of a name wins, in its first place
			return
		}
		index[name] = len(out)
		out = append(out, &runtimeapi.KeyValue{Key: name, Value: []byte(val)})
	}
	ns := in.pod.Namespace
	for _, from := range c.EnvFrom {
		if in.env == nil {
			return nil, fmt.Errorf("container %q: envFrom needs ConfigMaps or Secrets, %s", c.Name, noAPIServer)
		}
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := in.env.ConfigMaps[from.ConfigMapRef.Name]
			if !ok {
				if isTrue(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, ok := in.env.Secrets[from.SecretRef.Name]
			if !ok {
				if isTrue(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
			}
			data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for _, k := range sortedKeys(data) {
			set(from.Prefix+k, data[k])
		}
	}
	var services map[string]string
	if in.env != nil {
		services = in.env.ServiceEnv
	}
	lookup := func(name string) (string, bool) {
		if v, ok := defined[name]; ok {
			return v, true
		}
		v, ok := services[name]
		return v, ok
	}
	for i, e := range c.Env {
		var val string
		switch {
		case e.ValueFrom == nil:
			val = nodeapi.ExpandVars(e.Value, lookup)
		case e.ValueFrom.FieldRef != nil:
			v, err := nodeapi.FieldRefValue(in.pod, e.ValueFrom.FieldRef.FieldPath, nodeapi.FieldInEnv,
				nodeapi.PodFacts{NodeName: in.nodeName, HostIP: in.hostIP, PodIPs: in.ips()})
			if err != nil {
				return nil, fmt.Errorf("container %q: env[%d] %s: %w", c.Name, i, e.Name, err)
			}
			val = v
		case e.ValueFrom.ResourceFieldRef != nil:
			v, err := nodeapi.ResourceFieldValue(in.pod, in.container, e.ValueFrom.ResourceFieldRef, nodeLimits(in.cpus, in.memCapacity))
			if err != nil {
				return nil, fmt.Errorf("container %q: env[%d] %s: %w", c.Name, i, e.Name, err)
			}
			val = v
		case e.ValueFrom.FileKeyRef != nil:
			ref := e.ValueFrom.FileKeyRef
			v, ok, err := fileKeyValue(in, ref)
			if err != nil {
				return nil, fmt.Errorf("container %q: env[%d] %s: %w", c.Name, i, e.Name, err)
			}
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("container %q: env[%d] %s: key %s not found in env file %s of volume %s", c.Name, i, e.Name, ref.Key, ref.Path, ref.VolumeName)
			}
			val = v
		case in.env == nil:
			return nil, fmt.Errorf("container %q: env[%d] %s: valueFrom needs ConfigMaps or Secrets, %s", c.Name, i, e.Name, noAPIServer)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := in.env.ConfigMaps[ref.Name]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q not found", ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, ns, ref.Name)
			}
			val = v
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := in.env.Secrets[ref.Name]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q not found", ref.Name)
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, ns, ref.Name)
			}
			val = string(v)
		default:
			return nil, fmt.Errorf("container %q: env[%d] %s: this valueFrom source is not supported", c.Name, i, e.Name)
		}
		set(e.Name, val)
	}
	for _, k := range sortedKeys(services) {
		if _, ok := defined[k]; !ok {
			out = append(out, &runtimeapi.KeyValue{Key: k, Value: []byte(services[k])})
		}
	}
	return out, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// podIPs are the pod's IPs for the downward API: the sandbox's, or the
// host's for a host-network pod.
func (in containerInput) ips() []string {
	if in.pod.Spec.HostNetwork {
		if in.hostIP == "" {
			return nil
		}
		return []string{in.hostIP}
	}
	return in.podIPs
}

// nodeLimits are what a resourceFieldRef reads for an absent limit: the
// node's cpus and memory (bytes).
func nodeLimits(cpus int, memory int64) v1.ResourceList {
	return v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(cpus), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
	}
}

// emptyDirPath is the host directory of the pod's emptyDir volume name.
// fileKeyValue reads ref's key from an env file in one of the pod's emptyDir
// volumes (the EnvFiles feature: an init container writes the file), and
// reports whether the file and key exist.
func fileKeyValue(in containerInput, ref *v1.FileKeySelector) (string, bool, error) {
	i := slices.IndexFunc(in.pod.Spec.Volumes, func(v v1.Volume) bool { return v.Name == ref.VolumeName })
	if i < 0 || in.pod.Spec.Volumes[i].EmptyDir == nil {
		return "", false, fmt.Errorf("fileKeyRef volume %q: not an emptyDir volume of the pod", ref.VolumeName)
	}
	if filepath.IsAbs(ref.Path) || !filepath.IsLocal(ref.Path) {
		return "", false, fmt.Errorf("fileKeyRef path %q: want a relative path inside the volume", ref.Path)
	}
	b, err := os.ReadFile(filepath.Join(emptyDirPath(in.podsDir, string(in.pod.UID), ref.VolumeName), ref.Path))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	env, err := parseEnvFile(string(b))
	if err != nil {
		return "", false, fmt.Errorf("env file %s of volume %s: %w", ref.Path, ref.VolumeName, err)
	}
	v, ok := env[ref.Key]
	return v, ok, nil
}

// parseEnvFile parses KEY=VALUE lines: blank lines and lines starting with
// '#' are skipped, space around the key and value is trimmed, and a value in
// single or double quotes loses them.
func parseEnvFile(s string) (map[string]string, error) {
	env := map[string]string{}
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=VALUE, got %q", n+1, line)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	return env, nil
}

func emptyDirPath(podsDir, uid, name string) string {
	return filepath.Join(podsDir, uid, "volumes", "kubernetes.io~empty-dir", name)
}

// containerMounts are the container's volume mounts and termination log;
// vars is the container's environment, which subPathExpr reads.
func containerMounts(in containerInput, vars map[string]string) ([]*runtimeapi.Mount, error) {
	pod, c := in.pod, in.container
	vols := map[string]*v1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var out []*runtimeapi.Mount
	for i, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("container %q: volumeMounts[%d]: no volume %q in the pod", c.Name, i, vm.Name)
		}
		rro, err := podstatus.RecursiveReadOnly(vm, in.supportsRRO)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
		}
		var host string
		readOnly := vm.ReadOnly
		if volumes.Handles(v) {
			// The node writes these; containers only read them.
			var ready bool
			if in.volumes != nil {
				host, ready = in.volumes.HostPath(pod, v)
			}
			if !ready {
				return nil, fmt.Errorf("container %q: volume %q is not set up", c.Name, v.Name)
			}
			readOnly = true
		} else {
			var err error
			if host, err = volumeHostPath(in.podsDir, pod, v, in.memCapacity); err != nil {
				return nil, fmt.Errorf("container %q: volume %q: %w", c.Name, v.Name, err)
			}
		}
		subPath := vm.SubPath
		if vm.SubPathExpr != "" {
			if subPath, err = expandSubPath(vm.SubPathExpr, vars); err != nil {
				return nil, fmt.Errorf("container %q: volumeMounts[%d].subPathExpr %q: %w", c.Name, i, vm.SubPathExpr, err)
			}
		}
		if subPath != "" {
			sub := filepath.Clean(subPath)
			if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
				return nil, fmt.Errorf("container %q: volumeMounts[%d].subPath %q leaves the volume", c.Name, i, subPath)
			}
			root := host
			if _, err := os.Lstat(filepath.Join(root, sub)); os.IsNotExist(err) {
				if volumes.Handles(v) {
					return nil, fmt.Errorf("container %q: volumeMounts[%d].subPath %q is not in volume %q", c.Name, i, subPath, v.Name)
				}
				if err := makeSubPath(root, sub); err != nil {
					return nil, fmt.Errorf("container %q: volumeMounts[%d]: %w", c.Name, i, err)
				}
			}
			if host, err = prepareSubPath(in.podsDir, string(pod.UID), v.Name, c.Name, i, root, sub); err != nil {
				return nil, fmt.Errorf("container %q: volumeMounts[%d]: %w", c.Name, i, err)
			}
		}
		m := &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host, Readonly: readOnly, RecursiveReadOnly: rro}
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case v1.MountPropagationHostToContainer:
				m.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case v1.MountPropagationBidirectional:
				m.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			}
		}
		out = append(out, m)
	}
	if hosts, err := etcHostsMount(in, out); err != nil {
		return nil, err
	} else if hosts != nil {
		out = append(out, hosts)
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = v1.TerminationMessagePathDefault
	}
	host := in.termLog
	if host == "" {
		var err error
		if host, err = newTerminationLog(in.podsDir, string(pod.UID), c.Name); err != nil {
			return nil, err
		}
	}
	out = append(out, &runtimeapi.Mount{ContainerPath: termPath, HostPath: host})
	return out, nil
}

// newTerminationLog makes an empty file PodsDir/<uid>/containers/<name>/<id>,
// mode 0666, for the container's termination message.
func newTerminationLog(podsDir, uid, name string) (string, error) {
	dir := filepath.Join(podsDir, uid, "containers", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	path := filepath.Join(dir, hex.EncodeToString(id[:]))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
	if err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	// Writable by the container whatever its user, as the kubelet makes it
	// (the umask took group and other write off).
	return path, os.Chmod(path, 0o666)
}

// volumeHostPath is the host path of volume v, made or checked as its type
// asks.
func volumeHostPath(podsDir string, pod *v1.Pod, v *v1.Volume, memCapacity int64) (string, error) {
	switch {
	case v.EmptyDir != nil:
		dir := emptyDirPath(podsDir, string(pod.UID), v.Name)
		var size int64
		if v.EmptyDir.Medium == v1.StorageMediumMemory {
			size = nodeapi.TmpfsSize(pod, v.EmptyDir.SizeLimit, memCapacity)
		}
		var fsGroup *int64
		if sc := pod.Spec.SecurityContext; sc != nil {
			fsGroup = sc.FSGroup
		}
		return dir, setUpEmptyDir(dir, v.EmptyDir.Medium == v1.StorageMediumMemory, size, fsGroup, propagates(pod, v.Name))
	case v.HostPath != nil:
		return v.HostPath.Path, checkHostPath(v.HostPath)
	}
	return "", fmt.Errorf("only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported")
}

// propagates reports whether a container of pod mounts volume name with
// mount propagation (HostToContainer or Bidirectional).
func propagates(pod *v1.Pod, name string) bool {
	for _, c := range allContainers(pod) {
		for _, vm := range c.VolumeMounts {
			if vm.Name == name && vm.MountPropagation != nil && *vm.MountPropagation != v1.MountPropagationNone {
				return true
			}
		}
	}
	return false
}

// checkHostPath checks (or, for the *OrCreate types, makes) a hostPath
// volume's path by its type.
func checkHostPath(hp *v1.HostPathVolumeSource) error {
	typ := v1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}
	st, err := os.Stat(hp.Path)
	exists := err == nil
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	want := func(ok bool, what string) error {
		if !exists {
			return fmt.Errorf("hostPath type %s: %s does not exist", typ, hp.Path)
		}
		if !ok {
			return fmt.Errorf("hostPath type %s: %s is not a %s", typ, hp.Path, what)
		}
		return nil
	}
	switch typ {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if !exists {
			return os.MkdirAll(hp.Path, 0o755)
		}
		return want(st.IsDir(), "directory")
	case v1.HostPathFileOrCreate:
		if !exists {
			f, err := os.OpenFile(hp.Path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("hostPath type %s: %w", typ, err)
			}
			return f.Close()
		}
		return want(st.Mode().IsRegular(), "file")
	case v1.HostPathDirectory:
		return want(exists && st.IsDir(), "directory")
	case v1.HostPathFile:
		return want(exists && st.Mode().IsRegular(), "file")
	case v1.HostPathSocket:
		return want(exists && st.Mode()&os.ModeSocket != 0, "socket")
	case v1.HostPathCharDev:
		return want(exists && st.Mode()&os.ModeCharDevice != 0, "character device")
	case v1.HostPathBlockDev:
		return want(exists && st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0, "block device")
	}
	return fmt.Errorf("hostPath type %q is not a known type", typ)
}

// etcHostsPath is the pod's managed hosts file.
func etcHostsPath(podsDir, uid string) string {
	return filepath.Join(podsDir, uid, "etc-hosts")
}

// etcHostsMount writes the pod's hosts file and returns its mount at
// /etc/hosts, as the kubelet manages it: for a pod-network pod the loopback
// and IPv6 names, the pod's IPs with its hostname and the pod's hostAliases;
// for a host-network pod the host's file with the hostAliases. It returns
// nil when the pod has no IP yet or the container mounts /etc/hosts itself.
func etcHostsMount(in containerInput, mounts []*runtimeapi.Mount) (*runtimeapi.Mount, error) {
	ips := in.ips()
	if len(ips) == 0 {
		return nil, nil
	}
	for _, m := range mounts {
		if m.ContainerPath == "/etc/hosts" {
			return nil, nil
		}
	}
	pod := in.pod
	var b strings.Builder
	if pod.Spec.HostNetwork {
		b.WriteString("# Kubernetes-managed hosts file (host network).\n")
		host, err := os.ReadFile(in.hostsFile)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("read host hosts file: %w", err)
		}
		b.Write(host)
		if len(host) > 0 && host[len(host)-1] != '\n' {
			b.WriteByte('\n')
		}
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n")
		b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		name, domain, err := podHostnameAndDomain(pod, in.clusterDomain)
		if err != nil {
			return nil, err
		}
		if domain != "" {
			name = name + "." + domain + "\t" + name
		}
		for _, ip := range ips {
			fmt.Fprintf(&b, "%s\t%s\n", ip, name)
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	path := etcHostsPath(in.podsDir, string(pod.UID))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: path}, nil
}

// mapVars looks names up in m, for nodeapi.ExpandVars.
// expandSubPath expands the $(VAR) references of a subPathExpr from the
// container's environment vars; as with the kubelet, a variable that is
// missing or empty is an error.
func expandSubPath(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := nodeapi.ExpandVars(expr, func(n string) (string, bool) {
		v, ok := vars[n]
		if !ok || v == "" {
			missing = append(missing, n)
		}
		return v, ok
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(slices.Compact(missing), ", "))
	}
	return out, nil
}

func mapVars(m map[string]string) func(string) (string, bool) {
	return func(n string) (string, bool) { v, ok := m[n]; return v, ok }
}
