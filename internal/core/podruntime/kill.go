package podruntime

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

// minGracePeriod is the least time a container gets between SIGTERM and
// SIGKILL, the kubelet's minimum.
const minGracePeriod = 2

// podGrace is the grace period of a kill: override, else the pod's
// terminationGracePeriodSeconds, else (an orphan) what its containers
// recorded, else the API default.
func podGrace(pod *v1.Pod, status *PodStatus, override *int64) int64 {
	switch {
	case override != nil:
		return *override
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		return *pod.Spec.TerminationGracePeriodSeconds
	case pod != nil:
		return criconfig.DefaultGracePeriod
	}
	if status != nil {
		for _, c := range status.Containers {
			if g, err := strconv.ParseInt(c.GetAnnotations()[criconfig.AnnotationPodGrace], 10, 64); err == nil {
				return g
			}
		}
	}
	return criconfig.DefaultGracePeriod
}

// eventObject is what events about a pod name: the pod, or for an orphan a
// pod made from its runtime status.
func eventObject(pod *v1.Pod, status *PodStatus) *v1.Pod {
	if pod != nil {
		return pod
	}
	p := &v1.Pod{}
	if status != nil {
		p.ObjectMeta = metav1.ObjectMeta{Name: status.Name, Namespace: status.Namespace, UID: status.UID}
	}
	return p
}

// KillPod stops every container of the pod and then its sandbox, within
// gracePeriod (nil: the pod's terminationGracePeriodSeconds). As with the
// kubelet, every container's pre-stop hook starts at once; the regular
// containers are then stopped, and the sidecars after them one by one in
// reverse order, each once the containers it serves have stopped (or the
// grace period has run out). pod may be nil for a pod known only from the
// runtime (an orphan).
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, status *PodStatus, gracePeriod *int64) error {
	if status == nil {
		return nil
	}
	grace := podGrace(pod, status, gracePeriod)
	deadline := time.Now().Add(time.Duration(grace) * time.Second)
	var ctrs []*runtimeapi.ContainerStatus
	for _, c := range status.Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING || c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			ctrs = append(ctrs, c)
		}
	}
	after := stopAfter(pod, ctrs)
	stopped := make([]chan struct{}, len(ctrs))
	for i := range stopped {
		stopped[i] = make(chan struct{})
	}
	errs := make([]error, len(ctrs))
	var wg sync.WaitGroup
	for i, c := range ctrs {
		turn := make([]<-chan struct{}, 0, len(after[i]))
		for _, j := range after[i] {
			turn = append(turn, stopped[j])
		}
		wg.Go(func() {
			defer close(stopped[i])
			errs[i] = m.stopContainer(ctx, pod, status, c, deadline, "", turn)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	for _, sb := range status.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if e := m.rt.StopPodSandbox(ctx, sb.Id); e != nil && !errors.Is(e, cri.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("stop sandbox %s: %w", sb.Id, e))
		}
	}
	return err
}

// stopAfter says, for each of ctrs, which others (their indexes) must have
// stopped before it is: a sidecar waits for every container that is not a
// sidecar and for the sidecars that come after it in the pod's spec (for an
// orphan: that were created after it); the others wait for nothing.
func stopAfter(pod *v1.Pod, ctrs []*runtimeapi.ContainerStatus) [][]int {
	// rank orders the sidecars: their place among the init containers,
	// else their creation.
	rank := func(c *runtimeapi.ContainerStatus) int64 {
		if pod != nil {
			for i := range pod.Spec.InitContainers {
				if pod.Spec.InitContainers[i].Name == c.GetMetadata().GetName() {
					return int64(i)
				}
			}
		}
		return c.CreatedAt
	}
	isSide := func(c *runtimeapi.ContainerStatus) bool {
		return c.GetAnnotations()[criconfig.AnnotationInitKind] == "sidecar"
	}
	after := make([][]int, len(ctrs))
	for i, c := range ctrs {
		if !isSide(c) {
			continue
		}
		for j, o := range ctrs {
			if j != i && (!isSide(o) || rank(o) > rank(c)) {
				after[i] = append(after[i], j)
			}
		}
	}
	return after
}

