package podruntime

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// reasonPostStartHookError is the waiting reason of a container whose
// post-start hook failed.
const reasonPostStartHookError = "PostStartHookError"

// postStart runs c's post-start hook right after the container (id, built
// from cfg) started, as the kubelet does: synchronously, an exec hook with no
// timeout of its own, an HTTP hook to the pod's IP. When it fails, a
// FailedPostStartHook event is recorded (without the hook's output, which may
// hold secrets), the container is killed with the pod's grace period (its
// pre-stop hook runs first) and the error is returned: the container then
// restarts by the pod's restartPolicy with the crash-loop back-off.
func (m *Manager) postStart(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, cfg *runtimeapi.ContainerConfig, podIPs []string, st *SyncState) error {
	cs := &runtimeapi.ContainerStatus{
		Id: id, Metadata: cfg.GetMetadata(), State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
	}
	status := &PodStatus{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace, IPs: podIPs}
	h := c.Lifecycle.PostStart
	err := m.runHook(ctx, pod, status, cs, h)
	if err == nil {
		return nil
	}
	m.log.Warn("post-start hook failed", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "err", err)
	m.rec.Event(pod, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed")
	deadline := time.Now().Add(time.Duration(podGrace(pod, status, nil)) * time.Second)
	if kerr := m.stopContainer(ctx, pod, status, cs, deadline, "FailedPostStartHook", nil); kerr != nil {
		m.log.Error("killing container after its post-start hook failed", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "err", kerr)
	}
	st.markWaiting(c.Name, reasonPostStartHookError, err.Error())
	return fmt.Errorf("post-start hook of container %s: %w", c.Name, err)
}
