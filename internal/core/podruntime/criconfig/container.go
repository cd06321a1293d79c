package criconfig

import (
	"encoding/json"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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

// Input is what a container's config is built from besides its spec: the
// node's figures and what the pod runtime read for it. It is a value; the
// functions that take it change nothing in it.
type Input struct {
	Pod       *v1.Pod
	Container *v1.Container
	// Hash is Hash(Container), as the sync computed it; "" computes it.
	Hash         string
	RestartCount int
	SandboxID    string
	// Run is the pod's run the container belongs to (AnnotationRun; "" for
	// a pod that never restarted all its containers).
	Run string
	// PodIPs are the sandbox's IPs; empty for host network.
	PodIPs   []string
	HostIP   string
	NodeName string
	// MemoryCapacity is the node's memory in bytes, CPUs its cpu count.
	MemoryCapacity int64
	CPUs           int
	// Swap is the node's swap setting for containers.
	Swap Swap
	// OOMGroup sets memory.oom.group on the container's cgroup.
	OOMGroup bool
	// Sources holds the API objects the environment reads; nil on a node
	// without an API server.
	Sources *EnvSources
	// EnvFiles are the env files the container's fileKeyRefs name, as the
	// pod runtime read them (see EnvFileRef).
	EnvFiles map[EnvFileRef]EnvFile
	// TargetID, for an ephemeral container with a target, is the runtime
	// ID of the container whose process namespace it joins.
	TargetID string
}

// IPs are the pod's IPs for the downward API and its hosts file: the
// sandbox's, or the host's for a host-network pod.
func (in Input) IPs() []string {
	if in.Pod.Spec.HostNetwork {
		if in.HostIP == "" {
			return nil
		}
		return []string{in.HostIP}
	}
	return in.PodIPs
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

// Container builds the CRI ContainerConfig of in.Container from its
// environment (Env) and its mounts, which the pod runtime resolved on the
// host (volumes, subpaths, hosts file, termination log) in that order.
func Container(in Input, env []*runtimeapi.KeyValue, mounts []*runtimeapi.Mount) (*runtimeapi.ContainerConfig, error) {
	pod, c := in.Pod, in.Container
	vars := Vars(env)
	cmd := make([]string, len(c.Command))
	for i, s := range c.Command {
		cmd[i] = nodeapi.ExpandVars(s, mapVars(vars))
	}
	args := make([]string, len(c.Args))
	for i, s := range c.Args {
		args[i] = nodeapi.ExpandVars(s, mapVars(vars))
	}
	labels := podLabels(pod)
	labels[LabelContainerName] = c.Name
	labels[LabelKubeletManaged] = "true"
	annotations, err := containerAnnotations(in)
	if err != nil {
		return nil, err
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(in.RestartCount)},
		Image:       &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image},
		Command:     cmd,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        env,
		Mounts:      mounts,
		Labels:      labels,
		Annotations: annotations,
		LogPath:     filepath.Join(c.Name, strconv.Itoa(in.RestartCount)+".log"),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       containerResources(pod, c, in.MemoryCapacity, in.OOMGroup),
			SecurityContext: containerSecurity(pod, c),
		},
	}
	applySwap(cfg.Linux.Resources, pod, c, in.MemoryCapacity, in.Swap)
	if ns := cfg.Linux.SecurityContext.NamespaceOptions; in.TargetID != "" && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		// An ephemeral container sees its target's processes; in a pod that
		// shares one process namespace (or the host's) it sees them anyway.
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, in.TargetID
	}
	return cfg, nil
}

// containerAnnotations are the kubelet's annotations of the container,
// which the pod runtime reads back from the runtime (hash, restart count,
// termination message, grace period, pre-stop hook, ports) and ours.
func containerAnnotations(in Input) (map[string]string, error) {
	pod, c := in.Pod, in.Container
	grace := int64(DefaultGracePeriod)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	termPolicy := c.TerminationMessagePolicy
	if termPolicy == "" {
		termPolicy = v1.TerminationMessageReadFile
	}
	hash := in.Hash
	if hash == "" {
		hash = Hash(c)
	}
	annotations := map[string]string{
		AnnotationContainerHash: hash,
		AnnotationRestartCount:  strconv.Itoa(in.RestartCount),
		AnnotationTermMsgPath:   TerminationMessagePath(c),
		AnnotationTermMsgPolicy: string(termPolicy),
		AnnotationPodGrace:      strconv.FormatInt(grace, 10),
		AnnotationSandboxID:     in.SandboxID,
		AnnotationImage:         c.Image,
	}
	if in.Run != "" {
		annotations[AnnotationRun] = in.Run
	}
	if kind := containerKind(pod, c); kind != "" {
		annotations[AnnotationInitKind] = kind
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		b, err := json.Marshal(c.Lifecycle.PreStop)
		if err != nil {
			return nil, err
		}
		annotations[AnnotationPreStop] = string(b)
	}
	if len(c.Ports) > 0 {
		b, err := json.Marshal(c.Ports)
		if err != nil {
			return nil, err
		}
		annotations[AnnotationPorts] = string(b)
	}
	return annotations, nil
}

// TerminationMessagePath is where c's termination message is read from in
// the container: its terminationMessagePath, or the API default.
func TerminationMessagePath(c *v1.Container) string {
	if c.TerminationMessagePath == "" {
		return v1.TerminationMessagePathDefault
	}
	return c.TerminationMessagePath
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
		privileged = applyContainerSecurity(s, sc)
	}
	s.Privileged = privileged
	if !privileged {
		s.MaskedPaths = defaultMaskedPaths
		s.ReadonlyPaths = defaultReadonlyPaths
	}
	return s
}

// applyContainerSecurity sets what the container's own securityContext asks
// for in s, over the pod's, and reports whether it is privileged.
func applyContainerSecurity(s *runtimeapi.LinuxContainerSecurityContext, sc *v1.SecurityContext) (privileged bool) {
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
	return privileged
}

// MountPropagation is the CRI propagation of a volume mount's
// mountPropagation (nil and None: private).
func MountPropagation(p *v1.MountPropagationMode) runtimeapi.MountPropagation {
	if p != nil {
		switch *p {
		case v1.MountPropagationHostToContainer:
			return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		case v1.MountPropagationBidirectional:
			return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
		}
	}
	return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
}
