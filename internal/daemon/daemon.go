// Package daemon is `nodekeeper run`: it builds the agent from the
// configuration and the machine — the container runtime (a containerd it
// manages, or a configured CRI endpoint), pod cgroups, the stats provider, the
// pod runtime, the static pod source, the sync loop, the node-level managers
// and the HTTP endpoints — and runs them until its context ends. Pods keep
// running when it stops; the next start adopts them.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/containergc"
	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/base/config"
	"github.com/nodekeeper/nodekeeper/internal/cluster/apipods"
	"github.com/nodekeeper/nodekeeper/internal/cluster/events"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubenode"
	"github.com/nodekeeper/nodekeeper/internal/core/agent"
	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/core/podsource"
	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/machine/pressure"
	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
	"github.com/nodekeeper/nodekeeper/internal/servers/podresources"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/prober"
)

// DefaultRootDir is nodekeeper's state directory (the kubelet's --root-dir is
// /var/lib/kubelet).
const DefaultRootDir = "/var/lib/nodekeeper"

// Options are `nodekeeper run`'s settings besides the configuration file: the
// kubelet's command-line flags and nodekeeper's own.
type Options struct {
	// Config is the resolved KubeletConfiguration (config.Default() without a file).
	Config *config.Config
	// RootDir is the state directory; DefaultRootDir when empty.
	RootDir string
	// NodeName is the node's name (--hostname-override; the host name by default).
	NodeName string
	// ImageDirs are imported besides RootDir/images at start (managed containerd only).
	ImageDirs []string
	// Logger gets the agent's logs.
	Logger *slog.Logger
	// OnReady, when set, is called once with the endpoints when everything is up.
	OnReady func(Ready)
	// OOMScoreAdj is the agent's own oom_score_adj (the kubelet's
	// --oom-score-adj), set at start where the kernel allows it; nil is
	// DefaultOOMScoreAdj.
	OOMScoreAdj *int
	// Kubeconfig, when set, joins the node to that API server's cluster (the
	// kubelet's --kubeconfig); empty runs standalone.
	Kubeconfig string
	// MaxInputSize is the largest kubeconfig, or file it names, read in
	// bytes (kubeclient.LoadKubeconfig); 0 is decode.DefaultMaxConfigSize.
	MaxInputSize int64
	// NodeIP is the node's IP (the kubelet's --node-ip); empty picks the
	// first up non-loopback IPv4.
	NodeIP string
	// Version is nodekeeper's version, reported in the Node's nodeInfo.
	Version string
}

// Ready describes a started agent.
type Ready struct {
	// Addr is the read-only port's address, "" when it is off.
	Addr string
	// Socket is the root-only unix socket's path (ROOT/nodekeeper.sock).
	Socket string
	// Endpoint is the CRI endpoint in use.
	Endpoint string
	// Pods lists the agent's pods with their status.
	Pods func() []*v1.Pod
}

// ConfigError is an error in the settings (configuration file or flags): the
// command reports it as a usage error.
type ConfigError struct{ Err error }

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }

// imageRecordsFile, under the root directory, keeps image GC's records.
const imageRecordsFile = "imagegc-records.json"

// sourceFile is the static pod source's name in the agent.
const sourceFile = "file"

