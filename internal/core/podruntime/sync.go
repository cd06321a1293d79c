package podruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

// Waiting reasons a sync reports for containers it could not start.
const (
	reasonCreating         = "ContainerCreating"
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
	reasonCreateError      = "CreateContainerConfigError"
	reasonRunError         = "RunContainerError"
)

// errImagePullBackOff marks a pull skipped for its back-off.
var errImagePullBackOff = errors.New("ImagePullBackOff")

// SyncPod makes the runtime run pod as its spec asks, given its current
// runtime status (nil: nothing exists yet) and what the pod's previous
// SyncPod returned in its Result's State (the zero value for its first):
// sandbox, init containers in order, containers, restarts by restartPolicy
// with back-off, and the ephemeral containers an update added (started once
// in the running sandbox, never restarted). It never kills the whole pod;
// that is KillPod. The Result's State is the pod's state after this sync;
// prev is not changed.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, status *PodStatus, prev SyncState) Result {
	st := prev.clone()
	res := m.syncPod(ctx, pod, status, prev, &st)
	res.State = st
	return res
}

// syncPod is SyncPod, which records what it learns in st.
func (m *Manager) syncPod(ctx context.Context, pod *v1.Pod, status *PodStatus, prev SyncState, st *SyncState) Result {
	now := m.clock.Now()
	specs := make(map[string]string, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			specs[cs[i].Name] = criconfig.Hash(&cs[i])
		}
	}
	backoff := func(name string) (Backoff, bool) {
		e, ok := st.Crash[name]
		return e, ok && e.Spec == specs[name]
	}
	acts := computeActions(pod, status, now, backoff, func(c *v1.Container, cs *runtimeapi.ContainerStatus) bool {
		return m.sidecarStarted(pod, c, cs)
	})
	m.probeRestarts(pod, status, now, &acts, backoff)
	waiting := make(map[string]v1.ContainerStateWaiting, len(acts.waiting)+len(acts.start))
	for name, w := range acts.waiting {
		waiting[name] = w
	}
	for _, a := range slices.Concat(acts.ephemeral, acts.start) {
		waiting[a.container.Name] = v1.ContainerStateWaiting{Reason: reasonCreating}
	}
	before := prev.Waiting
	st.Waiting = waiting
	for _, name := range sortedKeys(acts.waiting) {
		// One event per back-off, not one per sync.
		if w := acts.waiting[name]; w.Reason == "CrashLoopBackOff" && before[name] != w {
			m.rec.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", name, pod.Name, pod.Namespace, pod.UID)
		}
	}
	res := Result{RetryAfter: acts.retryAfter}

	if acts.killPod {
		m.rec.Event(pod, v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
		if err := m.KillPod(ctx, pod, status, nil); err != nil {
			res.Err = fmt.Errorf("kill pod for a new sandbox: %w", err)
			return res
		}
	}
	if err := makePodDirs(m.cfg.PodsDir, string(pod.UID)); err != nil {
		res.Err = fmt.Errorf("pod directory: %w", err)
		return res
	}
	if err := m.setUpVolumes(ctx, pod); err != nil {
		res.Err = err
		return res
	}
	if !acts.createSandbox && len(acts.start) == 0 && len(acts.kill) == 0 && len(acts.ephemeral) == 0 {
		m.removeOld(ctx, status, acts.remove, &res)
		return res // the pod is as it should be: no config to build
	}
	sbCfg, err := m.sandboxConfig(pod, acts.attempt)
	if err != nil {
		m.rec.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		res.Err = err
		return res
	}
	sbID, podIPs := acts.sandboxID, []string(nil)
	if status != nil {
		podIPs = status.IPs
	}
	if acts.createSandbox {
		if sbID, podIPs, err = m.createSandbox(ctx, pod, sbCfg); err != nil {
			m.rec.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			res.Err = err
			return res
		}
		res.Started = append(res.Started, sbID)
	}

	if err := m.killContainers(ctx, pod, status, acts.kill); err != nil {
		res.Err = err
		return res
	}
	// Ephemeral containers first, so that one can debug an init container
	// that fails to start; each failure is the sync's, not the others'.
	for _, a := range acts.ephemeral {
		m.startOne(ctx, pod, a, sbID, sbCfg, podIPs, before[a.container.Name], st, &res)
	}
	for _, a := range acts.start {
		if !m.startOne(ctx, pod, a, sbID, sbCfg, podIPs, before[a.container.Name], st, &res) && acts.initPhase {
			break
		}
	}
	m.removeOld(ctx, status, acts.remove, &res)
	return res
}

