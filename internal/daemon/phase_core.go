package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/containergc"
	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/cluster/apipods"
	"github.com/nodekeeper/nodekeeper/internal/cluster/events"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubenode"
	"github.com/nodekeeper/nodekeeper/internal/core/agent"
	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	podplan "github.com/nodekeeper/nodekeeper/internal/core/podruntime/plan"
	"github.com/nodekeeper/nodekeeper/internal/core/podsource"
	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/machine/pressure"
	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
	"github.com/nodekeeper/nodekeeper/internal/servers/eventring"
	"github.com/nodekeeper/nodekeeper/internal/servers/podresources"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/prober"
)

// core is the second phase: the pod table first, then what reads it (the
// stats provider and the node-level managers), the pod runtime and the sync
// loop over them, and the pod sources. Its parts: the device manager and the
// pod-resources API (both before the sync loop admits pods), the prober, the
// sync loop, the local pods, the node-level loops and the static pods.
func (r *root) core(ctx context.Context, p *plan) error {
	logged := nodeapi.LogRecorder{Logger: r.log.With("subsystem", "events")}
	var sink events.Sink = eventSink{r.client}
	if r.client == nil {
		r.ring, _ = eventring.New(eventring.DefaultSize) // a valid size
		sink = r.ring
	}
	r.recorder, r.events = eventRecorder(sink, r.o.NodeName, r.o.Config.Cluster, logged)
	if err := r.nodeIP(); err != nil {
		return err
	}
	if err := r.podTable(); err != nil {
		return err
	}
	if err := r.managers(); err != nil {
		return err
	}
	if err := r.loop(); err != nil {
		return err
	}
	podRes, err := podresources.New(podresources.Config{Socket: podResourcesSocket(r.o.RootDir)}, podresources.Deps{
		ActivePods: r.table.ActivePods, Devices: r.n.Devices, Logger: r.log, Registerer: r.reg,
	})
	if err != nil {
		return err
	}
	p.add(part{Name: "devicemanager", Run: r.n.Devices.Run, Ready: r.n.Devices.Ready()},
		part{Name: "podresources", Run: podRes.Run},
		part{Name: "prober", Run: r.n.Probes.Run},
		part{Name: "agent", Run: r.ag.Run})
	if err := r.localPods(p); err != nil {
		return err
	}
	if err := r.nodeLoops(p); err != nil {
		return err
	}
	return r.staticPods(p)
}

// nodeIP picks the node's IP unless --node-ip gives it: in a cluster the
// kubelet's choice (what the node name resolves to on this host, else the
// default route's interface), else the first up non-loopback IPv4.
func (r *root) nodeIP() error {
	r.hostIP = r.o.NodeIP
	switch {
	case r.hostIP == "" && r.client != nil:
		ip, err := kubenode.HostIP(r.o.NodeName)
		if err != nil {
			return fmt.Errorf("node IP (set --node-ip): %w", err)
		}
		r.hostIP = ip.String()
	case r.hostIP == "":
		r.hostIP = hostIPv4()
	}
	return nil
}

// podTable builds the pod table, which the managers read and kill through
// and the sync loop owns, and the stats provider over it.
func (r *root) podTable() error {
	sources := []string{localpods.Source}
	if r.ac.StaticPodPath != "" {
		sources = append(sources, sourceFile)
	}
	if r.client != nil {
		sources = append(sources, apipods.Source)
	}
	var err error
	if r.table, err = agent.NewTable(sources); err != nil {
		return err
	}
	r.stats, err = stats.New(stats.Config{
		CgroupRoot: r.ac.CgroupRoot, CgroupDriver: r.ac.CgroupDriver, RootDir: r.o.RootDir, LogDir: r.ac.PodLogsDir,
		NodeName: r.o.NodeName, Logger: r.log, SandboxImage: ocibuild.PauseRef,
	}, stats.Deps{Runtime: r.rt, Pods: r.table.Pods})
	return err
}

// containerLogsDir holds the legacy log symlinks, next to the pod log
// directories: /var/log/containers by default, as the kubelet's.
func (r *root) containerLogsDir() string {
	return filepath.Join(filepath.Dir(r.ac.PodLogsDir), "containers")
}

// managers builds the node-level managers over the pod table: eviction,
// image and container GC, admission with preemption, the device manager
// and the prober.
func (r *root) managers() error {
	rootDir := r.o.RootDir
	var err error
	r.n, err = node.New(r.o.Config, node.Options{
		SandboxImage:  ocibuild.PauseRef,
		DevicePlugins: &devicemanager.Config{Dir: devicePluginDir(rootDir)},
		// The kubelet's defaults of --minimum-container-ttl-duration,
		// --maximum-dead-containers-per-container and --maximum-dead-containers.
		ContainerGC: containergc.DefaultPolicy(),
		LogDirs:     containergc.LogDirs{Pods: r.ac.PodLogsDir, Containers: r.containerLogsDir()},
	}, node.Collaborators{
		NodeName: r.o.NodeName, Start: r.start, Capacity: func() (v1.ResourceList, error) { return capacity(rootDir, r.memory) },
		NodeObject: r.apiNode, Stats: r.stats, Runtime: r.rt, Pods: r.table, PodCleanedUp: r.table.PodCleanedUp,
		Killer: r.table, Recorder: r.recorder, Logger: r.log, Registerer: r.reg, PodStatus: r.table,
		Exec: prober.NewExec(r.rt), ImageRecords: imagegc.FileStore{Path: filepath.Join(rootDir, imageRecordsFile)},
	})
	return err
}

