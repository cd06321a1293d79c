// Package daemon is `nodekeeper run`: the agent's composition root. Run reads
// like a plan: four phases, each a function that builds its parts over what
// the phases before it built and adds them to one ordered list of parts
// ({Name, Run, Ready}), which one small runner starts in order:
//
//   - machine: the checks before anything is touched (settings, host, a
//     configured runtime's cgroup driver, the kubeconfig), the root
//     directory, pod cgroups and the container runtime (a containerd it
//     manages, or a configured CRI endpoint);
//   - core: the pod table first, then the stats provider and the node-level
//     managers over it, the pod runtime and the sync loop over them, the pod
//     sources;
//   - cluster (with a kubeconfig): the events writer, the Node's status and
//     Lease, the API server's pods;
//   - servers: healthz, the root-only socket, the read-only port, the
//     kubelet API.
//
// A phase is built once the parts before it are ready (the runtime answers,
// a socket listens). The first failure, or the context's end, stops every
// part; pods keep running, and the next start adopts them.
package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/events"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubenode"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/core/agent"
	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
	"github.com/nodekeeper/nodekeeper/internal/servers/eventring"
	"github.com/nodekeeper/nodekeeper/internal/servers/kubeletserver"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
	"github.com/nodekeeper/nodekeeper/nodeapi"
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
	// first up non-loopback IPv4, or with Kubeconfig the kubelet's choice
	// (kubenode.HostIP).
	NodeIP string
	// Version is nodekeeper's version, reported in the Node's nodeInfo.
	Version string
	// LockFile, when set, is flocked before anything starts, waiting while
	// another process holds it (the kubelet's --lock-file).
	LockFile string
	// ExitOnLockContention stops the agent, as SIGTERM does, when another
	// process opens LockFile (the kubelet's --exit-on-lock-contention). It
	// needs LockFile.
	ExitOnLockContention bool
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
	r := newRoot(o)
	defer r.close()
	if o.ExitOnLockContention && o.LockFile == "" {
		return ConfigError{errors.New("--exit-on-lock-contention: no --lock-file to watch")}
	}
	if o.LockFile != "" {
		release, err := AcquireLockFile(ctx, o.LockFile, r.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting: as after any stop
			}
			return err
		}
		defer release()
		if o.ExitOnLockContention {
			contended, err := WatchLockContention(ctx, o.LockFile)
			if err != nil {
				return err
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			go func() {
				select {
				case <-contended:
					r.log.Info("another process opened the lock file: stopping (--exit-on-lock-contention)", "path", o.LockFile)
					cancel()
				case <-ctx.Done():
				}
			}()
		}
	}
	run := newRunner(ctx)
	p := &plan{}
	for _, build := range []func(context.Context, *plan) error{r.machine, r.core, r.cluster, r.servers} {
		if err := build(run.ctx, p); err != nil {
			if run.ctx.Err() != nil { // ctx ended, or a part failed, meanwhile
				return run.wait()
			}
			run.cancel()
			_ = run.wait()
			return err
		}
		if !run.start(p) {
			return run.wait()
		}
	}
	r.running(p)
	err := run.wait()
	r.log.Info("nodekeeper stopped; pods keep running")
	return err
}

// root is what the phases build, each over what the phases before it built.
// Run's goroutine writes it while a phase builds; the parts read only what was
// built before they started, except kn (see apiNode).
type root struct {
	o       Options
	start   time.Time // when Run began: the agent's start
	ac      config.Agent
	file    string // the configuration file's name in errors
	log     *slog.Logger
	reg     *prometheus.Registry
	closers []func() // run by close, last first

	// machine
	layout            cgroups.Layout
	client, heartbeat *kubeclient.Clientset // nil: standalone
	rt                *cri.Client
	endpoint          string
	managed           *containerd.Managed // nil with containerRuntimeEndpoint
	memory            int64
	cgc               cgroups.Config
	cg                *cgroups.Manager
	swap              podruntime.Swap
	// core
	recorder nodeapi.Recorder
	events   *events.Recorder // to the API server, or standalone to ring; its writer is a cluster-phase part
	ring     *eventring.Ring  // standalone: the events kept for /events; nil in a cluster
	hostIP   string
	table    *agent.Table
	stats    *stats.Provider
	n        *node.Node
	ag       *agent.Agent
	local    *localpods.Store
	// cluster: the Node controller, set once the cluster phase built it
	kn atomic.Pointer[kubenode.Controller]
	// servers
	sock string
	srv  *server.Server        // the read-only port's, when it is on
	ks   *kubeletserver.Server // nil: off
}

// newRoot fills o's defaults.
func newRoot(o Options) *root {
	if o.Config == nil {
		o.Config = config.Default()
	}
	if o.RootDir == "" {
		o.RootDir = DefaultRootDir
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	file := o.Config.File
	if file == "" {
		file = "(defaults)"
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &root{o: o, start: time.Now(), ac: o.Config.Agent, file: file, log: o.Logger, reg: reg}
}

// close releases what the phases hold (the CRI client, the root
// directory's lock), last first, once every part returned.
func (r *root) close() {
	for _, c := range slices.Backward(r.closers) {
		c()
	}
}

// running logs the started agent, with the parts of the plan in one line,
// and calls OnReady.
func (r *root) running(p *plan) {
	var addr string
	if r.srv != nil {
		addr = r.srv.Addr()
	}
	if r.ks != nil {
		r.log.Info("kubelet API serving", "addr", r.ks.Addr())
	}
	r.log.Info("nodekeeper running", "node", r.o.NodeName, "runtime", r.endpoint, "socket", r.sock, "http", addr,
		"staticPodPath", r.ac.StaticPodPath, "parts", p.names())
	if r.o.OnReady != nil {
		r.o.OnReady(Ready{Addr: addr, Socket: r.sock, Endpoint: r.endpoint, Pods: r.table.Pods})
	}
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
