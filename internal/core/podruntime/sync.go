package podruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/plan"
	"github.com/nodekeeper/nodekeeper/nodeapi"
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
	hashes := criconfig.Hashes(pod) // once per sync: the plan and the starts share them
	acts := plan.Compute(plan.Input{
		Pod: pod, Status: status, Hashes: hashes, Crash: st.Crash, CrashLoop: m.cfg.CrashLoop,
		NotStarted: m.notStarted(pod, status), Unhealthy: m.unhealthy(pod, status),
	}, time.Now())
	m.recordWaiting(pod, acts, prev.Waiting, st)
	res := Result{RetryAfter: acts.RetryAfter}
	if res.Err = m.preparePod(ctx, pod, status, acts); res.Err != nil {
		return res
	}
	if !acts.CreateSandbox && len(acts.Start) == 0 && len(acts.Kill) == 0 && len(acts.Ephemeral) == 0 {
		m.removeOld(ctx, status, acts.Remove, &res)
		return res // the pod is as it should be: no config to build
	}
	sb, err := m.sandbox(ctx, pod, status, acts)
	if err != nil {
		m.rec.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		res.Err = err
		return res
	}
	if acts.CreateSandbox {
		res.Started = append(res.Started, sb.id)
	}
	if err := m.killContainers(ctx, pod, status, acts.Kill); err != nil {
		res.Err = err
		return res
	}
	// Ephemeral containers first, so that one can debug an init container
	// that fails to start; each failure is the sync's, not the others'.
	for _, a := range acts.Ephemeral {
		m.startOne(ctx, pod, a, sb, prev.Waiting[a.Container.Name], st, &res)
	}
	for _, a := range acts.Start {
		started := m.startOne(ctx, pod, a, sb, prev.Waiting[a.Container.Name], st, &res)
		if !acts.InitPhase {
			continue
		}
		if !started {
			break
		}
		// A started sidecar holds up nothing once it runs (and passed
		// its startup probe): the sync after the relist goes on.
		res.More = res.More || nodeapi.IsSidecar(a.Container)
	}
	m.removeOld(ctx, status, acts.Remove, &res)
	return res
}

// recordWaiting sets st's waiting reasons from the plan (a container about
// to start is ContainerCreating) and records a BackOff event for each
// crash-loop back-off that before, the pod's previous waiting reasons, did
// not have: one event per back-off, not one per sync.
func (m *Manager) recordWaiting(pod *v1.Pod, acts plan.Actions, before map[string]v1.ContainerStateWaiting, st *SyncState) {
	waiting := make(map[string]v1.ContainerStateWaiting, len(acts.Waiting)+len(acts.Start))
	maps.Copy(waiting, acts.Waiting)
	for _, a := range slices.Concat(acts.Ephemeral, acts.Start) {
		waiting[a.Container.Name] = v1.ContainerStateWaiting{Reason: reasonCreating}
	}
	st.Waiting = waiting
	for _, name := range slices.Sorted(maps.Keys(acts.Waiting)) {
		if w := acts.Waiting[name]; w.Reason == plan.ReasonCrashLoopBackOff && before[name] != w {
			m.rec.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", name, pod.Name, pod.Namespace, pod.UID)
		}
	}
}

