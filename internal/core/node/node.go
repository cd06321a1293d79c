// Package node builds the node-level managers — the eviction manager, image
// GC, container GC, the admission chain with critical-pod preemption, and,
// when asked for, the device manager and the prober — from a resolved
// KubeletConfiguration and the collaborators that differ between a real node
// and a simulated one, and lists their loops (Loops) for the caller to run.
// `nodekeeper simulate` builds it with a scripted node on a virtual clock;
// `nodekeeper run`'s plan (internal/daemon) builds it over the agent's pod
// table and runs its loops among the agent's parts. Nothing else wires the
// managers together.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/containergc"
	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/prober"
)

// Runtime is the part of CRI the node-level managers use: images for image GC,
// containers and sandboxes for container GC. internal/machine/cri's Client satisfies it.
type Runtime interface {
	imagegc.ImageService
	imagegc.ImageFs
	containergc.Runtime
}

// Pods is what the managers need to know of the node's pods. The agent's pod
// table implements it; every method may be called from any goroutine.
type Pods interface {
	// ActivePods returns the pods admitted and not yet terminated: the
	// candidates for eviction and preemption, and the pods admission counts.
	ActivePods() []*v1.Pod
	// IsPodDeleted and IsPodTerminated tell container GC which dead
	// containers' pods are gone (containergc.PodState).
	containergc.PodState
}

// Collaborators are the outside things the managers use.
type Collaborators struct {
	// NodeName names the Node object node-level events are about.
	NodeName string
	// Capacity returns the node's capacity (cpu, memory, ephemeral-storage,
	// hugepages, pods); admission derives allocatable from it, with the device
	// manager's resources added, and the configuration's reservations.
	// Required.
	Capacity func() (v1.ResourceList, error)
	// NodeObject, when set, returns the Node object for the node-affinity,
	// node-name and taint checks of admission; nil skips them.
	NodeObject func() *v1.Node
	// Stats is the eviction manager's stats source. Required.
	Stats eviction.StatsSource
	// Runtime is the CRI runtime. Required.
	Runtime Runtime
	// Pods is the pod table. Required.
	Pods Pods
	// PodCleanedUp, when set, reports whether an evicted pod's resources are
	// released; the eviction loop waits for it before its next pass.
	PodCleanedUp func(*v1.Pod) bool
	// Killer stops evicted and preempted pods. Required.
	Killer nodeapi.PodKiller
	// Recorder gets every manager's events. Nil discards them.
	Recorder nodeapi.Recorder
	// Start is when the managers start (image GC's maximum age counts from
	// it, and the node conditions Object first sees date from it); zero is
	// the time New is called. simulate passes its virtual start.
	Start time.Time
	// Statfs measures the image filesystem for image GC; nil is statfs(2).
	Statfs func(path string) (imagegc.FsStats, error)
	// ImageRecords, when set, keeps image GC's records across restarts.
	ImageRecords imagegc.RecordStore
	// PodStatus, when set, gives the prober the pods' current status; the
	// prober is built only with it.
	PodStatus prober.PodStatusGetter
	// Exec runs exec probes in containers (prober.NewExec over CRI); nil
	// refuses pods with exec probes.
	Exec prober.Runner
	// Logger receives the managers' logs; nil discards them.
	Logger *slog.Logger
	// Registerer, when set, gets every manager's metrics.
	Registerer prometheus.Registerer
}

// Options are the settings that are not KubeletConfiguration fields (the
// kubelet's command-line flags and runtime facts).
type Options struct {
	// SandboxImage is the pod sandbox (pause) image; image GC never removes it.
	SandboxImage string
	// ContainerGC is the container GC policy (the kubelet's
	// --minimum-container-ttl-duration, --maximum-dead-containers-per-container
	// and --maximum-dead-containers).
	ContainerGC containergc.Policy
	// LogDirs, when set, are cleaned by container GC.
	LogDirs containergc.LogDirs
	// Layout, when set, is the node's disk layout; nil detects it from the
	// first Summary.
	Layout *eviction.DiskLayout
	// DevicePlugins, when set, configures the device manager, which serves
	// the device-plugin API in DevicePlugins.Dir; nil builds none.
	DevicePlugins *devicemanager.Config
}

// Node holds the built managers. Its fields are set by New and never changed;
// each manager documents which of its methods may be called from where.
type Node struct {
	Eviction   *eviction.Manager
	Images     *imagegc.Manager
	Containers *containergc.Collector
	// Admission decides whether a pod may start; it kills nothing: a critical
	// pod's admission may come with a preemption plan for Preemption.
	Admission *admission.Chain
	// Preemption carries out admission's preemption plans through the Killer.
	Preemption *preemption.Executor
	// Devices is the device manager, nil unless Options.DevicePlugins is set.
	// Its allocatable device resources are part of admission's allocatable.
	Devices *devicemanager.Manager
	// Probes is the prober, nil unless Collaborators.PodStatus is set.
	Probes *prober.Manager

	cfg         *config.Config
	capacity    func() (v1.ResourceList, error)
	transitions transitions // of the node conditions Object reports
}

// Loop is one of the managers' periodic loops.
type Loop struct {
	Name string
	// Run runs the loop on real time until ctx ends.
	Run func(ctx context.Context) error
	// Step, when set, is the loop's pass (docs/architecture.md, One time
	// model): Run calls it on real time; nodekeeper simulate calls it instead
	// of Run, on virtual time. Nil for the loops simulate does not drive.
	Step func(ctx context.Context, now time.Time) time.Time
}

