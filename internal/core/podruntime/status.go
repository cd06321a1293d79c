package podruntime

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
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
//
// A pod whose sandbox or container status the runtime fails to give (the
// kubelet's PLEG skips such a pod and inspects it again at its next relist)
// does not fail the relist: it shows its previous relist's status, or what
// this one saw of it, with InspectErr set, and it is asked about again next
// time. Only a failed list fails the relist.
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
	l := relist{pods: map[types.UID]*PodStatus{}, listed: make(map[string]bool, len(sbs)+len(ctrs)), failed: map[types.UID]error{}}
	if err := m.addSandboxes(ctx, &l, sbs); err != nil {
		return nil, err
	}
	if err := m.addContainers(ctx, &l, ctrs); err != nil {
		return nil, err
	}
	m.pruneCaches(l.listed)
	for _, p := range l.pods {
		sortStatus(p)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, err := range l.failed {
		if prev := m.last[uid]; prev != nil {
			p := *prev
			l.pods[uid] = &p
		}
		l.pods[uid].InspectErr = err
	}
	m.last = l.pods
	return l.pods, nil
}

// relist is one Statuses under way: the pods found so far and the IDs of
// the sandboxes and containers listed.
type relist struct {
	pods   map[types.UID]*PodStatus
	listed map[string]bool
	// failed holds the pods the runtime could not be asked about, with the
	// first error.
	failed map[types.UID]error
}

// fail records that pod uid could not be inspected.
func (l *relist) fail(uid string, err error) {
	l.pod(uid)
	if _, ok := l.failed[types.UID(uid)]; !ok {
		l.failed[types.UID(uid)] = err
	}
}

// pod is the status of pod uid, added when new.
func (l *relist) pod(uid string) *PodStatus {
	p, ok := l.pods[types.UID(uid)]
	if !ok {
		p = &PodStatus{UID: types.UID(uid)}
		l.pods[p.UID] = p
	}
	return p
}

// addSandboxes adds the statuses of our sandboxes (those with a pod UID
// label) to l.
func (m *Manager) addSandboxes(ctx context.Context, l *relist, sbs []*runtimeapi.PodSandbox) error {
	for _, sb := range sbs {
		uid := sb.GetLabels()[criconfig.LabelPodUID]
		if uid == "" {
			continue // not ours
		}
		l.listed[sb.Id] = true
		st, err := m.sandboxStatus(ctx, sb)
		if errors.Is(err, cri.ErrNotFound) {
			continue // removed since the list
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			l.fail(uid, fmt.Errorf("sandbox %s: %w", sb.Id, err))
			continue
		}
		p := l.pod(uid)
		if p.Name == "" && sb.GetMetadata() != nil {
			p.Name, p.Namespace = sb.GetMetadata().GetName(), sb.GetMetadata().GetNamespace()
		}
		p.Sandboxes = append(p.Sandboxes, st)
	}
	return nil
}

// addContainers adds the statuses of our containers to l.
func (m *Manager) addContainers(ctx context.Context, l *relist, ctrs []*runtimeapi.Container) error {
	for _, c := range ctrs {
		uid := c.GetLabels()[criconfig.LabelPodUID]
		if uid == "" {
			continue
		}
		l.listed[c.Id] = true
		st, err := m.containerStatus(ctx, c)
		if errors.Is(err, cri.ErrNotFound) {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			l.fail(uid, fmt.Errorf("container %s: %w", c.Id, err))
			continue
		}
		p := l.pod(uid)
		if p.Name == "" {
			p.Name, p.Namespace = c.GetLabels()[criconfig.LabelPodName], c.GetLabels()[criconfig.LabelPodNamespace]
		}
		p.Containers = append(p.Containers, st)
	}
	return nil
}

// pruneCaches drops the cached statuses of what the last list did not show.
func (m *Manager) pruneCaches(listed map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.ctrCache {
		if !listed[id] {
			delete(m.ctrCache, id)
		}
	}
	for id := range m.killedSeen {
		if !listed[id] {
			delete(m.killedSeen, id)
		}
	}
	for id := range m.sbCache {
		if !listed[id] {
			delete(m.sbCache, id)
		}
	}
}

// sortStatus orders p's sandboxes and containers newest first (by creation
// time, then, for two made in the same instant, by attempt) and sets its IPs
// from the newest ready sandbox.
func sortStatus(p *PodStatus) {
	slices.SortStableFunc(p.Sandboxes, func(a, b *runtimeapi.PodSandboxStatus) int {
		return cmp.Or(cmpNewest(a.CreatedAt, b.CreatedAt), cmpNewest(int64(a.GetMetadata().GetAttempt()), int64(b.GetMetadata().GetAttempt())))
	})
	slices.SortStableFunc(p.Containers, func(a, b *runtimeapi.ContainerStatus) int {
		return cmp.Or(cmpNewest(a.CreatedAt, b.CreatedAt), cmpNewest(int64(a.GetMetadata().GetAttempt()), int64(b.GetMetadata().GetAttempt())))
	})
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
		now := time.Now()
		m.mu.Lock()
		if !reasonMayChange(st) {
			m.ctrCache[c.Id] = st
		} else if seen, ok := m.killedSeen[c.Id]; !ok {
			m.killedSeen[c.Id] = now // not cached: read again meanwhile
		} else if now.Sub(seen) >= oomReasonWait {
			m.ctrCache[c.Id] = st
		}
		m.mu.Unlock()
	}
	return st, nil
}

// oomReasonWait is how long after a relist first saw a container killed by
// SIGKILL without the OOMKilled reason the relists read it again (see
// reasonMayChange) before they keep its Error.
const oomReasonWait = 10 * time.Second

// reasonMayChange reports whether exited container st's reason may still
// change: containerd gives a container killed by SIGKILL (exit code 137) the
// reason Error until its event loop has handled the container's OOM event,
// then OOMKilled. A relist under load can read between the two, and the
// relists right after a worker's operation come milliseconds apart, so one
// read more was not enough (e2e TestOOMKilled saw Error kept in CI).
func reasonMayChange(st *runtimeapi.ContainerStatus) bool {
	return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == 137 && st.Reason != "OOMKilled"
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
	path := st.GetAnnotations()[criconfig.AnnotationTermMsgPath]
	if path != "" {
		for _, mnt := range st.GetMounts() {
			if mnt.GetContainerPath() == path {
				if b := readLimited(mnt.GetHostPath(), maxTerminationMessage); len(b) > 0 {
					return string(b)
				}
			}
		}
	}
	if st.GetAnnotations()[criconfig.AnnotationTermMsgPolicy] == string(v1.TerminationMessageFallbackToLogsOnError) && st.ExitCode != 0 && st.LogPath != "" {
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

// StatusNode is what of this node, its runtime and its prober every pod's
// status shows (podstatus.Input.Node): the host IP, the runtime's name and
// recursive read-only support as far as known (learnt by the first
// Statuses), and the prober.
func (m *Manager) StatusNode() podstatus.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := podstatus.Node{HostIP: m.cfg.HostIP, RuntimeName: m.runtimeName, RecursiveReadOnly: m.rro}
	if m.probes != nil {
		n.Probes = m.probes
	}
	return n
}