// preparePod kills the pod when the plan makes a new sandbox, and makes the
// pod's directories and volumes.
func (m *Manager) preparePod(ctx context.Context, pod *v1.Pod, status *PodStatus, acts plan.Actions) error {
	if acts.KillPod {
		m.rec.Event(pod, v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
		if err := m.KillPod(ctx, pod, status, nil); err != nil {
			return fmt.Errorf("kill pod for a new sandbox: %w", err)
		}
	}
	if err := makePodDirs(m.cfg.PodsDir, string(pod.UID)); err != nil {
		return fmt.Errorf("pod directory: %w", err)
	}
	return m.setUpVolumes(ctx, pod)
}

// podSandbox is the sandbox a sync starts containers in.
type podSandbox struct {
	id  string
	cfg *runtimeapi.PodSandboxConfig
	// ips are its IPs (none for host network).
	ips []string
}

// sandbox is the pod's sandbox for the plan's starts: the current one, or
// a new one the plan asks for, run now.
func (m *Manager) sandbox(ctx context.Context, pod *v1.Pod, status *PodStatus, acts plan.Actions) (podSandbox, error) {
	cfg, err := m.sandboxConfig(pod, acts.Attempt)
	if err != nil {
		return podSandbox{}, err
	}
	sb := podSandbox{id: acts.SandboxID, cfg: cfg}
	if status != nil {
		sb.ips = status.IPs
	}
	if acts.CreateSandbox {
		if sb.id, sb.ips, err = m.createSandbox(ctx, pod, cfg); err != nil {
			return podSandbox{}, err
		}
	}
	return sb, nil
}

// startOne starts the container of a and reports whether it started; a
// failure goes into res (its error, unless a pull back-off; the pull
// back-off's end as RetryAfter); what it learns goes into st.
func (m *Manager) startOne(ctx context.Context, pod *v1.Pod, a plan.Start, sb podSandbox, prev v1.ContainerStateWaiting, st *SyncState, res *Result) bool {
	id, err := m.startContainer(ctx, pod, a, sb, prev, st)
	if err == nil {
		delete(st.Waiting, a.Container.Name)
		res.Started = append(res.Started, id)
		return true
	}
	if res.Err == nil && !errors.Is(err, errImagePullBackOff) {
		res.Err = err
	}
	if errors.Is(err, errImagePullBackOff) || errors.Is(err, errPull) {
		if left := m.pullBackoffLeft(st, a.Container.Image); left > 0 && (res.RetryAfter == 0 || left < res.RetryAfter) {
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
func (m *Manager) killContainers(ctx context.Context, pod *v1.Pod, status *PodStatus, kills []plan.Kill) error {
	if len(kills) == 0 {
		return nil
	}
	byID := map[string]*runtimeapi.ContainerStatus{}
	if status != nil {
		for _, c := range status.Containers {
			byID[c.Id] = c
		}
	}
	now := time.Now()
	errs := make([]error, len(kills))
	var wg sync.WaitGroup
	for i, k := range kills {
		c := byID[k.ID]
		if c == nil {
			continue
		}
		m.log.Info("restarting container", "pod", pod.Namespace+"/"+pod.Name, "container", k.Name, "reason", k.Reason)
		deadline := now.Add(time.Duration(podGrace(pod, status, k.Grace)) * time.Second)
		wg.Go(func() { errs[i] = m.stopContainer(ctx, pod, status, c, deadline, k.Message, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startContainer pulls c's image as its policy asks and creates and starts
// it, and returns its ID once it started (and its post-start hook ran).
// prev is the container's waiting state after the last sync; what it learns
// (waiting reasons, back-offs) goes into st.
func (m *Manager) startContainer(ctx context.Context, pod *v1.Pod, a plan.Start, sb podSandbox, prev v1.ContainerStateWaiting, st *SyncState) (string, error) {
	c := a.Container
	img, err := m.ensureImage(ctx, pod, c, sb.cfg, prev, st)
	if err != nil {
		return "", err
	}
	cfg, err := m.containerConfig(ctx, pod, a, sb, img)
	if err != nil {
		cause := err
		if de := (devicesError{}); errors.As(err, &de) {
			cause = de.err
		}
		st.markWaiting(c.Name, reasonCreateError, cause.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", cause)
		return "", err
	}
	if err := os.MkdirAll(criconfig.PodLogDir(m.cfg.PodLogsDir, pod.Namespace, pod.Name, string(pod.UID))+"/"+c.Name, 0o755); err != nil {
		return "", err
	}
	id, err := m.rt.CreateContainer(ctx, sb.id, cfg, sb.cfg)
	if err != nil {
		st.markWaiting(c.Name, "CreateContainerError", err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", fmt.Errorf("create container %s: %w", c.Name, err)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Created", "Created container %s", c.Name)
	if !a.PrevFinished.IsZero() {
		// A restart: the next exit waits longer.
		e, ok := st.Crash[c.Name]
		next := plan.NextBackoff(m.cfg.CrashLoop, e, ok && e.Spec == a.Hash, a.PrevFinished, time.Now())
		next.Spec = a.Hash
		st.Crash[c.Name] = next
	}
	if err := m.rt.StartContainer(ctx, id); err != nil {
		st.markWaiting(c.Name, reasonRunError, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		return "", fmt.Errorf("start container %s: %w", c.Name, err)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	m.linkLog(pod, c.Name, id, filepath.Join(sb.cfg.GetLogDirectory(), cfg.GetLogPath()))
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if err := m.postStart(ctx, pod, c, id, cfg, sb.ips, st); err != nil {
			return "", err
		}
	}
	return id, nil
}

// devicesError is a device plugin's refusal of a container: the container's
// waiting message and event show the plugin's error, the sync's error names
// the container.
type devicesError struct {
	container string
	err       error
}

func (e devicesError) Error() string {
	return fmt.Sprintf("devices of container %s: %v", e.container, e.err)
}

func (e devicesError) Unwrap() error { return e.err }

// containerConfig is the CRI config of a's container in sandbox sb, after
// the checks that can refuse it: the non-root policy against the image
// (img), an ephemeral container's target; the API objects its environment
// reads fetched, its devices added (a plugin's error is a devicesError).
func (m *Manager) containerConfig(ctx context.Context, pod *v1.Pod, a plan.Start, sb podSandbox, img *runtimeapi.Image) (*runtimeapi.ContainerConfig, error) {
	c := a.Container
	if err := verifyNonRoot(pod, c, img); err != nil {
		return nil, err
	}
	if a.Target != "" && a.TargetID == "" {
		return nil, fmt.Errorf("unable to find target container %s", a.Target)
	}
	envObjs, err := m.vols.EnvObjects(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	cfg, err := containerConfig(containerInput{
		Input: criconfig.Input{
			Pod: pod, Container: c, Hash: a.Hash, RestartCount: a.RestartCount, SandboxID: sb.id, Run: a.Run, PodIPs: sb.ips,
			HostIP: m.cfg.HostIP, NodeName: m.cfg.NodeName, MemoryCapacity: m.cfg.MemoryCapacity, CPUs: m.cfg.CPUs,
			Swap: m.cfg.Swap, OOMGroup: m.cfg.OOMGroup, Sources: (*criconfig.EnvSources)(envObjs), TargetID: a.TargetID,
		},
		podsDir: m.cfg.PodsDir, hostsFile: m.cfg.HostsFile, clusterDomain: m.cfg.ClusterDomain, volumes: m.vols, supportsRRO: m.supportsRRO(),
	})
	if err != nil {
		return nil, err
	}
	if m.devices != nil {
		opts, err := m.devices.ContainerOptions(ctx, pod, c)
		if err != nil {
			return nil, devicesError{c.Name, err}
		}
		criconfig.WithDevices(cfg, opts)
	}
	return cfg, nil
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
	now := time.Now()
	e, ok := st.Pull[c.Image]
	if in, _ := plan.InBackoff(plan.PullPolicy(), e, ok, e.Last, now); in {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		if prev.Reason != reasonImagePullBackOff {
			m.rec.Event(pod, v1.EventTypeNormal, "BackOff", msg)
		}
		if e.Err != "" {
			msg += ": " + reasonErrImagePull + ": " + e.Err // the kubelet's waiting message
		}
		st.markWaiting(c.Name, reasonImagePullBackOff, msg)
		return nil, fmt.Errorf("container %s: %w", c.Name, errImagePullBackOff)
	}
	m.rec.Eventf(pod, v1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
	start := time.Now()
	pulled, err := m.pull(ctx, spec, sbCfg)
	if errors.Is(err, errNoPullSlot) {
		// The pod's worker stops (the agent stops, the pod goes): no pull
		// was tried, so no back-off; the next sync pulls again.
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	if err != nil {
		failed := time.Now()
		next := plan.NextBackoff(plan.PullPolicy(), e, ok, failed, failed)
		next.Err = err.Error()
		st.Pull[c.Image] = next
		st.markWaiting(c.Name, reasonErrImagePull, err.Error())
		m.rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.Image, err)
		return nil, fmt.Errorf("container %s: %w: %w", c.Name, errPull, err)
	}
	m.rec.Event(pod, v1.EventTypeNormal, "Pulled", pulledMessage(c.Image, pulled.took, time.Since(start), pulled.image.GetSize()))
	if pulled.statusErr != nil {
		return nil, fmt.Errorf("image status of %q: %w", c.Image, pulled.statusErr)
	}
	return pulled.image, nil
}

// errNoPullSlot: the context ended while a pull waited for its turn.
var errNoPullSlot = errors.New("no image pull slot")

// pulled is what one pull learnt.
type pulled struct {
	// image is the image as the runtime reports it after the pull (nil if
	// not reported, or statusErr).
	image     *runtimeapi.Image
	statusErr error
	// took is the pull and the status call, without the wait for a slot.
	took time.Duration
}

// pull pulls spec's image once a pull slot is free (Config.MaxParallelImagePulls)
// and reads its status, holding the slot for both as the kubelet's pullers
// do: the error is the pull's, or errNoPullSlot if ctx ended first.
func (m *Manager) pull(ctx context.Context, spec *runtimeapi.ImageSpec, sbCfg *runtimeapi.PodSandboxConfig) (pulled, error) {
	release, err := m.pulls.acquire(ctx)
	if err != nil {
		return pulled{}, fmt.Errorf("pull of %q: %w: %w", spec.GetImage(), errNoPullSlot, err)
	}
	defer release()
	start := time.Now()
	if _, err := m.rt.PullImage(ctx, spec, nil, sbCfg); err != nil {
		return pulled{}, err
	}
	is, err := m.rt.ImageStatus(ctx, spec, false)
	return pulled{image: is.GetImage(), statusErr: err, took: time.Since(start)}, nil
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
	_, left := plan.InBackoff(plan.PullPolicy(), e, ok, e.Last, time.Now())
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