// stopContainer runs c's pre-stop hook, bounded by the deadline (none when
// it has passed), waits for its turn (every channel of turn closed, or the
// deadline), then stops it with the grace left (at least minGracePeriod). message is the Killing
// event's ("": "Stopping container NAME").
func (m *Manager) stopContainer(ctx context.Context, pod *v1.Pod, status *PodStatus, c *runtimeapi.ContainerStatus, deadline time.Time, message string, turn []<-chan struct{}) error {
	name := c.GetMetadata().GetName()
	obj := eventObject(pod, status)
	if message == "" {
		message = "Stopping container " + name
	}
	m.rec.Event(obj, v1.EventTypeNormal, "Killing", message)
	// A zero grace period (a RestartAllContainers' cleanup, a forced
	// deletion) leaves no time for a pre-stop hook: none runs, as with the
	// kubelet, which runs it only for a grace period above 0.
	if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && time.Now().Before(deadline) {
		if h := preStopHook(pod, c); h != nil {
			m.preStop(ctx, pod, status, c, h, deadline)
		}
	}
	if len(turn) > 0 {
		m.waitTurn(ctx, turn, deadline)
	}
	left := int64(deadline.Sub(time.Now()).Round(time.Second) / time.Second)
	if left < minGracePeriod {
		left = minGracePeriod
	}
	if err := m.rt.StopContainer(ctx, c.Id, left); err != nil && !errors.Is(err, cri.ErrNotFound) {
		return fmt.Errorf("stop container %s: %w", name, err)
	}
	return nil
}

// preStop runs c's pre-stop hook h and returns when it ends or at the
// deadline, whichever comes first. An exec hook is not stopped at the
// deadline, as with the kubelet: its process runs on until the container
// is stopped, which ends it. HTTP and sleep hooks end at the deadline.
func (m *Manager) preStop(ctx context.Context, pod *v1.Pod, status *PodStatus, c *runtimeapi.ContainerStatus, h *v1.LifecycleHandler, deadline time.Time) {
	obj := eventObject(pod, status)
	name := c.GetMetadata().GetName()
	hctx, cancel := ctx, context.CancelFunc(func() {})
	if h.Exec == nil {
		hctx, cancel = context.WithDeadline(ctx, deadline)
	}
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- m.runHook(hctx, pod, status, c, h)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			// The event leaves out the hook's error, which may carry
			// secrets (its output); the log has it.
			m.rec.Event(obj, v1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
			m.log.Warn("pre-stop hook failed", "pod", obj.Namespace+"/"+obj.Name, "container", name, "err", err)
		}
	case <-t.C:
		m.log.Info("pre-stop hook still running at the end of the grace period; stopping the container", "pod", obj.Namespace+"/"+obj.Name, "container", name)
	case <-ctx.Done():
	}
}

