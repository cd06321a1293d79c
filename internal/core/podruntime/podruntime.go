// Package podruntime runs one pod through CRI: it turns a v1.Pod into a pod
// sandbox and containers, restarts them by the pod's restartPolicy with the
// kubelet's back-off, stops them with the grace period, and lists what the
// runtime holds of each pod (Statuses), from which internal/core/podstatus
// derives the pod's v1.PodStatus. It keeps no pod table and no pod's state:
// the agent's sync loop decides which pods should run, calls it from per-pod
// workers and keeps what a sync learnt (its Result's State) for the next.
//
// CONTRACT (issue 13): the exported names below are shared with internal/core/agent.
// Their signatures are fixed; the bodies are filled in by the podruntime work.
package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/plan"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// PodStatus is what the runtime holds of one pod, as read by one relist
// (Statuses): podstatus.Runtime, which the pod's API status is derived from.
type PodStatus = podstatus.Runtime

// Swap is how the node's containers may use swap (Config.Swap), which
// criconfig applies to each container's resources.
type Swap = criconfig.Swap

// Backoff is one crash-loop or image pull back-off in a SyncState; the
// plan (internal/core/podruntime/plan) decides with it.
type Backoff = plan.Backoff

// Result is the outcome of one SyncPod.
type Result struct {
	// Err is the first error that stopped the sync, nil if the pod is as its
	// spec asks for now (which includes waiting out a back-off).
	Err error
	// RetryAfter, when > 0, asks the caller to sync the pod again after this
	// long (a back-off ending, a container still starting).
	RetryAfter time.Duration
	// State is what this sync learnt of the pod, for its next SyncPod and
	// its status: the caller keeps it and passes it to the next SyncPod.
	State SyncState
	// Started are the IDs of the sandbox this sync ran and of the
	// containers it started (running when it returned), Removed those of
	// the exited containers it removed: the changes the next relist shows
	// because of this sync, which need no sync of their own.
	Started, Removed []string
	// More: the sync stopped in the pod's init phase after starting a
	// sidecar, so the pod is not yet as its spec asks even once the
	// relist shows what the sync started: the next init container or the
	// regular containers start in the sync after that (the kubelet's
	// relist event of the sidecar's start).
	More bool
}

// SyncState is what SyncPod remembers of one pod from one sync to the next,
// as data: the waiting state of the containers it could not start (or is
// still starting), their crash-loop back-offs and the pod's image pull
// back-offs. The caller owns it (the agent's pod table keeps one per pod, on
// its loop goroutine); SyncPod reads the one it is given and returns a new
// one in its Result, never changing the maps of the one it was given. The
// zero value is a pod's first state.
type SyncState struct {
	// Waiting is the waiting state per container name that the sync left
	// (ContainerCreating, CrashLoopBackOff, ErrImagePull,
	// CreateContainerConfigError, ...); a container it started is absent.
	Waiting map[string]v1.ContainerStateWaiting
	// Crash is the crash-loop back-off per container name.
	Crash map[string]Backoff
	// Pull is the image pull back-off per image.
	Pull map[string]Backoff
}

// clone is s with maps of its own (never nil), which a sync may change.
func (s SyncState) clone() SyncState {
	out := SyncState{
		Waiting: make(map[string]v1.ContainerStateWaiting, len(s.Waiting)),
		Crash:   make(map[string]Backoff, len(s.Crash)),
		Pull:    make(map[string]Backoff, len(s.Pull)),
	}
	maps.Copy(out.Waiting, s.Waiting)
	maps.Copy(out.Crash, s.Crash)
	maps.Copy(out.Pull, s.Pull)
	return out
}

// ErrImageNeverPull is the error (and waiting reason) of a container whose
// image is absent while its imagePullPolicy is Never.
var ErrImageNeverPull = errors.New("ErrImageNeverPull")

// Runtime is the part of CRI the pod runtime uses; *cri.Client implements it,
// and so does cri-api's fake runtime and image service pair.
type Runtime interface {
	Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error)
	RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error)
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
	PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, containerID string) error
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error)
}

var _ Runtime = (*cri.Client)(nil)

