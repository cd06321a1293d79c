package podruntime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/qos"
)

// Bounds of a termination message, as the kubelet applies them.
const (
	maxTerminationMessage = 4096
	fallbackLogLines      = 80
	fallbackLogBytes      = 2048
)

// Statuses lists every pod the runtime holds (one ListPodSandbox and one
// ListContainers, then the statuses), keyed by pod UID. Pods from earlier runs
// of the agent are included: that is how the agent adopts them.
func (m *Manager) Statuses(ctx context.Context) (map[types.UID]*PodStatus, error) {
	if err := m.ensureRuntimeName(ctx); err != nil {
		return nil, err
	}
	sbs, err := m.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, err
	}
	ctrs, err := m.rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, err
	}
	pods := map[types.UID]*PodStatus{}
	listed := make(map[string]bool, len(sbs)+len(ctrs))
	pod := func(uid string, md interface{ GetName() string }, ns string) *PodStatus {
		p, ok := pods[types.UID(uid)]
		if !ok {
			p = &PodStatus{UID: types.UID(uid)}
			pods[p.UID] = p
		}
		if p.Name == "" && md != nil {
			p.Name, p.Namespace = md.GetName(), ns
		}
		return p
	}
	for _, sb := range sbs {
		uid := sb.GetLabels()[labelPodUID]
		if uid == "" {
			continue // not ours
		}
		listed[sb.Id] = true
		st, err := m.sandboxStatus(ctx, sb)
		if errors.Is(err, cri.ErrNotFound) {
			continue // removed since the list
		}
		if err != nil {
			return nil, err
		}
		p := pod(uid, sb.GetMetadata(), sb.GetMetadata().GetNamespace())
		p.Sandboxes = append(p.Sandboxes, st)
	}
	for _, c := range ctrs {
		uid := c.GetLabels()[labelPodUID]
		if uid == "" {
			continue
		}
		listed[c.Id] = true
		st, err := m.containerStatus(ctx, c)
		if errors.Is(err, cri.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		p := pod(uid, nil, "")
		if p.Name == "" {
			p.Name, p.Namespace = c.GetLabels()[labelPodName], c.GetLabels()[labelPodNamespace]
		}
		p.Containers = append(p.Containers, st)
	}
	m.mu.Lock()
	for id := range m.ctrCache {
		if !listed[id] {
			delete(m.ctrCache, id)
		}
	}
	for id := range m.sbCache {
		if !listed[id] {
			delete(m.sbCache, id)
		}
	}
	m.mu.Unlock()
	for _, p := range pods {
		sortStatus(p)
	}
	return pods, nil
}

// sortStatus orders p's sandboxes and containers newest first and sets its IPs
// from the newest ready sandbox.
func sortStatus(p *PodStatus) {
	slices.SortStableFunc(p.Sandboxes, func(a, b *runtimeapi.PodSandboxStatus) int { return cmpNewest(a.CreatedAt, b.CreatedAt) })
	slices.SortStableFunc(p.Containers, func(a, b *runtimeapi.ContainerStatus) int { return cmpNewest(a.CreatedAt, b.CreatedAt) })
	p.IPs = nil
	for _, sb := range p.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if ip := sb.GetNetwork().GetIp(); ip != "" {
			p.IPs = append(p.IPs, ip)
			for _, a := range sb.GetNetwork().GetAdditionalIps() {
				p.IPs = append(p.IPs, a.GetIp())
			}
		}
		break
	}
}

