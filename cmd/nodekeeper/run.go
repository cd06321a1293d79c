package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/daemon"
)

// agentGCPercent is the Go GC target `run` sets unless GOGC is set.
const agentGCPercent = 35

// runFlags are `nodekeeper run`'s flags: the kubelet's that nodekeeper
// honours, with the kubelet's names and meaning, and nodekeeper's own.
type runFlags struct {
	config, rootDir, hostname, endpoint, manifests string
	kubeconfig, nodeIP                             string
	verbosity, oomScoreAdj                         int
	imageDirs                                      []string
	statusEvery                                    time.Duration
	// The kubelet's flags that nodekeeper accepts with their meaning, for
	// the node e2e harness, which starts the kubelet with them.
	configDir, imageEndpoint                      string
	systemCgroups, kubeletCgroups, runtimeCgroups string
	featureGates                                  []string
	lockFile                                      string
	exitOnLockContention                          bool
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use: "run [--config FILE] [--config-dir DIR] [--root-dir DIR] [--hostname-override NAME] [--container-runtime-endpoint URL] " +
			"[--pod-manifest-path PATH] [--kubeconfig FILE] [--node-ip IP] [--image-dir DIR]... [--v N] [--status-interval D] [--oom-score-adj N] " +
			"[--image-service-endpoint URL] [--feature-gates NAME=BOOL,...]... [--system-cgroups CG] [--kubelet-cgroups CG] [--runtime-cgroups CG] " +
			"[--lock-file FILE [--exit-on-lock-contention]]",
		Short: "Run the node agent: static pods through containerd, with the node-level managers",
		Long: `run starts the node agent. Without a containerRuntimeEndpoint it starts and manages
its own containerd under the root directory, imports the image tarballs in
ROOT/images and every --image-dir, and runs the static pods of staticPodPath
(--pod-manifest-path) in their own network namespaces. SIGINT or SIGTERM stops
the agent and its containerd; the pods keep running and the next start adopts
them. With --kubeconfig it joins the cluster of that API server as the Node
NAME (--hostname-override): it registers the Node and renews its Lease, runs
the pods bound to it, writes their status, creates mirror pods for its static
pods and serves the kubelet API on port 10250. While it runs it prints the
pods' table on stdout when it changes. It serves GET /healthz on
healthzBindAddress:healthzPort (127.0.0.1:10248) once its sync loop has
listed the runtime. It accepts the kubelet's --feature-gates,
--system-cgroups, --kubelet-cgroups and --runtime-cgroups, with a warning:
it acts on no feature gate but KubeletCrashLoopBackOffMax and
ReduceDefaultCrashLoopBackOffDecay and moves no process into those cgroups.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{annotationDaemon: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), cmd, f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// register defines run's flags on fl, setting f's fields.
func (f *runFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.config, "config", "", "KubeletConfiguration file (the kubelet's --config)")
	fl.StringVar(&f.rootDir, "root-dir", daemon.DefaultRootDir, "state directory (the kubelet's --root-dir)")
	fl.StringVar(&f.hostname, "hostname-override", "", "node name instead of the host name")
	fl.StringVar(&f.endpoint, "container-runtime-endpoint", "", "CRI endpoint of a runtime to use instead of the managed containerd (overrides containerRuntimeEndpoint)")
	fl.StringVar(&f.manifests, "pod-manifest-path", "", "static pod manifests, a directory or a file (overrides staticPodPath)")
	fl.IntVar(&f.verbosity, "v", 0, "log verbosity, as the kubelet's: 4 and above logs at debug level")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file of the API server to join as a node (the kubelet's --kubeconfig); none runs standalone")
	fl.StringVar(&f.nodeIP, "node-ip", "", "the node's IP address (the kubelet's --node-ip); by default the first up non-loopback IPv4, or with --kubeconfig the kubelet's choice: what the node name resolves to on this host, else the default route's interface")
	fl.StringArrayVar(&f.imageDirs, "image-dir", nil, "directory of OCI or docker image tarballs to import at start (repeatable)")
	fl.IntVar(&f.oomScoreAdj, "oom-score-adj", daemon.DefaultOOMScoreAdj, "the agent's own oom_score_adj, in [-1000, 1000] (overrides oomScoreAdj; lowering it needs CAP_SYS_RESOURCE: refused, it is a warning)")
	fl.DurationVar(&f.statusEvery, "status-interval", 2*time.Second, "how often to check the pods' table and print it when it changed; 0 prints none")
	fl.StringVar(&f.configDir, "config-dir", "", "drop-in directory: its *.conf KubeletConfiguration files are merged over --config in lexical order (the kubelet's --config-dir)")
	fl.StringVar(&f.imageEndpoint, "image-service-endpoint", "", "CRI image endpoint (overrides imageServiceEndpoint); nodekeeper uses the runtime endpoint's, so it must be empty or the same")
	fl.StringArrayVar(&f.featureGates, "feature-gates", nil, "Name=true|false,... (the kubelet's --feature-gates, merged over featureGates); accepted, nodekeeper acts on none")
	fl.StringVar(&f.systemCgroups, "system-cgroups", "", "the kubelet's --system-cgroups (overrides systemCgroups); accepted, nodekeeper moves no process")
	fl.StringVar(&f.kubeletCgroups, "kubelet-cgroups", "", "the kubelet's --kubelet-cgroups (overrides kubeletCgroups); accepted, nodekeeper moves no process")
	fl.StringVar(&f.runtimeCgroups, "runtime-cgroups", "", "the kubelet's --runtime-cgroups; accepted, nodekeeper moves no process")
	fl.StringVar(&f.lockFile, "lock-file", "", "a file to flock before starting, waiting while another process holds it (the kubelet's --lock-file)")
	fl.BoolVar(&f.exitOnLockContention, "exit-on-lock-contention", false, "stop, as on SIGTERM, when another process opens --lock-file (the kubelet's --exit-on-lock-contention)")
}

// runInputLimit is the largest file run reads (its configuration file and
// drop-ins, its kubeconfig and the files that names): --max-input-size when
// given, else decode.DefaultMaxConfigSize (10 MiB), not the 256 MiB the
// other commands read by default.
func runInputLimit(ctx context.Context, flags *pflag.FlagSet) int64 {
	if limit, _ := ctx.Value(maxInputSizeKey{}).(int64); limit > 0 && flags.Changed("max-input-size") {
		return limit
	}
	return decode.DefaultMaxConfigSize
}

// loadRunConfig loads the configuration from --config, --config-dir and the
// flags that override its fields, each file of at most limit bytes, and checks
// that run can use it. Its errors are usage errors but for a file that exists
// and cannot be read; it returns ctx.Err() when ctx ends first.
func loadRunConfig(ctx context.Context, flags *pflag.FlagSet, f runFlags, limit int64) (*config.Config, error) {
	str := func(name, v string) *string {
		if flags.Changed(name) {
			return &v
		}
		return nil
	}
	src := config.Sources{File: f.config, DropInDir: f.configDir, MaxFileSize: limit, Flags: config.Flags{
		ContainerRuntimeEndpoint: str("container-runtime-endpoint", f.endpoint),
		ImageServiceEndpoint:     str("image-service-endpoint", f.imageEndpoint),
		SystemCgroups:            str("system-cgroups", f.systemCgroups),
		KubeletCgroups:           str("kubelet-cgroups", f.kubeletCgroups),
		RuntimeCgroups:           f.runtimeCgroups,
	}}
	if flags.Changed("pod-manifest-path") {
		p, err := filepath.Abs(f.manifests)
		if err != nil {
			return nil, badInput(fmt.Errorf("--pod-manifest-path %q: %v", f.manifests, err))
		}
		src.Flags.PodManifestPath = &p
	}
	if flags.Changed("feature-gates") {
		src.Flags.FeatureGates = map[string]bool{}
		for _, v := range f.featureGates {
			gates, err := config.ParseFeatureGates(v)
			if err != nil {
				return nil, badInput(fmt.Errorf("--feature-gates: %v", err))
			}
			maps.Copy(src.Flags.FeatureGates, gates)
		}
	}
	cfg, err := config.LoadSources(ctx, src)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, os.ErrNotExist) {
			return nil, badInput(err)
		}
		return nil, err
	}
	file := f.config
	if file == "" {
		file = "(defaults)"
	}
	if err := cfg.Agent.RunnableErr(file); err != nil {
		return nil, badInput(err)
	}
	return cfg, nil
}

// checkValues refuses the flag values that parse but mean nothing: a
// negative --v or --status-interval.
func (f runFlags) checkValues() error {
	switch {
	case f.verbosity < 0:
		return badInput(fmt.Errorf("--v \"%d\": must not be negative", f.verbosity))
	case f.statusEvery < 0:
		return badInput(fmt.Errorf("--status-interval %q: must not be negative (0 prints no table)", f.statusEvery))
	case f.exitOnLockContention && f.lockFile == "":
		return badInput(errors.New("--exit-on-lock-contention: no --lock-file to watch"))
	}
	return nil
}

// runAgent loads the configuration, applies the flags and runs the agent.
func runAgent(ctx context.Context, cmd *cobra.Command, f runFlags) error {
	if err := f.checkValues(); err != nil {
		return err
	}
	limit := runInputLimit(ctx, cmd.Flags())
	cfg, err := loadRunConfig(ctx, cmd.Flags(), f, limit)
	if err != nil {
		return err
	}
	file := f.config
	if file == "" {
		file = "(defaults)"
	}
	flags := cmd.Flags()
	oomScore := daemon.DefaultOOMScoreAdj
	switch {
	case flags.Changed("oom-score-adj"):
		oomScore = f.oomScoreAdj
	case cfg.Kubelet.OOMScoreAdj != nil:
		oomScore = int(*cfg.Kubelet.OOMScoreAdj)
	}
	if oomScore < -1000 || oomScore > 1000 {
		return badInput(fmt.Errorf("--oom-score-adj (or oomScoreAdj in %s) %d: want a value in [-1000, 1000]", file, oomScore))
	}
	if f.rootDir == "" || !filepath.IsAbs(f.rootDir) {
		abs, err := filepath.Abs(f.rootDir)
		if f.rootDir == "" || err != nil {
			return badInput(fmt.Errorf("--root-dir %q: want a directory", f.rootDir))
		}
		f.rootDir = abs
	}
	if fi, err := os.Stat(f.rootDir); err == nil && !fi.IsDir() {
		return badInput(fmt.Errorf("--root-dir %s: not a directory", f.rootDir))
	}
	name := f.hostname
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node name: %w (set --hostname-override)", err)
		}
		name = h
	}
	name = strings.ToLower(name)
	level := slog.LevelInfo
	if f.verbosity >= 4 {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	for _, p := range cfg.SkippedDropIns {
		logger.Debug("Skipped a file of the drop-in directory: not named *"+config.DropInSuffix, "file", p)
	}
	if os.Getenv("GOGC") == "" {
		// A node agent stays small on the node it manages: the Go heap may
		// grow to 1.35x the live heap rather than 2x. Idle with 100 pods,
		// the live heap is about 5.5 MB and the agent allocates under
		// 100 KB/s: RSS 37.5 MiB at GOGC=35, 38.1-38.9 MiB at 50, for no
		// measurable CPU (a GC cycle every 20 s). GOGC in the environment
		// overrides it.
		debug.SetGCPercent(agentGCPercent)
	}
	if f.nodeIP != "" && net.ParseIP(f.nodeIP) == nil {
		return badInput(fmt.Errorf("--node-ip %q: not an IP address", f.nodeIP))
	}
	if f.kubeconfig != "" {
		// Checked here for a usage error before anything starts; the
		// daemon reads it again (kubeclient.LoadKubeconfig, same limit).
		if _, err := kubeclient.LoadKubeconfig(ctx, f.kubeconfig, limit); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return badInput(fmt.Errorf("--kubeconfig: %w", err))
		}
		// client-go logs through klog: into the same log. klog is
		// process-wide, so this is set only once the agent is about to
		// talk to a cluster, never by a run that ends in a usage error.
		klog.SetSlogLogger(logger.With("subsystem", "client-go"))
	}
	opts := daemon.Options{Config: cfg, RootDir: f.rootDir, NodeName: name, ImageDirs: f.imageDirs, Logger: logger,
		OOMScoreAdj: &oomScore, Kubeconfig: f.kubeconfig, MaxInputSize: limit, NodeIP: f.nodeIP, Version: versionString(),
		LockFile: f.lockFile, ExitOnLockContention: f.exitOnLockContention}
	if f.statusEvery > 0 {
		opts.OnReady = func(r daemon.Ready) {
			go printStatus(ctx, cmd.OutOrStdout(), r.Pods, f.statusEvery)
		}
	}
	err = daemon.Run(ctx, opts)
	var bad daemon.ConfigError
	if errors.As(err, &bad) {
		return badInput(err)
	}
	return err
}

// printStatus prints the pods' table on w every interval when it changed,
// until ctx ends.
func printStatus(ctx context.Context, w io.Writer, pods func() []*v1.Pod, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	var seen []*v1.Pod
	for {
		// The agent publishes new pods for every change and never modifies
		// them: the same pointers are the same table.
		if list := pods(); !slices.Equal(list, seen) {
			seen = list
			vals := make([]v1.Pod, len(list))
			for i, p := range list {
				vals[i] = *p
			}
			// The table's AGE column changes every second; print when
			// anything else does.
			if key := statusKey(vals); key != last {
				last = key
				var b strings.Builder
				if err := printPodTable(&b, vals, time.Now()); err == nil {
					fmt.Fprintf(w, "\n%s", b.String())
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// statusKey sums up what the pod table shows but the times that pass.
func statusKey(pods []v1.Pod) string {
	var b strings.Builder
	for i := range pods {
		b.WriteString(podKey(&pods[i]) + "|")
	}
	return b.String()
}