// startOne starts the container of a and reports whether it started; a
// failure goes into res (its error, unless a pull back-off; the pull
// back-off's end as RetryAfter); what it learns goes into st.
func (m *Manager) startOne(ctx context.Context, pod *v1.Pod, a startAction, sbID string, sbCfg *runtimeapi.PodSandboxConfig, podIPs []string, prev v1.ContainerStateWaiting, st *SyncState, res *Result) bool {
	id, err := m.startContainer(ctx, pod, a, sbID, sbCfg, podIPs, prev, st)
	if err == nil {
		delete(st.Waiting, a.container.Name)
		res.Started = append(res.Started, id)
		return true
	}
	if res.Err == nil && !errors.Is(err, errImagePullBackOff) {
		res.Err = err
	}
	if errors.Is(err, errImagePullBackOff) || errors.Is(err, errPull) {
		if left := m.pullBackoffLeft(st, a.container.Image); left > 0 && (res.RetryAfter == 0 || left < res.RetryAfter) {
			res.RetryAfter = left
		}
	}
	return false
}

// removeOld removes exited containers the pod no longer needs, with their
// log and termination-log files.
func (m *Manager) removeOld(ctx context.Context, status *PodStatus, ids []string, res *Result) {
	for _, id := range ids {
		if err := m.rt.RemoveContainer(ctx, id); err != nil {
			if res.Err == nil {
				res.Err = fmt.Errorf("remove old container %s: %w", id, err)
			}
			continue
		}
		res.Removed = append(res.Removed, id)
		for _, c := range status.Containers {
			if c.Id == id {
				m.removeContainerFiles(status.UID, c)
			}
		}
	}
}

// removeContainerFiles removes a removed container's log file, its legacy
// log symlink and its termination-log file, when they are where this
// manager puts them.
func (m *Manager) removeContainerFiles(uid types.UID, c *runtimeapi.ContainerStatus) {
	m.unlinkLog(c)
	if p := c.GetLogPath(); p != "" && strings.HasPrefix(p, m.cfg.PodLogsDir+"/") {
		_ = os.Remove(p)
	}
	termDir := filepath.Join(m.cfg.PodsDir, string(uid), "containers") + "/"
	for _, mnt := range c.GetMounts() {
		if mnt.GetContainerPath() == c.GetAnnotations()[criconfig.AnnotationTermMsgPath] && strings.HasPrefix(mnt.GetHostPath(), termDir) {
			_ = os.Remove(mnt.GetHostPath())
		}
	}
}

// markWaiting records a container's waiting reason.
func (s *SyncState) markWaiting(name, reason, msg string) {
	s.Waiting[name] = v1.ContainerStateWaiting{Reason: reason, Message: msg}
}

// sandboxConfig is the pod's sandbox config: its pod cgroup made, the host's
// DNS read.
func (m *Manager) sandboxConfig(pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	parent := ""
	if m.cgroups != nil {
		var err error
		if parent, err = m.cgroups.EnsurePod(pod); err != nil {
			return nil, fmt.Errorf("pod cgroup: %w", err)
		}
	}
	resolv, err := readResolvConf(m.cfg.DNS)
	if err != nil {
		return nil, err
	}
	return criconfig.Sandbox(pod, attempt, m.cfg.PodLogsDir, resolv, parent, m.cfg.ClusterDomain)
}

// createSandbox runs the pod's sandbox and returns its ID and IPs.
func (m *Manager) createSandbox(ctx context.Context, pod *v1.Pod, cfg *runtimeapi.PodSandboxConfig) (string, []string, error) {
	// The pod logs root as the kubelet makes it, 0750 (a container's log
	// file is 0640 root:root, the runtime's); a pod's own directory 0755.
	if err := os.MkdirAll(m.cfg.PodLogsDir, 0o750); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", nil, err
	}
	id, err := m.rt.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return "", nil, err
	}
	r, err := m.rt.PodSandboxStatus(ctx, id, false)
	if err != nil {
		return id, nil, fmt.Errorf("status of new sandbox %s: %w", id, err)
	}
	var ips []string
	if ip := r.GetStatus().GetNetwork().GetIp(); ip != "" {
		ips = append(ips, ip)
		for _, a := range r.GetStatus().GetNetwork().GetAdditionalIps() {
			ips = append(ips, a.GetIp())
		}
	}
	if !pod.Spec.HostNetwork && len(ips) == 0 {
		return id, nil, fmt.Errorf("sandbox %s of pod %s/%s has no IP", id, pod.Namespace, pod.Name)
	}
	m.log.Info("sandbox created", "pod", pod.Namespace+"/"+pod.Name, "sandbox", id, "attempt", cfg.Metadata.Attempt, "ips", ips)
	return id, ips, nil
}