func cmpNewest(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// containerStatus is c's status. A container's status changes only with its
// state (its start and exit times, exit code and message are set once), so
// the one read when the container was last listed in the same state is
// reused, and the runtime is asked only about containers that changed.
func (m *Manager) containerStatus(ctx context.Context, c *runtimeapi.Container) (*runtimeapi.ContainerStatus, error) {
	m.mu.Lock()
	st, ok := m.ctrCache[c.Id]
	m.mu.Unlock()
	if ok && st.State == c.State {
		return st, nil
	}
	r, err := m.rt.ContainerStatus(ctx, c.Id, false)
	if err != nil {
		return nil, err
	}
	st = r.GetStatus()
	if st == nil {
		return nil, fmt.Errorf("container %s: the runtime returned no status", c.Id)
	}
	if st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.Message == "" {
		st.Message = terminationMessage(st)
	}
	if st.State == c.State {
		m.mu.Lock()
		m.ctrCache[c.Id] = st
		m.mu.Unlock()
	}
	return st, nil
}

// sandboxStatus is sb's status, reused while its listed state is the same
// (a sandbox's IPs and namespaces are fixed when it is made).
func (m *Manager) sandboxStatus(ctx context.Context, sb *runtimeapi.PodSandbox) (*runtimeapi.PodSandboxStatus, error) {
	m.mu.Lock()
	st, ok := m.sbCache[sb.Id]
	m.mu.Unlock()
	if ok && st.State == sb.State {
		return st, nil
	}
	r, err := m.rt.PodSandboxStatus(ctx, sb.Id, false)
	if err != nil {
		return nil, err
	}
	st = r.GetStatus()
	if st == nil {
		return nil, fmt.Errorf("sandbox %s: the runtime returned no status", sb.Id)
	}
	if st.State == sb.State {
		m.mu.Lock()
		m.sbCache[sb.Id] = st
		m.mu.Unlock()
	}
	return st, nil
}

// statusCaller is CRI's Status call, which tells the runtime handlers'
// features; *cri.Client and cri-api's fake runtime have it. A Runtime
// without it supports no optional feature.
type statusCaller interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// ensureRuntimeName learns, once, the runtime's name for container IDs and
// whether its default handler supports recursive read-only mounts.
func (m *Manager) ensureRuntimeName(ctx context.Context) error {
	m.mu.Lock()
	known := m.runtimeName != ""
	m.mu.Unlock()
	if known {
		return nil
	}
	v, err := m.rt.Version(ctx, "v1")
	if err != nil {
		return err
	}
	rro := false
	if sc, ok := m.rt.(statusCaller); ok {
		st, err := sc.Status(ctx, false)
		if err != nil {
			return err
		}
		rro = defaultHandlerRRO(st)
	}
	m.mu.Lock()
	m.runtimeName, m.rro = v.GetRuntimeName(), rro
	m.mu.Unlock()
	return nil
}

// defaultHandlerRRO reports whether st lists the default runtime handler
// (named "") with recursive read-only mounts; a runtime that lists no
// handlers (containerd before 2.0) supports none.
func defaultHandlerRRO(st *runtimeapi.StatusResponse) bool {
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			return h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	return false
}

// supportsRRO reports whether the runtime's default handler supports
// recursive read-only mounts, as far as known.
func (m *Manager) supportsRRO() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rro
}

// terminationMessage is an exited container's message: its termination-log
// file, or, with policy FallbackToLogsOnError and a failure, its log's tail.
func terminationMessage(st *runtimeapi.ContainerStatus) string {
	path := st.GetAnnotations()[annoTermMsgPath]
	if path != "" {
		for _, mnt := range st.GetMounts() {
			if mnt.GetContainerPath() == path {
				if b := readLimited(mnt.GetHostPath(), maxTerminationMessage); len(b) > 0 {
					return string(b)
				}
			}
		}
	}
	if st.GetAnnotations()[annoTermMsgPolicy] == string(v1.TerminationMessageFallbackToLogsOnError) && st.ExitCode != 0 && st.LogPath != "" {
		return logTail(st.LogPath, fallbackLogLines, fallbackLogBytes)
	}
	return ""
}

// readLimited reads at most n bytes of the file at path; nil on any error.
func readLimited(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return b
}

// logTail is the content of the last lines of a CRI log file (lines
// "TIME STREAM TAG CONTENT"), at most maxBytes of it.
func logTail(path string, lines int, maxBytes int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	// Enough of the end of the file for the last lines.
	if st, err := f.Stat(); err == nil && st.Size() > 64*1024 {
		_, _ = f.Seek(st.Size()-64*1024, io.SeekStart)
	}
	var all []string
	var partial strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) != 4 {
			continue
		}
		partial.WriteString(parts[3])
		if parts[2] == "P" {
			continue // a partial line continues in the next
		}
		all = append(all, partial.String()+"\n")
		partial.Reset()
	}
	if partial.Len() > 0 { // output that ended without a newline ("echo -n DONE")
		all = append(all, partial.String())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	s := strings.Join(all, "")
	if int64(len(s)) > maxBytes {
		s = s[int64(len(s))-maxBytes:]
	}
	return s
}