// Cgroups makes and removes the pod-level cgroups.
type Cgroups interface {
	// EnsurePod makes the pod's cgroup and returns it as the sandbox's
	// cgroup_parent.
	EnsurePod(pod *v1.Pod) (cgroupParent string, err error)
	// RemovePod removes the pod's cgroup.
	RemovePod(uid types.UID) error
}

// Config is what the pod runtime needs to know of the node.
type Config struct {
	// NodeName is spec.nodeName for the downward API.
	NodeName string
	// PodsDir is <rootDir>/pods: volumes and termination-log files live
	// under PodsDir/<uid>. A sync makes PodsDir, PodsDir/<uid> and its
	// volumes directory 0750 (and takes other users' permissions away from
	// ones that have them), as the kubelet's.
	PodsDir string
	// PodLogsDir holds the pod log directories NS_NAME_UID (/var/log/pods);
	// made 0750 when missing, as the kubelet's.
	PodLogsDir string
	// ContainerLogsDir, if set, holds the kubelet's legacy symlinks to the
	// containers' logs, POD_NAMESPACE_CONTAINER-ID.log
	// (/var/log/containers): made when a container starts, removed with it.
	ContainerLogsDir string
	// HostIP is status.hostIP, and the pod IP of host-network pods.
	HostIP string
	// MemoryCapacity is the node's memory in bytes (oom_score_adj, and the
	// memory limit the downward API reports for a container without one).
	MemoryCapacity int64
	// CPUs is the node's cpu count for a container without a cpu limit in the
	// downward API; 0 means runtime.NumCPU().
	CPUs int
	// Swap is the containers' swap setting (memorySwap.swapBehavior on this
	// node); the zero value sets none.
	Swap Swap
	// OOMGroup asks the runtime for memory.oom.group=1 on each container's
	// cgroup (CRI unified resources): an OOM kill ends every process of the
	// container, not one. The kubelet's default on cgroup v2, off with
	// singleProcessOOMKill; false on cgroup v1, which has no such file.
	OOMGroup bool
	// DNS is the host's resolv.conf ("" = /etc/resolv.conf).
	DNS string
	// HostsFile is the host's hosts file ("" = /etc/hosts), which containers
	// of host-network pods see.
	HostsFile string
	// ClusterDomain is the kubelet's clusterDomain ("" by default): a pod
	// with spec.subdomain has the FQDN
	// <hostname>.<subdomain>.<namespace>.svc.<ClusterDomain> in its hosts
	// file, and as its hostname with spec.setHostnameAsFQDN.
	ClusterDomain string
	// VolumesOnDisk keeps secret, projected and downwardAPI volumes on disk
	// rather than on a tmpfs of their own (for a node that may not mount).
	VolumesOnDisk bool
	// CrashLoop is the crash-loop back-off of the node's containers
	// (plan.CrashLoopPolicy of the configuration); the zero value is the
	// kubelet's default, 10s doubling to 5m, reset after a 10m run.
	CrashLoop plan.Policy
	// MaxParallelImagePulls is how many image pulls may run at once, all
	// pods together: 1 serializes them (the kubelet's default,
	// serializeImagePulls), n > 1 is maxParallelImagePulls, 0 sets no
	// bound. A pull waiting for its turn has had its Pulling event; the
	// Pulled event tells the pull's own time from the time with the wait.
	MaxParallelImagePulls int
}

// Deps are the pod runtime's collaborators.
type Deps struct {
	Runtime Runtime
	// Cgroups may be nil: no pod cgroups, cgroup_parent "".
	Cgroups Cgroups
	// Logger may be nil: slog.Default().
	Logger *slog.Logger
	// Recorder may be nil: events go to the log.
	Recorder nodeapi.Recorder
	// Probes, if set, is the prober (*prober.Manager): it sets the started
	// and ready fields of running containers (StatusNode hands it to the
	// status derivation), and SyncPod restarts the containers whose
	// liveness or startup probe failed.
	Probes Probes
	// Devices, if set, gives containers their assigned devices.
	Devices Devices
	// KubeAPI, if set, is the API server the configMap, secret and
	// projected volumes, the ConfigMap and Secret env sources and the
	// service variables read (kubeclient.PodObjects over the node's
	// clientset); nil on a node without one, where they fail the pod.
	KubeAPI volumes.API
}