// killContainers stops the listed containers of pod (a changed spec, a
// failed liveness or startup probe) in parallel, each with its own grace
// period (the pod's unless the kill names one) and Killing message.
func (m *Manager) killContainers(ctx context.Context, pod *v1.Pod, status *PodStatus, kills []killAction) error {
	if len(kills) == 0 {
		return nil
	}
	byID := map[string]*runtimeapi.ContainerStatus{}
	if status != nil {
		for _, c := range status.Containers {
			byID[c.Id] = c
		}
	}
	now := m.clock.Now()
	errs := make([]error, len(kills))
	var wg sync.WaitGroup
	for i, k := range kills {
		c := byID[k.id]
		if c == nil {
			continue
		}
		m.log.Info("restarting container", "pod", pod.Namespace+"/"+pod.Name, "container", k.name, "reason", k.reason)
		deadline := now.Add(time.Duration(podGrace(pod, status, k.grace)) * time.Second)
		wg.Go(func() { errs[i] = m.stopContainer(ctx, pod, status, c, deadline, k.message, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startContainer pulls c's image as its policy asks and creates and starts
// it, and returns its ID once it started (and its post-start hook ran).
// prev is the container's waiting state after the last sync; what it learns
// (waiting reasons, back-offs) goes into st.
func (m *Manager) startContainer(ctx context.Context, pod *v1.Pod, a startAction, sbID string, sbCfg *runtimeapi.PodSandboxConfig, podIPs []string, prev v1.ContainerStateWaiting, st *SyncState) (string, error) {
	c := a.container
	img, err := m.ensureImage(ctx, pod, c, sbCfg, prev, st)
	if err != nil {
		return "", err
	}
	if err := verifyNonRoot(pod, c, img); err != nil {
		st.markWaiting(c.Name, reasonCreateError, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", err
	}
	if a.target != "" && a.targetID == "" {
		err := fmt.Errorf("unable to find target container %s", a.target)
		st.markWaiting(c.Name, reasonCreateError, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", err
	}
	envObjs, err := m.vols.EnvObjects(ctx, pod, c)
	if err != nil {
		st.markWaiting(c.Name, reasonCreateError, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", err
	}
	cfg, err := containerConfig(containerInput{
		Input: criconfig.Input{
			Pod: pod, Container: c, RestartCount: a.restartCount, SandboxID: sbID, PodIPs: podIPs,
			HostIP: m.cfg.HostIP, NodeName: m.cfg.NodeName, MemoryCapacity: m.cfg.MemoryCapacity, CPUs: m.cfg.CPUs,
			Swap: m.cfg.Swap, OOMGroup: m.cfg.OOMGroup, Sources: (*criconfig.EnvSources)(envObjs), TargetID: a.targetID,
		},
		podsDir: m.cfg.PodsDir, hostsFile: m.cfg.HostsFile, clusterDomain: m.cfg.ClusterDomain, volumes: m.vols, supportsRRO: m.supportsRRO(),
	})
	if err != nil {
		st.markWaiting(c.Name, reasonCreateError, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", err
	}
	if m.devices != nil {
		opts, err := m.devices.ContainerOptions(ctx, pod, c)
		if err != nil {
			st.markWaiting(c.Name, reasonCreateError, err.Error())
			m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
			return "", fmt.Errorf("devices of container %s: %w", c.Name, err)
		}
		criconfig.WithDevices(cfg, opts)
	}
	if err := os.MkdirAll(criconfig.PodLogDir(m.cfg.PodLogsDir, pod.Namespace, pod.Name, string(pod.UID))+"/"+c.Name, 0o755); err != nil {
		return "", err
	}
	id, err := m.rt.CreateContainer(ctx, sbID, cfg, sbCfg)
	if err != nil {
		st.markWaiting(c.Name, "CreateContainerError", err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", fmt.Errorf("create container %s: %w", c.Name, err)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Created", "Created container %s", c.Name)
	if !a.prevFinished.IsZero() {
		// A restart: the next exit waits longer.
		spec := criconfig.Hash(c)
		e, ok := st.Crash[c.Name]
		next := nextBackoff(e, ok && e.Spec == spec, a.prevFinished)
		next.Spec = spec
		st.Crash[c.Name] = next
	}
	if err := m.rt.StartContainer(ctx, id); err != nil {
		st.markWaiting(c.Name, reasonRunError, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", fmt.Errorf("start container %s: %w", c.Name, err)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	m.linkLog(pod, c.Name, id, filepath.Join(sbCfg.GetLogDirectory(), cfg.GetLogPath()))
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if err := m.postStart(ctx, pod, c, id, cfg, podIPs, st); err != nil {
			return "", err
		}
	}
	return id, nil
}

// errPull marks a failed pull.
var errPull = errors.New(reasonErrImagePull)

// pullPolicy is c's imagePullPolicy, defaulted as the API server does: Always
// for a :latest or untagged image, else IfNotPresent.
func pullPolicy(c *v1.Container) v1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	ref := c.Image
	if i := strings.Index(ref, "@"); i >= 0 {
		return v1.PullIfNotPresent
	}
	tag := ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag = ref[i+1:]
	}
	if tag == "" || tag == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// ensureImage makes c's image present as its pull policy asks, with the
// kubelet's image pull back-off, and returns it as the runtime reports it
// (nil if a pulled image is not reported at once). Its waiting reason and
// pull back-off go into st.
func (m *Manager) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, sbCfg *runtimeapi.PodSandboxConfig, prev v1.ContainerStateWaiting, st *SyncState) (*runtimeapi.Image, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image}
	policy := pullPolicy(c)
	is, err := m.rt.ImageStatus(ctx, spec, false)
	if err != nil {
		st.markWaiting(c.Name, "ImageInspectError", err.Error())
		return nil, fmt.Errorf("image status of %q: %w", c.Image, err)
	}
	present := is.GetImage() != nil
	if present && policy != v1.PullAlways {
		m.rec.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine", c.Image)
		return is.GetImage(), nil
	}
	if policy == v1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
		st.markWaiting(c.Name, ErrImageNeverPull.Error(), msg)
		if prev.Reason != ErrImageNeverPull.Error() {
			m.rec.Event(pod, v1.EventTypeWarning, ErrImageNeverPull.Error(), msg)
		}
		return nil, fmt.Errorf("container %s: %w: %s", c.Name, ErrImageNeverPull, msg)
	}
	now := m.clock.Now()
	e, ok := st.Pull[c.Image]
	if in, _ := inBackoff(e, ok, e.Last, now); in {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		st.markWaiting(c.Name, reasonImagePullBackOff, msg)
		if prev.Reason != reasonImagePullBackOff {
			m.rec.Event(pod, v1.EventTypeNormal, "BackOff", msg)
		}
		return nil, fmt.Errorf("container %s: %w", c.Name, errImagePullBackOff)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
	start := m.clock.Now()
	if _, err := m.rt.PullImage(ctx, spec, nil, sbCfg); err != nil {
		st.Pull[c.Image] = nextBackoff(e, ok, m.clock.Now())
		st.markWaiting(c.Name, reasonErrImagePull, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.Image, err)
		return nil, fmt.Errorf("container %s: %w: %w", c.Name, errPull, err)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %s", c.Image, m.clock.Since(start).Round(time.Millisecond))
	if is, err = m.rt.ImageStatus(ctx, spec, false); err != nil {
		return nil, fmt.Errorf("image status of %q: %w", c.Image, err)
	}
	return is.GetImage(), nil
}

// verifyNonRoot refuses a container that must run as non-root (its own or
// its pod's runAsNonRoot) but would run as root: by its runAsUser, or by the
// image's user when it sets none.
func verifyNonRoot(pod *v1.Pod, c *v1.Container, img *runtimeapi.Image) error {
	nonRoot := false
	var uid *int64
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsNonRoot != nil {
			nonRoot = *psc.RunAsNonRoot
		}
		uid = psc.RunAsUser
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
	}
	if !nonRoot {
		return nil
	}
	who := fmt.Sprintf("(pod: %q, container: %s)", pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", c.Name)
	if uid != nil {
		if *uid == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy %s", who)
		}
		return nil
	}
	switch {
	case img.GetUid() != nil:
		if img.GetUid().GetValue() == 0 {
			return fmt.Errorf("container has runAsNonRoot and image will run as root %s", who)
		}
	case img.GetUsername() != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root %s", img.GetUsername(), who)
	default:
		return fmt.Errorf("container has runAsNonRoot and image will run as root %s", who)
	}
	return nil
}

// pullBackoffLeft is the time left on the pull back-off for image in st.
func (m *Manager) pullBackoffLeft(st *SyncState, image string) time.Duration {
	e, ok := st.Pull[image]
	_, left := inBackoff(e, ok, e.Last, m.clock.Now())
	return left
}

// readResolvConf reads the host's resolv.conf; a missing file is empty.
func readResolvConf(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read host DNS config: %w", err)
	}
	return b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