// waitTurn returns once every channel of turn is closed, at the deadline or
// when ctx ends, whichever comes first.
func (m *Manager) waitTurn(ctx context.Context, turn []<-chan struct{}, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for _, ch := range turn {
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// preStopHook is c's pre-stop handler: from the pod's spec, or for an orphan
// from the container's annotation.
func preStopHook(pod *v1.Pod, c *runtimeapi.ContainerStatus) *v1.LifecycleHandler {
	name := c.GetMetadata().GetName()
	if pod != nil {
		for _, sc := range criconfig.AllContainers(pod) {
			if sc.Name == name {
				if sc.Lifecycle == nil {
					return nil
				}
				return sc.Lifecycle.PreStop
			}
		}
	}
	raw := c.GetAnnotations()[criconfig.AnnotationPreStop]
	if raw == "" {
		return nil
	}
	var h v1.LifecycleHandler
	if json.Unmarshal([]byte(raw), &h) != nil {
		return nil
	}
	return &h
}

// runHook runs a lifecycle handler for container c: exec through the
// runtime, an HTTP GET to the pod, or a sleep.
func (m *Manager) runHook(ctx context.Context, pod *v1.Pod, status *PodStatus, c *runtimeapi.ContainerStatus, h *v1.LifecycleHandler) error {
	switch {
	case h.Exec != nil:
		_, _, err := m.rt.ExecSync(ctx, c.Id, h.Exec.Command, 0)
		return err
	case h.HTTPGet != nil:
		return m.hookHTTP(ctx, pod, status, c, h.HTTPGet)
	case h.Sleep != nil:
		t := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// hookHost is the host of an httpGet hook that names none: the pod's IP,
// the node's for a host-network pod or a pod without one, else loopback.
func (m *Manager) hookHost(pod *v1.Pod, status *PodStatus) string {
	host := m.cfg.HostIP
	if (pod == nil || !pod.Spec.HostNetwork) && status != nil && len(status.IPs) > 0 {
		host = status.IPs[0]
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host
}

// hookURL is the URL of httpGet hook g of container c (whose ports its
// annotation holds, for a named port), on host unless g names one.
func hookURL(g *v1.HTTPGetAction, host string, c *runtimeapi.ContainerStatus) (string, error) {
	if g.Host != "" {
		host = g.Host
	}
	port := g.Port.IntValue()
	if port == 0 && g.Port.StrVal != "" {
		var ports []v1.ContainerPort
		_ = json.Unmarshal([]byte(c.GetAnnotations()[criconfig.AnnotationPorts]), &ports)
		for _, p := range ports {
			if p.Name == g.Port.StrVal {
				port = int(p.ContainerPort)
			}
		}
		if port == 0 {
			return "", fmt.Errorf("httpGet port %q: no container port of that name", g.Port.StrVal)
		}
	}
	scheme := "http"
	if g.Scheme == v1.URISchemeHTTPS {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + g.Path, nil
}

// newHookClient is the client of lifecycle hooks' HTTP GETs, configured as
// the kubelet's: no proxy, the server's certificate not verified (an HTTPS
// hook to a pod serves a certificate no one on the node can check), a fresh
// connection per request, redirects followed only to the same host.
func newHookClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:             nil,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's hooks
			DisableKeepAlives: true,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		},
	}
}

// hookHTTP makes a hook's HTTP GET, to the pod's IP unless it names a host.
func (m *Manager) hookHTTP(ctx context.Context, pod *v1.Pod, status *PodStatus, c *runtimeapi.ContainerStatus, g *v1.HTTPGetAction) error {
	url, err := hookURL(g, m.hookHost(pod, status), c)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for _, hd := range g.HTTPHeaders {
		req.Header.Add(hd.Name, hd.Value)
	}
	resp, err := m.hookClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("httpGet %s: %s", url, resp.Status)
	}
	return nil
}

// TearDownVolumes unmounts and removes the volumes of a pod whose
// containers have stopped for good (its phase is final, or it was killed),
// as the kubelet's volume manager does once a pod has terminated: a
// memory-backed volume gives its memory back then, not when the pod is
// deleted. The rest of the pod's directory stays until RemovePod. A pod
// started again gets its volumes set up anew, empty.
func (m *Manager) TearDownVolumes(uid types.UID) error {
	if err := m.vols.TearDown(uid); err != nil {
		return err // the files stay while a tmpfs holds them
	}
	return removeVolumes(m.cfg.PodsDir, string(uid))
}

// RemovePod removes the stopped pod's containers, sandboxes, volumes and
// cgroup.
func (m *Manager) RemovePod(ctx context.Context, status *PodStatus) error {
	if status == nil {
		return nil
	}
	var err error
	for _, c := range status.Containers {
		if e := m.rt.RemoveContainer(ctx, c.Id); e != nil && !errors.Is(e, cri.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("remove container %s: %w", c.Id, e))
			continue
		}
		m.unlinkLog(c)
	}
	for _, sb := range status.Sandboxes {
		if e := m.rt.RemovePodSandbox(ctx, sb.Id); e != nil && !errors.Is(e, cri.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("remove sandbox %s: %w", sb.Id, e))
		}
	}
	if err != nil {
		return err // the volumes stay until the runtime lets go of the pod
	}
	if status.UID == "" {
		return nil
	}
	return m.removePodFiles(status)
}

// removePodFiles removes what the node keeps of a removed pod: its volumes,
// its directory, its log directory and its cgroup.
func (m *Manager) removePodFiles(status *PodStatus) error {
	if e := m.vols.TearDown(status.UID); e != nil {
		return fmt.Errorf("tear down volumes: %w", e) // the files stay while a tmpfs holds them
	}
	err := removePodDir(m.cfg.PodsDir, string(status.UID))
	if status.Name != "" {
		if e := os.RemoveAll(criconfig.PodLogDir(m.cfg.PodLogsDir, status.Namespace, status.Name, string(status.UID))); e != nil {
			err = errors.Join(err, e)
		}
	}
	if m.cgroups != nil {
		if e := m.cgroups.RemovePod(status.UID); e != nil {
			err = errors.Join(err, fmt.Errorf("remove pod cgroup: %w", e))
		}
	}
	return err
}