// apiNode is the Node admission's node-affinity and taint checks read: as
// the API server last returned it (the cluster phase's Node controller, once
// it has registered the Node), else the labels it is registered with. It is
// the one value that flows back from a later phase, hence the atomic.
func (r *root) apiNode() *v1.Node {
	if kn := r.kn.Load(); kn != nil {
		if obj := kn.Node(); obj != nil {
			return obj
		}
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.o.NodeName, Labels: kubenode.DefaultLabels(r.o.NodeName)}}
}

// loop builds the pod runtime, with the device manager and the prober, and
// the sync loop over the table with admission, preemption and the prober.
func (r *root) loop() error {
	var kubeAPI volumes.API // nil: standalone, no ConfigMap, Secret or token volumes
	if r.client != nil {
		// Pods sharing an object (every pod's kube-root-ca.crt) read it
		// once per TTL, not on each of their syncs.
		kubeAPI = volumes.NewCachedAPI(kubeclient.PodObjects{Client: r.client}, 0)
	}
	pr, err := podruntime.New(podruntime.Config{
		NodeName: r.o.NodeName, PodsDir: filepath.Join(r.o.RootDir, "pods"), PodLogsDir: r.ac.PodLogsDir,
		ContainerLogsDir: r.containerLogsDir(), HostIP: r.hostIP, MemoryCapacity: r.memory, CPUs: runtime.NumCPU(),
		ClusterDomain: r.ac.ClusterDomain, Swap: r.swap, MaxParallelImagePulls: int(r.ac.MaxParallelImagePulls),
		OOMGroup:  containerOOMGroup(r.layout.Version == cgroups.V2, r.ac.SingleProcessOOMKill),
		CrashLoop: podplan.CrashLoopPolicy(r.ac.ReducedCrashLoopBackOff, r.ac.MaxContainerRestartPeriod),
	}, podruntime.Deps{Runtime: r.podRuntime(), Cgroups: r.cg, Logger: r.log, Recorder: r.recorder, Devices: r.n.Devices,
		Probes: r.n.Probes, KubeAPI: kubeAPI})
	if err != nil {
		return err
	}
	deps := agent.Deps{Table: r.table, Runtime: pr, Admit: r.n.Admission, Preempt: r.n.Preemption, Logger: r.log,
		Recorder: r.recorder, Registerer: r.reg, Probes: r.n.Probes}
	if r.n.Devices != nil {
		deps.Devices = r.n.Devices // the pods' allocatedResourcesStatus
	}
	r.ag, err = agent.New(agent.Config{NodeName: r.o.NodeName, ResyncPeriod: r.ac.SyncFrequency}, deps)
	return err
}

// localPods adds the ordinary local pods (nodekeeper apply / delete pod):
// persisted in the root directory, changed through the root-only unix
// socket alone.
func (r *root) localPods(p *plan) error {
	var err error
	r.local, err = localpods.New(localpods.Config{Path: filepath.Join(r.o.RootDir, localpods.FileName), NodeName: r.o.NodeName},
		localpods.Deps{Agent: r.table, Observed: r.table.Pods, Logger: r.log})
	if err != nil {
		return err
	}
	p.add(part{Name: "localpods", Run: r.local.Run})
	return nil
}

// nodeLoops adds the node-level loops: eviction (woken early by the
// pressure notifier), container GC and image GC.
func (r *root) nodeLoops(p *plan) error {
	kubepods := cgroups.Names{Driver: r.ac.CgroupDriver, Root: r.ac.CgroupRoot}.Kubepods()
	pc, err := pressureWatches(r.o.Config.Eviction.Thresholds, r.memory, kubepods, r.cgc.KubepodsLimits, r.o.RootDir, unix.Statfs)
	if err != nil {
		return err
	}
	notifier, err := pressure.New(pc, pressure.Deps{Wake: r.n.Eviction.Wake, Logger: r.log})
	if err != nil {
		return err
	}
	p.add(part{Name: "pressure", Run: notifier.Run},
		part{Name: "eviction", Run: r.n.Eviction.Run},
		part{Name: "containergc", Run: r.n.Containers.Run},
		part{Name: "imagegc", Run: r.n.Images.Run})
	return nil
}

// staticPods adds the static pod source when staticPodPath is set.
func (r *root) staticPods(p *plan) error {
	if r.ac.StaticPodPath == "" {
		return nil
	}
	src, err := podsource.NewFile(podsource.FileConfig{
		Path: r.ac.StaticPodPath, NodeName: r.o.NodeName, Period: r.ac.FileCheckFrequency,
	}, podsource.FileDeps{Logger: r.log.With("subsystem", "podsource"), Recorder: r.recorder})
	if err != nil {
		return ConfigError{err}
	}
	p.add(part{Name: "staticpods", Run: func(ctx context.Context) error {
		return src.Run(ctx, func(pods []*v1.Pod) {
			if err := r.table.SetPods(ctx, sourceFile, pods); err != nil && ctx.Err() == nil {
				r.log.Error("static pods", "err", err)
			}
		})
	}})
	return nil
}
