package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
)

// machine is the first phase. Before anything is touched: the settings, the
// host (the kubelet refuses cgroup v1 (failCgroupV1), swap (failSwapOn) and
// LimitedSwap on v1 at start), the ports whose listeners the agent cannot
// run without (a taken one ends run here, exit 1), a configured runtime's
// cgroup driver and the kubeconfig's clients. Then the root directory, the agent's oom_score_adj,
// pod cgroups, and the runtime: the managed containerd's parts, or the
// configured endpoint's client.
func (r *root) machine(ctx context.Context, p *plan) error {
	if err := r.ac.RunnableErr(r.o.Config.File); err != nil {
		return ConfigError{err}
	}
	host, layout, err := readHost("", defaultSwapsFile)
	if err != nil {
		return ConfigError{fmt.Errorf("cgroups: %w", err)}
	}
	if err := r.ac.HostErr(r.file, host); err != nil {
		return ConfigError{err}
	}
	r.layout = layout
	if err := checkListeners(r.file, r.fatalListeners()); err != nil {
		return err
	}
	if err := r.configuredRuntime(ctx); err != nil {
		return err
	}
	if err := r.clients(ctx); err != nil {
		return err
	}
	if err := r.rootDir(); err != nil {
		return err
	}
	r.setOOMScoreAdj()
	if err := r.podCgroups(); err != nil {
		return err
	}
	return r.managedRuntime(p)
}

// configuredRuntime asks a runtime of the configuration's for its cgroup
// driver before anything is touched, as the kubelet asks at start: unset,
// cgroupDriver becomes the runtime's; set to another, run refuses to start.
// The managed containerd is asked once it runs (managedRuntime).
func (r *root) configuredRuntime(ctx context.Context) error {
	if r.ac.RuntimeEndpoint == "" {
		return nil
	}
	rt, err := cri.New(r.ac.RuntimeEndpoint, cri.Options{Timeout: r.ac.RuntimeRequestTimeout})
	if err != nil {
		return ConfigError{fmt.Errorf("containerRuntimeEndpoint %q: %w", r.ac.RuntimeEndpoint, err)}
	}
	r.rt, r.endpoint = rt, r.ac.RuntimeEndpoint
	r.closers = append(r.closers, func() { _ = rt.Close() })
	driver, err := cgroupDriver(ctx, rt, driverRetryWait, r.file, r.endpoint, r.ac, r.log)
	if err != nil {
		return err
	}
	if driver != r.ac.CgroupDriver {
		r.ac.CgroupDriver = driver
		if err := r.ac.RunnableErr(r.file); err != nil {
			return ConfigError{fmt.Errorf("the container runtime at %s uses the %s cgroup driver: %w", r.endpoint, driver, err)}
		}
	}
	return nil
}

// clients builds, in a cluster, the API client and the heartbeat client of
// the Node's status and Lease, whose requests time out.
func (r *root) clients(ctx context.Context) error {
	if r.o.Kubeconfig == "" {
		return nil
	}
	rc, err := kubeclient.LoadKubeconfig(ctx, r.o.Kubeconfig, r.o.MaxInputSize)
	if err != nil {
		return ConfigError{fmt.Errorf("--kubeconfig: %w", err)}
	}
	c := r.o.Config.Cluster
	if r.client, err = newClient(rc, c, r.o.Version, 0); err != nil {
		return ConfigError{err}
	}
	if r.heartbeat, err = newClient(rc, c, r.o.Version, c.NodeStatusUpdateFrequency); err != nil {
		return ConfigError{err}
	}
	return nil
}

// rootDir makes and locks the root directory and its data directories.
func (r *root) rootDir() error {
	if err := os.MkdirAll(r.o.RootDir, podruntime.DataDirMode); err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	unlock, err := lockRoot(r.o.RootDir)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, unlock)
	if err := setUpDataDirs(r.o.RootDir); err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	return nil
}

// setOOMScoreAdj sets the agent's own oom_score_adj, before it starts
// containerd (which inherits it): where lowering is refused, containers'
// negative scores are clamped to it (containerd's restrict_oom_score_adj).
func (r *root) setOOMScoreAdj() {
	want := DefaultOOMScoreAdj
	if r.o.OOMScoreAdj != nil {
		want = *r.o.OOMScoreAdj
	}
	if got, err := setOOMScoreAdj(selfOOMScoreAdj, want); err != nil {
		r.log.Warn("cannot set the agent's oom_score_adj", "want", want, "have", got, "err", err)
	} else {
		r.log.Info("agent oom_score_adj set", "oomScoreAdj", got)
	}
}