// Run runs the agent until ctx ends or a part of it fails, then stops every
// part and returns: nil after ctx ended, else the first error. Pods are left
// running.
func Run(ctx context.Context, o Options) error {
	if o.Config == nil {
		o.Config = config.Default()
	}
	if o.RootDir == "" {
		o.RootDir = DefaultRootDir
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ac := o.Config.Agent
	log := o.Logger
	err := ac.RunnableErr(o.Config.File)
	if err != nil {
		return ConfigError{err}
	}
	// The machine, before anything is touched: the kubelet refuses cgroup v1
	// (failCgroupV1), swap (failSwapOn) and LimitedSwap on v1 at start.
	host, layout, err := readHost("", defaultSwapsFile)
	if err != nil {
		return ConfigError{fmt.Errorf("cgroups: %w", err)}
	}
	file := o.Config.File
	if file == "" {
		file = "(defaults)"
	}
	if err := ac.HostErr(file, host); err != nil {
		return ConfigError{err}
	}
	// A runtime of the configuration's is asked for its cgroup driver before
	// anything is touched, as the kubelet asks at start: unset, cgroupDriver
	// becomes the runtime's; set to another, run refuses to start. The
	// managed containerd is asked once it runs, below.
	var rt *cri.Client
	if ac.RuntimeEndpoint != "" {
		if rt, err = cri.New(ac.RuntimeEndpoint, cri.Options{Timeout: ac.RuntimeRequestTimeout}); err != nil {
			return ConfigError{fmt.Errorf("containerRuntimeEndpoint %q: %w", ac.RuntimeEndpoint, err)}
		}
		defer rt.Close()
		driver, err := cgroupDriver(ctx, rt, driverRetryWait, file, ac.RuntimeEndpoint, ac, log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if driver != ac.CgroupDriver {
			ac.CgroupDriver = driver
			if err := ac.RunnableErr(file); err != nil {
				return ConfigError{fmt.Errorf("the container runtime at %s uses the %s cgroup driver: %w", ac.RuntimeEndpoint, driver, err)}
			}
		}
	}
	// In a cluster: the API client, and the heartbeat client of the Node's
	// status and Lease, whose requests time out.
	var client, heartbeat *kubeclient.Clientset // nil: standalone
	if o.Kubeconfig != "" {
		rc, err := kubeclient.LoadKubeconfig(ctx, o.Kubeconfig, o.MaxInputSize)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return ConfigError{fmt.Errorf("--kubeconfig: %w", err)}
		}
		if client, err = newClient(rc, o.Config.Cluster, o.Version, 0); err != nil {
			return ConfigError{err}
		}
		if heartbeat, err = newClient(rc, o.Config.Cluster, o.Version, o.Config.Cluster.NodeStatusUpdateFrequency); err != nil {
			return ConfigError{err}
		}
	}
	if err := os.MkdirAll(o.RootDir, podruntime.DataDirMode); err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	unlock, err := lockRoot(o.RootDir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := setUpDataDirs(o.RootDir); err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	// The agent's own oom_score_adj, before it starts containerd (which
	// inherits it): where lowering is refused, containers' negative scores
	// are clamped to it (containerd's restrict_oom_score_adj).
	oomScore := DefaultOOMScoreAdj
	if o.OOMScoreAdj != nil {
		oomScore = *o.OOMScoreAdj
	}
	if got, err := setOOMScoreAdj(selfOOMScoreAdj, oomScore); err != nil {
		log.Warn("cannot set the agent's oom_score_adj", "want", oomScore, "have", got, "err", err)
	} else {
		log.Info("agent oom_score_adj set", "oomScoreAdj", got)
	}
	memory, err := stats.MemoryCapacity("")
	if err != nil {
		return err
	}
	cgc := cgroups.Config{
		CgroupRoot: ac.CgroupRoot, Driver: ac.CgroupDriver, PodPidsLimit: *o.Config.Kubelet.PodPidsLimit, Logger: log,
	}
	if slices.Contains(o.Config.Kubelet.EnforceNodeAllocatable, "pods") {
		c, err := capacity(o.RootDir, memory)
		if err != nil {
			return err
		}
		cgc.KubepodsLimits = kubepodsLimits(c, o.Config.KubeReserved, o.Config.SystemReserved)
	}
	cg, err := cgroups.New(cgc)
	if err != nil {
		return ConfigError{fmt.Errorf("%s: %w", file, err)} // cgroupRoot and what the machine has
	}
	if err := cg.EnsureQoS(); err != nil {
		return fmt.Errorf("pod cgroups: %w", err)
	}
	swapCapacity, err := stats.SwapCapacity("")
	if err != nil {
		return err
	}
	swap := swapSettings(layout, ac.CgroupRoot, ac.SwapBehavior, swapCapacity)
	log.Info("container swap", "swapBehavior", ac.SwapBehavior, "swapController", swap.Controller, "swapCapacity", swapCapacity)

	// Every part runs in g; an early return stops the ones already started.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	defer func() { cancel(); _ = g.Wait() }()
	endpoint := ac.RuntimeEndpoint
	if endpoint == "" {
		// containerd outlives the agent (a restarted agent adopts it), in a
		// session and a cgroup of its own.
		rtCgroup := RuntimeCgroup(ac.CgroupRoot, o.RootDir)
		m, err := containerd.New(containerd.Config{
			StateDir: containerdDir(o.RootDir), SandboxImage: ocibuild.PauseRef,
			PodCIDR: ac.PodCIDR, CNIBridge: BridgeName(o.RootDir), Logger: log.With("subsystem", "containerd"),
			Place:         func(pid int) error { return cg.Place(rtCgroup, pid) },
			SystemdCgroup: ac.CgroupDriver == "systemd",
		})
		if err != nil {
			return ConfigError{err}
		}
		g.Go(func() error { return m.Run(ctx) })
		select {
		case <-m.Ready():
		case <-ctx.Done():
			return g.Wait()
		}
		dirs := append([]string{filepath.Join(o.RootDir, "images")}, o.ImageDirs...)
		imported, err := m.ImportDir(ctx, dirs...)
		for _, im := range imported {
			log.Info("image imported", "image", im.Ref, "file", im.File)
		}
		if err != nil {
			log.Error("image import", "err", err) // the others are imported; pods needing it fail to pull
		}
		endpoint = m.Endpoint()
	}
	if rt == nil {
		if rt, err = cri.New(endpoint, cri.Options{Timeout: ac.RuntimeRequestTimeout}); err != nil {
			return fmt.Errorf("managed containerd endpoint %q: %w", endpoint, err)
		}
		defer rt.Close()
		// The managed containerd is configured from cgroupDriver: where it
		// reports its driver, the two must agree, set or not.
		own := ac
		own.CgroupDriverSet = true
		if _, err := cgroupDriver(ctx, rt, driverRetryWait, file, endpoint, own, log); err != nil {
			if ctx.Err() != nil {
				return g.Wait()
			}
			return err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var recorder nodeapi.Recorder = nodeapi.LogRecorder{Logger: log.With("subsystem", "events")}
	if client != nil {
		var writer *events.Recorder
		recorder, writer = clusterRecorder(client, o.NodeName, o.Config.Cluster, recorder.(nodeapi.LogRecorder))
		// The writer outlives the other components, so that their last
		// events get out: it stops, and flushes, when Run returns.
		evCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
		evDone := make(chan error, 1)
		go func() { evDone <- writer.Run(evCtx) }()
		defer func() {
			stopEvents()
			if err := <-evDone; err != nil {
				log.Error("event writer", "err", err)
			}
		}()
	}
	warnCgroupV1(recorder, o.NodeName, layout.Version)
	hostIP := o.NodeIP
	switch {
	case hostIP == "" && client != nil:
		// The kubelet's choice: what the node name resolves to on this
		// host, else the default route's interface.
		ip, err := kubenode.HostIP(o.NodeName)
		if err != nil {
			return fmt.Errorf("node IP (set --node-ip): %w", err)
		}
		hostIP = ip.String()
	case hostIP == "":
		hostIP = hostIPv4()
	}
	var kubeAPI volumes.API // nil: standalone, no ConfigMap, Secret or token volumes
	if client != nil {
		// Pods sharing an object (every pod's kube-root-ca.crt) read it
		// once per TTL, not on each of their syncs.
		kubeAPI = volumes.NewCachedAPI(volumes.ClientAPI{Client: client}, 0, nil)
	}
	// The pod table first: the node-level managers read it and kill through
	// it; the sync loop, built after them, owns it.
	sources := []string{localpods.Source}
	if ac.StaticPodPath != "" {
		sources = append(sources, sourceFile)
	}
	if client != nil {
		sources = append(sources, apipods.Source)
	}
	table, err := agent.NewTable(sources)
	if err != nil {
		return err
	}
	st, err := stats.New(stats.Config{
		CgroupRoot: ac.CgroupRoot, CgroupDriver: ac.CgroupDriver, RootDir: o.RootDir, LogDir: ac.PodLogsDir, NodeName: o.NodeName, Logger: log,
		SandboxImage: ocibuild.PauseRef,
	}, stats.Deps{Runtime: rt, Pods: table.Pods})
	if err != nil {
		return err
	}
	rootDir := o.RootDir
	// The legacy log symlinks live next to the pod log directories:
	// /var/log/containers by default, as the kubelet's.
	containerLogsDir := filepath.Join(filepath.Dir(ac.PodLogsDir), "containers")
	var kn *kubenode.Controller // the Node's status and Lease, in a cluster; set before the sync loop runs
	n, err := node.New(o.Config, node.Options{
		SandboxImage:  ocibuild.PauseRef,
		DevicePlugins: &devicemanager.Config{Dir: devicePluginDir(rootDir)},
		// The kubelet's defaults of --minimum-container-ttl-duration,
		// --maximum-dead-containers-per-container and --maximum-dead-containers.
		ContainerGC: containergc.DefaultPolicy(),
		LogDirs:     containergc.LogDirs{Pods: ac.PodLogsDir, Containers: containerLogsDir},
	}, node.Collaborators{
		NodeName: o.NodeName, Capacity: func() (v1.ResourceList, error) { return capacity(rootDir, memory) },
		// Admission's node-affinity and taint checks read the Node as the
		// API server last returned it, else the labels it is registered with.
		NodeObject: func() *v1.Node {
			if kn != nil {
				if obj := kn.Node(); obj != nil {
					return obj
				}
			}
			return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, Labels: kubenode.DefaultLabels(o.NodeName)}}
		},
		Stats: st, Runtime: rt, Pods: table, PodCleanedUp: table.PodCleanedUp, Killer: table, Recorder: recorder,
		Logger: log, Registerer: reg, PodStatus: table, Exec: prober.NewExec(rt),
		ImageRecords: imagegc.FileStore{Path: filepath.Join(rootDir, imageRecordsFile)},
	})
	if err != nil {
		return err
	}
	// Then the pod runtime and the sync loop over the managers.
	pr, err := podruntime.New(podruntime.Config{
		NodeName: o.NodeName, PodsDir: filepath.Join(o.RootDir, "pods"), PodLogsDir: ac.PodLogsDir, ContainerLogsDir: containerLogsDir,
		HostIP: hostIP, MemoryCapacity: memory, CPUs: runtime.NumCPU(), ClusterDomain: ac.ClusterDomain, Swap: swap,
		OOMGroup: containerOOMGroup(layout.Version == cgroups.V2, ac.SingleProcessOOMKill),
	}, podruntime.Deps{Runtime: rt, Cgroups: cg, Logger: log, Recorder: recorder, Devices: n.Devices,
		Probes: n.Probes, KubeAPI: kubeAPI})
	if err != nil {
		return err
	}
	ag, err := agent.New(agent.Config{NodeName: o.NodeName, ResyncPeriod: ac.SyncFrequency},
		agent.Deps{Table: table, Runtime: pr, Admit: n.Admission, Preempt: n.Preemption, Logger: log,
			Recorder: recorder, Registerer: reg, Probes: n.Probes})
	if err != nil {
		return err
	}
	if client != nil {
		kn, err = nodeStatus(ctx, o, heartbeat, rt, hostIP, func(now time.Time) (*v1.Node, error) {
			return n.Object(o.NodeName, ag.Healthy(), now)
		}, recorder, log)
		if err != nil {
			return err
		}
	}
	// Devices: the device-plugin registration server, then the pod-resources
	// API, both before the sync loop admits pods.
	g.Go(func() error { return n.Devices.Run(ctx) })
	podRes, err := podresources.New(podresources.Config{Socket: podResourcesSocket(rootDir)}, podresources.Deps{
		ActivePods: table.ActivePods, Devices: n.Devices, Logger: log, Registerer: reg,
	})
	if err != nil {
		return err
	}
	g.Go(func() error { return podRes.Run(ctx) })
	select {
	case <-n.Devices.Ready():
	case <-ctx.Done():
		return g.Wait()
	}
	// The prober: exec probes through CRI ExecSync, the others to the pod IP.
	g.Go(func() error { return n.Probes.Run(ctx) })
	g.Go(func() error { return ag.Run(ctx) })
	// Ordinary local pods (nodekeeper apply / delete pod): persisted in the
	// root directory, changed through the root-only unix socket alone.
	local, err := localpods.New(localpods.Config{Path: filepath.Join(rootDir, localpods.FileName), NodeName: o.NodeName},
		localpods.Deps{Agent: table, Observed: table.Pods, Logger: log})
	if err != nil {
		return err
	}
	g.Go(func() error { return local.Run(ctx) })
	if client != nil {
		// Pods bound to the node: run like the others, their status and
		// deletion written back, mirror pods for the static ones.
		ap, err := apipods.New(apipods.Config{NodeName: o.NodeName}, apipods.Deps{Client: client, Agent: table, Logger: log.With("subsystem", "apipods")})
		if err != nil {
			return ConfigError{err}
		}
		g.Go(func() error { return ap.Run(ctx) })
		g.Go(func() error { return kn.Run(ctx) })
		// A device plugin coming or going changes the Node at once.
		g.Go(func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-n.Devices.Changed():
					kn.Poke()
				}
			}
		})
	}
	// The node-level loops: eviction (woken early by the pressure notifier),
	// container GC and image GC.
	pc, err := pressureWatches(o.Config.Eviction.Thresholds, memory, cgroups.Names{Driver: ac.CgroupDriver, Root: ac.CgroupRoot}.Kubepods(), cgc.KubepodsLimits, rootDir, unix.Statfs)
	if err != nil {
		return err
	}
	notifier, err := pressure.New(pc, pressure.Deps{Wake: n.Eviction.Wake, Logger: log})
	if err != nil {
		return err
	}
	g.Go(func() error { return notifier.Run(ctx) })
	// Not n.Run: the device manager (and the prober) are run on their own.
	g.Go(func() error { return n.Eviction.Run(ctx) })
	g.Go(func() error { return n.Containers.Run(ctx) })
	g.Go(func() error { return n.Images.Run(ctx) })
	if ac.StaticPodPath != "" {
		src, err := podsource.NewFile(podsource.FileConfig{
			Path: ac.StaticPodPath, NodeName: o.NodeName, Period: ac.FileCheckFrequency,
		}, podsource.FileDeps{Logger: log.With("subsystem", "podsource"), Recorder: recorder})
		if err != nil {
			return ConfigError{err}
		}
		g.Go(func() error {
			return src.Run(ctx, func(pods []*v1.Pod) {
				if err := table.SetPods(ctx, sourceFile, pods); err != nil && ctx.Err() == nil {
					log.Error("static pods", "err", err)
				}
			})
		})
	}
	// The HTTP endpoints: the root-only unix socket (every read, /configz,
	// the profiles, the local pods' changes), the read-only port when
	// readOnlyPort is set (plain HTTP, loopback by default, the kubelet's
	// read-only endpoints alone) and, in a cluster, the kubelet API over TLS
	// (the reads, logs, exec, attach and port-forward, authenticated).
	shared := server.Deps{
		Pods: table.Pods, Summary: st.Summary, Containers: st.Containers, NodeFilesystems: st.NodeFilesystems, Gatherer: reg, Logger: log.With("subsystem", "http"),
		Node: func(context.Context) (*v1.Node, error) { return n.Object(o.NodeName, ag.Healthy(), time.Now()) },
		Configz: func() any {
			k := o.Config.Kubelet
			k.APIVersion, k.Kind = "kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"
			return k
		},
		Healthz: []server.Check{{Name: "syncloop", Check: func(context.Context) error { return ag.Healthy() }}},
	}
	// The kubelet's healthz port (127.0.0.1:10248): what the node e2e
	// harness and kubeadm poll. A taken port is logged and retried.
	if ac.HealthzPort != 0 {
		hz, err := newHealthz(ac.HealthzBindAddress, int(ac.HealthzPort), shared.Healthz, 0, log.With("subsystem", "healthz"))
		if err != nil {
			return ConfigError{err}
		}
		g.Go(func() error { return hz.Run(ctx) })
	}
	rootOnly := shared
	rootOnly.Local, rootOnly.Profiling = local.Handler(), ac.EnableProfilingHandler
	hostname, _ := os.Hostname()
	srv, err := server.New(server.Config{Address: ac.Address, Port: int(ac.ReadOnlyPort), HostNames: nonEmpty(o.NodeName, hostname)}, rootOnly)
	if err != nil {
		return ConfigError{err}
	}
	sock := filepath.Join(rootDir, localpods.SocketName)
	sockReady := make(chan struct{})
	g.Go(func() error {
		return localpods.ServeUnix(ctx, localpods.UnixConfig{Path: sock, Logger: log.With("subsystem", "socket")}, srv.Handler(), sockReady)
	})
	select {
	case <-sockReady:
	case <-ctx.Done():
		return g.Wait()
	}
	var addr string
	if ac.ReadOnlyPort != 0 {
		g.Go(func() error { return srv.Run(ctx) })
		select {
		case <-srv.Ready():
			addr = srv.Addr()
		case <-ctx.Done():
			return g.Wait()
		}
	}
	if client != nil && o.Config.Cluster.EnableServer {
		ks, err := kubeletAPI(o, hostIP, shared, table.Pods, rt, client, log)
		if err != nil {
			return err
		}
		g.Go(func() error { return ks.Run(ctx) })
		select {
		case <-ks.Ready():
			log.Info("kubelet API serving", "addr", ks.Addr())
		case <-ctx.Done():
			return g.Wait()
		}
	}
	log.Info("nodekeeper running", "node", o.NodeName, "runtime", endpoint, "socket", sock, "http", addr, "staticPodPath", ac.StaticPodPath)
	if o.OnReady != nil {
		o.OnReady(Ready{Addr: addr, Socket: sock, Endpoint: endpoint, Pods: table.Pods})
	}
	err = g.Wait()
	log.Info("nodekeeper stopped; pods keep running")
	return err
}

// nonEmpty returns the names that are not "".
func nonEmpty(names ...string) []string {
	var out []string
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}