// New builds the managers from cfg, opts and c. It starts nothing.
func New(cfg *config.Config, opts Options, c Collaborators) (*Node, error) {
	if cfg == nil || c.Capacity == nil || c.Stats == nil || c.Runtime == nil || c.Pods == nil || c.Killer == nil {
		return nil, errors.New("node: configuration, Capacity, Stats, Runtime, Pods and Killer are required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	images, err := imagegc.New(imagegc.Config{
		Policy:       imagegc.PolicyFromKubelet(&cfg.Kubelet),
		SandboxImage: opts.SandboxImage,
		Start:        c.Start,
	}, imagegc.Deps{
		Images: c.Runtime, ImageFs: c.Runtime, InUse: imagegc.ContainerImages(c.Runtime), Statfs: c.Statfs,
		Recorder: c.Recorder, NodeName: c.NodeName, Registerer: c.Registerer, Logger: c.Logger,
		Store: c.ImageRecords,
	})
	if err != nil {
		return nil, fmt.Errorf("node: image GC: %w", err)
	}
	containers, err := containergc.New(opts.ContainerGC, 0, containergc.Deps{
		Runtime: c.Runtime, Pods: c.Pods, Recorder: c.Recorder, NodeName: c.NodeName,
		LogDirs: opts.LogDirs, Logger: c.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("node: container GC: %w", err)
	}
	evCfg := cfg.Eviction
	if opts.Layout != nil {
		evCfg.Layout = opts.Layout
	}
	ev, err := eviction.New(evCfg, eviction.Deps{
		Stats: c.Stats, Killer: c.Killer, ActivePods: c.Pods.ActivePods, PodCleanedUp: c.PodCleanedUp,
		ContainerGC: containers, ImageGC: images, Recorder: c.Recorder, NodeName: c.NodeName,
		Logger: c.Logger, Registerer: c.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("node: eviction: %w", err)
	}
	n := &Node{Eviction: ev, Images: images, Containers: containers, cfg: cfg, capacity: c.Capacity}
	n.transitions.start = c.Start
	if n.transitions.start.IsZero() {
		n.transitions.start = time.Now()
	}
	if opts.DevicePlugins != nil {
		n.Devices, err = devicemanager.New(*opts.DevicePlugins, devicemanager.Deps{
			Logger: c.Logger, ActivePods: c.Pods.ActivePods, Registerer: c.Registerer,
			RuntimeDevices: devicemanager.RuntimeDevices(c.Runtime), Recorder: c.Recorder, NodeName: c.NodeName,
		})
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if c.PodStatus != nil {
		n.Probes, err = prober.New(prober.Config{}, prober.Deps{
			Status: c.PodStatus, Exec: c.Exec, Logger: c.Logger, Recorder: c.Recorder,
			Registerer: c.Registerer,
		})
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	deps := admission.Deps{
		ActivePods: c.Pods.ActivePods,
		Conditions: ev,
		Node:       n.allocatable(cfg, c.Capacity, c.NodeObject),
		Preemption: true,
		// The kubelet checks the host's AppArmor the same way.
		AppArmorEnabled:      admission.HostAppArmorEnabled("/sys"),
		AllowedUnsafeSysctls: cfg.Agent.AllowedUnsafeSysctls,
	}
	if n.Devices != nil {
		deps.Devices = n.Devices
		deps.Allocator = n.Devices
	}
	if n.Admission, err = admission.New(deps); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.Preemption, err = preemption.NewExecutor(preemption.ExecutorDeps{
		Killer: c.Killer, Recorder: c.Recorder, Logger: c.Logger, Registerer: c.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return n, nil
}

// allocatable returns admission's view of the node: allocatable as the kubelet
// computes it from capacity (with the device plugins' resources, healthy and
// unhealthy devices) and the configuration's reservations, with pods
// defaulting to maxPods when capacity does not say, and the device plugins'
// healthy devices as the device resources' allocatable.
func (n *Node) allocatable(cfg *config.Config, capacity func() (v1.ResourceList, error), object func() *v1.Node) func() (admission.Node, error) {
	return func() (admission.Node, error) {
		c, err := capacity()
		if err != nil {
			return admission.Node{}, err
		}
		var healthy v1.ResourceList
		if n.Devices != nil {
			var devices v1.ResourceList
			devices, healthy, _ = n.Devices.Capacity()
			c = maps.Clone(c)
			if c == nil {
				c = v1.ResourceList{}
			}
			maps.Copy(c, devices)
		}
		alloc := admission.NodeAllocatable(c, cfg.KubeReserved, cfg.SystemReserved, cfg.Eviction.Thresholds)
		if _, ok := alloc[v1.ResourcePods]; !ok {
			alloc[v1.ResourcePods] = *resource.NewQuantity(int64(cfg.MaxPods), resource.DecimalSI)
		}
		maps.Copy(alloc, healthy)
		n := admission.Node{Allocatable: alloc}
		if object != nil {
			n.Object = object()
		}
		return n, nil
	}
}

// Loops returns the managers' loops in a fixed order: eviction, container GC,
// image GC (each with its Step), then the device manager and the prober when
// they were built.
func (n *Node) Loops() []Loop {
	loops := []Loop{
		{Name: "eviction", Run: n.Eviction.Run, Step: n.Eviction.Step},
		{Name: "containergc", Run: n.Containers.Run, Step: n.Containers.Step},
		{Name: "imagegc", Run: n.Images.Run, Step: n.Images.Step},
	}
	if n.Devices != nil {
		loops = append(loops, Loop{Name: "devicemanager", Run: n.Devices.Run})
	}
	if n.Probes != nil {
		loops = append(loops, Loop{Name: "prober", Run: n.Probes.Run})
	}
	return loops
}