// statusInput is what a pod's API status is derived from.
type statusInput struct {
	pod         *v1.Pod
	status      *PodStatus
	waiting     map[string]v1.ContainerStateWaiting
	runtimeName string
	hostIP      string
	probes      Probes
	now         time.Time
	// supportsRRO: the runtime supports recursive read-only mounts.
	supportsRRO bool
}

// PodStatus derives the pod's API status from its runtime status (nil: none
// yet) and what the last SyncPod saw (waiting reasons such as
// ContainerCreating, CrashLoopBackOff, ErrImagePull), at now.
func (m *Manager) PodStatus(pod *v1.Pod, status *PodStatus, now time.Time) v1.PodStatus {
	m.mu.Lock()
	waiting := make(map[string]v1.ContainerStateWaiting, len(m.waiting[pod.UID]))
	for k, v := range m.waiting[pod.UID] {
		waiting[k] = v
	}
	name, rro := m.runtimeName, m.rro
	m.mu.Unlock()
	st := derivePodStatus(statusInput{pod: pod, status: status, waiting: waiting, runtimeName: name, hostIP: m.cfg.HostIP,
		probes: m.probes, now: now, supportsRRO: rro})
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.conds[pod.UID]
	if !ok {
		// The first status of this pod here: its times go on from the
		// status the pod came with (the scheduler's PodScheduled, or this
		// node's before a restart), as the kubelet's do.
		prev = pod.Status.Conditions
	}
	st.Conditions = keepTransitions(prev, st.Conditions)
	m.conds[pod.UID] = st.Conditions
	return st
}