// podCgroups sets up the kubepods tree (its limits from capacity less the
// reservations when enforceNodeAllocatable has pods) and the containers'
// swap.
func (r *root) podCgroups() error {
	memory, err := stats.MemoryCapacity("")
	if err != nil {
		return err
	}
	r.memory = memory
	r.cgc = cgroups.Config{
		CgroupRoot: r.ac.CgroupRoot, Driver: r.ac.CgroupDriver, PodPidsLimit: *r.o.Config.Kubelet.PodPidsLimit, Logger: r.log,
	}
	if slices.Contains(r.o.Config.Kubelet.EnforceNodeAllocatable, "pods") {
		c, err := capacity(r.o.RootDir, memory)
		if err != nil {
			return err
		}
		r.cgc.KubepodsLimits = kubepodsLimits(c, r.o.Config.KubeReserved, r.o.Config.SystemReserved)
	}
	if r.cg, err = cgroups.New(r.cgc); err != nil {
		return ConfigError{fmt.Errorf("%s: %w", r.file, err)} // cgroupRoot and what the machine has
	}
	if err := r.cg.EnsureQoS(); err != nil {
		return fmt.Errorf("pod cgroups: %w", err)
	}
	swapCapacity, err := stats.SwapCapacity("")
	if err != nil {
		return err
	}
	r.swap = swapSettings(r.layout, r.ac.CgroupRoot, r.ac.SwapBehavior, swapCapacity)
	r.log.Info("container swap", "swapBehavior", r.ac.SwapBehavior, "swapController", r.swap.Controller, "swapCapacity", swapCapacity)
	return nil
}

// managedRuntime adds, without a configured endpoint, the managed
// containerd (which outlives the agent: a restarted agent adopts it, in a
// session and a cgroup of its own) and the runtime's start checks.
func (r *root) managedRuntime(p *plan) error {
	if r.rt != nil {
		return nil
	}
	rtCgroup := RuntimeCgroup(r.ac.CgroupRoot, r.o.RootDir)
	m, err := containerd.New(containerd.Config{
		StateDir: containerdDir(r.o.RootDir), SandboxImage: ocibuild.PauseRef,
		PodCIDR: r.ac.PodCIDR, CNIBridge: BridgeName(r.o.RootDir), Logger: r.log.With("subsystem", "containerd"),
		Place:         func(pid int) error { return r.cg.Place(rtCgroup, pid) },
		SystemdCgroup: r.ac.CgroupDriver == "systemd",
	})
	if err != nil {
		return ConfigError{err}
	}
	r.managed, r.endpoint = m, m.Endpoint()
	rt, err := cri.New(r.endpoint, cri.Options{Timeout: r.ac.RuntimeRequestTimeout})
	if err != nil {
		return fmt.Errorf("managed containerd endpoint %q: %w", r.endpoint, err)
	}
	r.rt = rt
	r.closers = append(r.closers, func() { _ = rt.Close() })
	checked := make(chan struct{})
	p.add(part{Name: "containerd", Run: m.Run, Ready: m.Ready()},
		part{Name: "runtime-checks", Ready: checked, Run: func(ctx context.Context) error {
			return r.checkManaged(ctx, m, checked)
		}})
	return nil
}

// podRuntime is the runtime the pods' syncs use: the CRI client, whose
// pulls of an image imported from an image directory import it again from
// its file with the managed containerd (importAgain).
func (r *root) podRuntime() podruntime.Runtime {
	if r.managed == nil {
		return r.rt
	}
	return importAgain{Runtime: r.rt, m: r.managed}
}

// importAgain pulls the images the managed containerd imported from the
// image directories from their files (containerd.Managed.ImportAgain),
// whatever the pull policy, and the others from their registries: an image
// image GC removed comes back when a pod needs it, as the kubelet pulls it
// again, and a pod whose pull policy is Always gets the file as it is now.
type importAgain struct {
	podruntime.Runtime
	m *containerd.Managed
}

func (p importAgain) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	if id, ok, err := p.m.ImportAgain(ctx, image.GetImage()); ok {
		return id, err
	}
	return p.Runtime.PullImage(ctx, image, auth, sandbox)
}

// checkManaged imports the images (RootDir/images and ImageDirs) into the
// running managed containerd and checks its cgroup driver: configured from
// cgroupDriver, where it reports its driver the two must agree. It closes
// checked when done and returns: nil, unless the drivers disagree.
func (r *root) checkManaged(ctx context.Context, m *containerd.Managed, checked chan<- struct{}) error {
	dirs := append([]string{filepath.Join(r.o.RootDir, "images")}, r.o.ImageDirs...)
	imported, err := m.ImportDir(ctx, dirs...)
	for _, im := range imported {
		r.log.Info("image imported", "image", im.Ref, "file", im.File)
	}
	if err != nil {
		r.log.Error("image import", "err", err) // the others are imported; pods needing it fail to pull
	}
	own := r.ac
	own.CgroupDriverSet = true
	if _, err := cgroupDriver(ctx, r.rt, driverRetryWait, r.file, r.endpoint, own, r.log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	close(checked)
	return nil
}