// Manager runs pods through CRI. All methods may be called from any goroutine;
// calls for one pod are serialised by the caller (one operation of a pod at a
// time). It keeps no pod's state from one call to the next: what a sync
// learnt comes back in its Result's State, which the caller passes to the
// pod's next SyncPod. The runtime statuses in a PodStatus are shared between
// relists: read them, do not change them.
type Manager struct {
	cfg     Config
	rt      Runtime
	cgroups Cgroups
	log     *slog.Logger
	rec     nodeapi.Recorder
	probes  Probes
	devices Devices
	vols    *volumes.Manager
	// hookClient makes lifecycle hooks' HTTP GETs (see newHookClient).
	hookClient *http.Client
	// pulls bounds the image pulls running at once (MaxParallelImagePulls).
	pulls *pullGate

	mu sync.Mutex // guards the fields below
	// runtimeName is the runtime's name from Version ("containerd"), once known.
	runtimeName string
	// rro: the runtime's default handler supports recursive read-only
	// mounts (learnt with runtimeName).
	rro bool
	// ctrCache and sbCache hold the last status read of each listed
	// container and sandbox (see containerStatus).
	ctrCache map[string]*runtimeapi.ContainerStatus
	sbCache  map[string]*runtimeapi.PodSandboxStatus
	// killedSeen holds when a relist first saw each container exited by
	// SIGKILL without the OOMKilled reason: read again at each relist for
	// oomReasonWait (see containerStatus).
	killedSeen map[string]time.Time
	// last is the previous Statuses' result: what a pod the runtime cannot
	// be asked about shows meanwhile.
	last map[types.UID]*PodStatus
}

// New returns a Manager. It checks cfg and deps; it makes no runtime call.
func New(cfg Config, deps Deps) (*Manager, error) {
	if deps.Runtime == nil {
		return nil, errors.New("podruntime: Deps.Runtime is nil")
	}
	if cfg.MemoryCapacity <= 0 {
		return nil, fmt.Errorf("podruntime: Config.MemoryCapacity %d is not positive", cfg.MemoryCapacity)
	}
	for field, dir := range map[string]string{"PodsDir": cfg.PodsDir, "PodLogsDir": cfg.PodLogsDir, "ContainerLogsDir": cfg.ContainerLogsDir} {
		if !filepath.IsAbs(dir) && (field != "ContainerLogsDir" || dir != "") {
			return nil, fmt.Errorf("podruntime: Config.%s %q is not an absolute path", field, dir)
		}
	}
	if cfg.MaxParallelImagePulls < 0 {
		return nil, fmt.Errorf("podruntime: Config.MaxParallelImagePulls %d is negative", cfg.MaxParallelImagePulls)
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = runtime.NumCPU()
	}
	if cfg.DNS == "" {
		cfg.DNS = "/etc/resolv.conf"
	}
	if cfg.HostsFile == "" {
		cfg.HostsFile = "/etc/hosts"
	}
	m := &Manager{
		cfg: cfg, rt: deps.Runtime, cgroups: deps.Cgroups, log: deps.Logger,
		rec: deps.Recorder, probes: deps.Probes, devices: deps.Devices,
		ctrCache:   map[string]*runtimeapi.ContainerStatus{},
		killedSeen: map[string]time.Time{},
		sbCache:    map[string]*runtimeapi.PodSandboxStatus{},
		hookClient: newHookClient(),
		pulls:      newPullGate(cfg.MaxParallelImagePulls),
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.log = m.log.With("subsystem", "podruntime")
	if m.rec == nil {
		m.rec = nodeapi.LogRecorder{Logger: m.log}
	}
	vols, err := volumes.New(volumes.Config{PodsDir: cfg.PodsDir, MemoryCapacity: cfg.MemoryCapacity, OnDisk: cfg.VolumesOnDisk},
		volumes.Deps{API: deps.KubeAPI, Logger: deps.Logger})
	if err != nil {
		return nil, fmt.Errorf("podruntime: %w", err)
	}
	m.vols = vols
	return m, nil
}