// keepTransitions gives each condition of cur whose status is the same as in
// prev prev's LastTransitionTime: a condition's time is when it last changed.
func keepTransitions(prev, cur []v1.PodCondition) []v1.PodCondition {
	out := make([]v1.PodCondition, len(cur))
	copy(out, cur)
	for i := range out {
		for _, p := range prev {
			if p.Type == out[i].Type && p.Status == out[i].Status {
				out[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return out
}

// newestByName is the newest container of status named name, nil if none;
// with prev, the one before it.
func newestByName(status *PodStatus, name string) (newest, prev *runtimeapi.ContainerStatus) {
	if status == nil {
		return nil, nil
	}
	for _, c := range status.Containers {
		if c.GetMetadata().GetName() != name {
			continue
		}
		if newest == nil {
			newest = c
		} else {
			return newest, c
		}
	}
	return newest, nil
}

// restartCount of a container from its annotation.
func restartCount(c *runtimeapi.ContainerStatus) int {
	if c == nil {
		return 0
	}
	n, err := strconv.Atoi(c.GetAnnotations()[annoRestartCount])
	if err != nil {
		return int(c.GetMetadata().GetAttempt())
	}
	return n
}

func nanoTime(ns int64) metav1.Time {
	if ns == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(0, ns))
}

// terminated is the API state of an exited container.
func terminated(c *runtimeapi.ContainerStatus, id string) *v1.ContainerStateTerminated {
	reason := c.Reason
	if reason == "" {
		reason = "Completed"
		if c.ExitCode != 0 {
			reason = "Error"
		}
	}
	return &v1.ContainerStateTerminated{
		ExitCode: c.ExitCode, Reason: reason, Message: c.Message,
		StartedAt: nanoTime(c.StartedAt), FinishedAt: nanoTime(c.FinishedAt), ContainerID: id,
	}
}

// containerAPIStatus is the API status of spec container c.
func containerAPIStatus(in statusInput, c *v1.Container, defaultWaiting string) v1.ContainerStatus {
	newest, prev := newestByName(in.status, c.Name)
	cs := v1.ContainerStatus{Name: c.Name, Image: c.Image, Started: new(false), VolumeMounts: volumeMountStatuses(c, in.supportsRRO)}
	w, hasWaiting := in.waiting[c.Name]
	if newest == nil {
		if !hasWaiting {
			w = v1.ContainerStateWaiting{Reason: defaultWaiting}
		}
		cs.State.Waiting = &w
		return cs
	}
	id := in.runtimeName + "://" + newest.Id
	cs.ContainerID = id
	cs.Image = containerImage(newest, c)
	cs.ImageID = newest.ImageRef
	cs.RestartCount = int32(restartCount(newest))
	if prev != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		cs.LastTerminationState.Terminated = terminated(prev, in.runtimeName+"://"+prev.Id)
	}
	switch newest.State {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		cs.State.Running = &v1.ContainerStateRunning{StartedAt: nanoTime(newest.StartedAt)}
		cs.Started = new(true)
		cs.Ready = true
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		t := terminated(newest, id)
		if hasWaiting {
			// Waiting to restart: the exit is the last termination.
			cs.State.Waiting = &w
			cs.LastTerminationState = v1.ContainerState{Terminated: t}
		} else {
			cs.State.Terminated = t
		}
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		if !hasWaiting {
			w = v1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		cs.State.Waiting = &w
	default:
		if !hasWaiting {
			w = v1.ContainerStateWaiting{Reason: "ContainerStatusUnknown"}
		}
		cs.State.Waiting = &w
	}
	return cs
}

// containerImage is the image runtime container cs of spec container c was
// made from, as the spec named it then: a changed spec shows only in the
// container that replaces it.
func containerImage(cs *runtimeapi.ContainerStatus, c *v1.Container) string {
	if img := cs.GetAnnotations()[annoImage]; img != "" {
		return img
	}
	if img := cs.GetImage().GetImage(); img != "" {
		return img
	}
	return c.Image
}

// volumeMountStatuses are the statuses of c's volume mounts, as the kubelet
// reports them: each mount's name, path and readOnly, and for a read-only
// one whether it is recursively read-only (Enabled or Disabled; a mode the
// runtime cannot honour reads Disabled). nil without mounts.
func volumeMountStatuses(c *v1.Container, supportsRRO bool) []v1.VolumeMountStatus {
	var out []v1.VolumeMountStatus
	for _, vm := range c.VolumeMounts {
		st := v1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			if rro, err := recursiveReadOnly(vm, supportsRRO); err == nil && rro {
				mode = v1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}

// derivePodStatus is the pod's API status.
func derivePodStatus(in statusInput) v1.PodStatus {
	pod := in.pod
	out := v1.PodStatus{QOSClass: qos.Class(pod)}
	if in.hostIP != "" {
		out.HostIP = in.hostIP
		out.HostIPs = []v1.HostIP{{IP: in.hostIP}}
	}
	var sandbox *runtimeapi.PodSandboxStatus
	if in.status != nil && len(in.status.Sandboxes) > 0 {
		sandbox = in.status.Sandboxes[0]
		oldest := in.status.Sandboxes[len(in.status.Sandboxes)-1]
		t := nanoTime(oldest.CreatedAt)
		out.StartTime = &t
	}
	var ips []string
	if pod.Spec.HostNetwork {
		if in.hostIP != "" {
			ips = []string{in.hostIP}
		}
	} else if in.status != nil {
		ips = in.status.IPs
	}
	for i, ip := range ips {
		if i == 0 {
			out.PodIP = ip
		}
		out.PodIPs = append(out.PodIPs, v1.PodIP{IP: ip})
	}

	// Init containers, then containers.
	initDone, initFailed := true, false
	var incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := containerAPIStatus(in, c, "PodInitializing")
		if isSidecar(c) {
			cs = in.withProbes(cs, true)
		} else {
			// A regular init container is ready once it has succeeded.
			cs.Ready = cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		}
		out.InitContainerStatuses = append(out.InitContainerStatuses, cs)
		newest, _ := newestByName(in.status, c.Name)
		if isSidecar(c) {
			if newest == nil {
				initDone = false
				incomplete = append(incomplete, c.Name)
			}
			continue
		}
		switch {
		case newest != nil && newest.State == runtimeapi.ContainerState_CONTAINER_EXITED && newest.ExitCode == 0:
		case newest != nil && newest.State == runtimeapi.ContainerState_CONTAINER_EXITED && pod.Spec.RestartPolicy == v1.RestartPolicyNever:
			initFailed = true
			initDone = false
			incomplete = append(incomplete, c.Name)
		default:
			initDone = false
			incomplete = append(incomplete, c.Name)
		}
	}
	defaultWaiting := "ContainerCreating"
	if !initDone {
		defaultWaiting = "PodInitializing"
	}
	var running, waiting, stopped, succeeded int
	var unready []string
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := in.withProbes(containerAPIStatus(in, c, defaultWaiting), false)
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.LastTerminationState.Terminated != nil:
			stopped++ // waiting to restart after an exit
			if cs.LastTerminationState.Terminated.ExitCode == 0 {
				succeeded++
			}
		default:
			waiting++
		}
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
	}
	for _, cs := range out.InitContainerStatuses {
		for i := range pod.Spec.InitContainers {
			if c := &pod.Spec.InitContainers[i]; c.Name == cs.Name && isSidecar(c) && !cs.Ready {
				unready = append(unready, c.Name)
			}
		}
	}
	out.Phase = podPhase(pod.Spec.RestartPolicy, initDone, initFailed, running, waiting, stopped, succeeded)
	out.EphemeralContainerStatuses = ephemeralStatuses(in)

	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		c := v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(in.now)}
		if !ok {
			c.Status, c.Reason, c.Message = v1.ConditionFalse, reason, msg
		}
		return c
	}
	sandboxReady := sandbox != nil && sandbox.State == runtimeapi.PodSandboxState_SANDBOX_READY &&
		(pod.Spec.HostNetwork || sandbox.GetNetwork().GetIp() != "")
	done := out.Phase == v1.PodSucceeded || out.Phase == v1.PodFailed
	ready := len(unready) == 0
	notReadyReason, notReadyMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if done {
		ready, notReadyReason, notReadyMsg = false, "PodCompleted", ""
	}
	initialized := initDone || (done && !initFailed)
	out.Conditions = []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, sandboxReady, "", ""),
		cond(v1.PodInitialized, initialized, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " "))),
		cond(v1.ContainersReady, ready, notReadyReason, notReadyMsg),
		cond(v1.PodReady, ready, notReadyReason, notReadyMsg),
		// The pod is on this node: scheduled, whether a scheduler said so
		// (node e2e pods name their node themselves) or not.
		cond(v1.PodScheduled, true, "", ""),
	}
	if initialized && !initDone {
		out.Conditions[1].Reason = "PodCompleted"
	}
	return out
}

