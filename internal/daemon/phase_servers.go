package daemon

import (
	"context"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/servers/kubeletserver"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

// servers is the last phase, the HTTP endpoints: the kubelet's healthz port
// (127.0.0.1:10248, what the node e2e harness and kubeadm poll; a taken
// port is logged and retried), the root-only unix socket (every read,
// /configz, the profiles, the local pods' changes and, unless
// enableDebuggingHandlers is false, container logs and exec), the
// read-only port when readOnlyPort is set (plain HTTP, loopback by default,
// the kubelet's read-only endpoints alone) and, in a cluster, the kubelet
// API over TLS (the reads, logs, exec, attach and port-forward,
// authenticated).
func (r *root) servers(_ context.Context, p *plan) error {
	shared := r.shared()
	if r.ac.HealthzPort != 0 {
		hz, err := newHealthz(r.ac.HealthzBindAddress, int(r.ac.HealthzPort), shared.Healthz, 0, r.log.With("subsystem", "healthz"))
		if err != nil {
			return ConfigError{err}
		}
		p.add(part{Name: "healthz", Run: hz.Run})
	}
	rootOnly := shared
	rootOnly.Local, rootOnly.Profiling = r.local.Handler(), r.ac.EnableProfilingHandler
	if r.ring != nil {
		rootOnly.Events = r.ring.Events
	}
	if r.o.Config.Cluster.EnableDebuggingHandlers {
		dbg, err := kubeletserver.NewDebugging(kubeletserver.DebuggingDeps{Pods: r.table.Pods, Runtime: r.rt, Logger: r.log.With("subsystem", "socket")})
		if err != nil {
			return err
		}
		rootOnly.Debugging = dbg.LocalHandler()
	}
	hostname, _ := os.Hostname()
	srv, err := server.New(server.Config{Address: r.ac.Address, Port: int(r.ac.ReadOnlyPort), HostNames: nonEmpty(r.o.NodeName, hostname)}, rootOnly)
	if err != nil {
		return ConfigError{err}
	}
	r.sock = filepath.Join(r.o.RootDir, localpods.SocketName)
	sockReady := make(chan struct{})
	p.add(part{Name: "socket", Ready: sockReady, Run: func(ctx context.Context) error {
		return localpods.ServeUnix(ctx, localpods.UnixConfig{Path: r.sock, Logger: r.log.With("subsystem", "socket")}, srv.Handler(), sockReady)
	}})
	if r.ac.ReadOnlyPort != 0 {
		r.srv = srv
		p.add(part{Name: "readonlyport", Run: srv.Run, Ready: srv.Ready()})
	}
	if r.client != nil && r.o.Config.Cluster.EnableServer {
		ks, err := kubeletAPI(r.o, r.hostIP, shared, r.table.Pods, r.rt, r.client, r.log)
		if err != nil {
			return err
		}
		r.ks = ks
		p.add(part{Name: "kubeletapi", Run: ks.Run, Ready: ks.Ready()})
	}
	return nil
}

// shared are the HTTP servers' common dependencies.
func (r *root) shared() server.Deps {
	return server.Deps{
		Pods: r.table.Pods, Summary: r.stats.Summary, Containers: r.stats.Containers, NodeFilesystems: r.stats.NodeFilesystems,
		Gatherer: r.reg, Logger: r.log.With("subsystem", "http"),
		Node: func(context.Context) (*v1.Node, error) { return r.nodeObject(time.Now()) },
		Configz: func() any {
			k := r.o.Config.Kubelet
			k.APIVersion, k.Kind = "kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"
			return k
		},
		Healthz: []server.Check{{Name: "syncloop", Check: func(context.Context) error { return r.ag.Healthy() }}},
	}
}
