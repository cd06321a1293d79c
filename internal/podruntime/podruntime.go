// Package podruntime runs one pod through CRI: it turns a v1.Pod into a pod
// sandbox and containers, restarts them by the pod's restartPolicy with the
// kubelet's back-off, stops them with the grace period, and derives the pod's
// v1.PodStatus from what the runtime reports. It keeps no pod table: the agent's
// sync loop decides which pods should run and calls it from per-pod workers.
//
// CONTRACT (issue 13): the exported names below are shared with internal/agent.
// Their signatures are fixed; the bodies are filled in by the podruntime work.
package podruntime

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodStatus is what the runtime holds of one pod, as read by one relist: its
// sandboxes (newest first) and containers (newest first per name). A pod's
// identity is the io.kubernetes.pod.uid label on its CRI objects.
type PodStatus struct {
	UID       types.UID
	Name      string
	Namespace string
	// Sandboxes are the pod's sandboxes, newest first.
	Sandboxes []*runtimeapi.PodSandboxStatus
	// Containers are the pod's containers, newest first (by creation time).
	Containers []*runtimeapi.ContainerStatus
	// IPs are the newest ready sandbox's IPs, primary first.
	IPs []string
}

// Result is the outcome of one SyncPod.
type Result struct {
	// Err is the first error that stopped the sync, nil if the pod is as its
	// spec asks for now (which includes waiting out a back-off).
	Err error
	// RetryAfter, when > 0, asks the caller to sync the pod again after this
	// long (a back-off ending, a container still starting).
	RetryAfter time.Duration
}

// ErrNotImplemented marks the contract skeleton's bodies; it goes with them.
var ErrNotImplemented = errors.New("podruntime: not implemented")

// Manager runs pods through CRI. All methods may be called from any goroutine;
// calls for one pod are serialised by the caller (one worker per pod).
type Manager struct{}

// Statuses lists every pod the runtime holds (one ListPodSandbox and one
// ListContainers, then the statuses), keyed by pod UID. Pods from earlier runs
// of the agent are included: that is how the agent adopts them.
func (m *Manager) Statuses(ctx context.Context) (map[types.UID]*PodStatus, error) {
	return nil, ErrNotImplemented
}

// SyncPod makes the runtime run pod as its spec asks, given its current
// runtime status (nil: nothing exists yet): sandbox, init containers in order,
// containers, restarts by restartPolicy with back-off. It never kills the
// whole pod; that is KillPod.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, status *PodStatus) Result {
	return Result{Err: ErrNotImplemented}
}

// KillPod stops every container of the pod (pre-stop hooks first) and its
// sandbox, within gracePeriod (nil: the pod's terminationGracePeriodSeconds).
// pod may be nil for a pod known only from the runtime (an orphan).
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, status *PodStatus, gracePeriod *int64) error {
	return ErrNotImplemented
}

// RemovePod removes the stopped pod's containers, sandboxes, volumes and
// cgroup.
func (m *Manager) RemovePod(ctx context.Context, status *PodStatus) error {
	return ErrNotImplemented
}

// PodStatus derives the pod's API status from its runtime status (nil: none
// yet) and what the last SyncPod saw (waiting reasons such as
// ContainerCreating, CrashLoopBackOff, ErrImagePull), at now.
func (m *Manager) PodStatus(pod *v1.Pod, status *PodStatus, now time.Time) v1.PodStatus {
	return v1.PodStatus{}
}