// ephemeralStatuses are the API statuses of the pod's ephemeral containers,
// as the kubelet reports them: states as for the other containers, never
// ready, no started field (they have no probes), and waiting for
// PodInitializing in a pod with init containers before they are created.
// They count for neither the phase nor the conditions.
func ephemeralStatuses(in statusInput) []v1.ContainerStatus {
	defaultWaiting := "ContainerCreating"
	if len(in.pod.Spec.InitContainers) > 0 {
		defaultWaiting = "PodInitializing"
	}
	var out []v1.ContainerStatus
	for i := range in.pod.Spec.EphemeralContainers {
		c := (*v1.Container)(&in.pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		cs := containerAPIStatus(in, c, defaultWaiting)
		cs.Ready, cs.Started = false, nil
		out = append(out, cs)
	}
	return out
}

// podPhase is the kubelet's phase rule over the regular containers' counts.
func podPhase(policy v1.RestartPolicy, initDone, initFailed bool, running, waiting, stopped, succeeded int) v1.PodPhase {
	switch {
	case initFailed:
		return v1.PodFailed
	case !initDone:
		return v1.PodPending
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped > 0:
		switch policy {
		case v1.RestartPolicyNever:
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		case v1.RestartPolicyOnFailure:
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodRunning
		default:
			return v1.PodRunning
		}
	}
	return v1.PodPending
}
