package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// The defaults of the agent's fields. Where nodekeeper's default differs from
// the kubelet's, the comment says so (docs/differences.md lists them).
const (
	defaultPodLogsDir            = "/var/log/pods"
	defaultCgroupDriver          = "cgroupfs"
	defaultCgroupRoot            = "/"
	defaultSyncFrequency         = time.Minute
	defaultFileCheckFrequency    = 20 * time.Second
	defaultRuntimeRequestTimeout = 2 * time.Minute
	// defaultAddress: the kubelet listens on 0.0.0.0; nodekeeper's plain-HTTP
	// endpoints are on loopback unless configured otherwise.
	defaultAddress = "127.0.0.1"
	// defaultReadOnlyPort is the kubelet's: the read-only port is off. Set,
	// it serves the kubelet's read-only endpoints, unauthenticated, to every
	// local user and hostNetwork pod; `nodekeeper get` and `apply` use the
	// root-only unix socket instead.
	defaultReadOnlyPort = 0
	// defaultHealthzBindAddress and defaultHealthzPort are the kubelet's.
	defaultHealthzBindAddress = "127.0.0.1"
	defaultHealthzPort        = 10248
	// defaultMaxContainerRestartPeriod is the kubelet's
	// crashLoopBackOff.maxContainerRestartPeriod (MaxContainerBackOff) with
	// the KubeletCrashLoopBackOffMax gate on; it may be set between
	// minMaxContainerRestartPeriod and defaultMaxContainerRestartPeriod.
	defaultMaxContainerRestartPeriod = 300 * time.Second
	minMaxContainerRestartPeriod     = time.Second
)

// The feature gates nodekeeper acts on, with the kubelet v1.36 defaults
// (pkg/features/kube_features.go); it ignores every other gate (a warning).
const (
	// GateCrashLoopBackOffMax (beta, on by default since v1.35) lets
	// crashLoopBackOff.maxContainerRestartPeriod cap the crash-loop back-off.
	GateCrashLoopBackOffMax = "KubeletCrashLoopBackOffMax"
	// GateReduceCrashLoopBackOffDecay (alpha, off by default) starts the
	// crash-loop back-off at 1s and caps it at 60s, unless
	// maxContainerRestartPeriod applies.
	GateReduceCrashLoopBackOffDecay = "ReduceDefaultCrashLoopBackOffDecay"
)

// honouredGates are the feature gates nodekeeper acts on, with their
// defaults.
var honouredGates = map[string]bool{GateCrashLoopBackOffMax: true, GateReduceCrashLoopBackOffDecay: false}

// gateOn reports whether gate is on in gates, or by default.
func gateOn(gates map[string]bool, gate string) bool {
	if on, ok := gates[gate]; ok {
		return on
	}
	return honouredGates[gate]
}

// The values of memorySwap.swapBehavior (the kubelet's kubelettypes.NoSwap
// and LimitedSwap).
const (
	// SwapNo gives containers no swap: memory.swap.max 0 on cgroup v2,
	// memory+swap equal to the memory limit on v1.
	SwapNo = "NoSwap"
	// SwapLimited gives the containers of Burstable pods swap in proportion
	// to their memory request (cgroup v2 only).
	SwapLimited = "LimitedSwap"
)

// Agent holds the resolved fields `nodekeeper run` uses beyond the managers'.
type Agent struct {
	// StaticPodPath is the directory (or file) of static pod manifests; "" runs
	// no static pods.
	StaticPodPath string
	// RuntimeEndpoint is the CRI endpoint; "" means nodekeeper starts and
	// manages its own containerd.
	RuntimeEndpoint string
	// ImageServiceEndpoint is the CRI image endpoint; "" is RuntimeEndpoint.
	ImageServiceEndpoint string
	// PodCIDR is the pod network for the managed containerd's CNI config; ""
	// is the built-in default.
	PodCIDR string
	// PodLogsDir holds the containers' logs (<ns>_<name>_<uid>/<container>/N.log).
	PodLogsDir string
	// Address and ReadOnlyPort are where the read-only port (plain HTTP,
	// reads only) listens; port 0, the default, turns it off.
	Address      string
	ReadOnlyPort int32
	// EnableProfilingHandler serves Go's runtime profiles at /debug/pprof/ on
	// the root-only unix socket (never on the read-only port); true unless
	// set (the kubelet's default).
	EnableProfilingHandler bool
	// CgroupDriver is "cgroupfs" or "systemd"; CgroupRoot is the cgroup under
	// which the kubepods hierarchy is made (under systemd, /nk is the slice
	// nk.slice). `run` needs CgroupsPerQOS, and systemd as the init system
	// for the systemd driver (RunnableErr says so); explain reads any of them.
	CgroupDriver, CgroupRoot string
	CgroupsPerQOS            bool
	// CgroupDriverSet is true when the configuration sets cgroupDriver;
	// false when CgroupDriver is the default. RuntimeDriver decides with it
	// whether the runtime's driver is taken or must match.
	CgroupDriverSet bool
	// SyncFrequency is the longest time between two syncs of a running pod;
	// FileCheckFrequency the period of the static pod directory's rescan.
	SyncFrequency, FileCheckFrequency time.Duration
	// RuntimeRequestTimeout bounds every CRI call but image pulls.
	RuntimeRequestTimeout time.Duration
	// FailCgroupV1 refuses to start on a cgroup v1 host; true unless set (the
	// kubelet's default since 1.35). HostErr applies it.
	FailCgroupV1 bool
	// FailSwapOn refuses to start while the host has swap on; true unless
	// set (the kubelet's). HostErr applies it.
	FailSwapOn bool
	// SwapBehavior is memorySwap.swapBehavior: SwapNo ("" in the file is
	// NoSwap, the kubelet's default) or SwapLimited, which cgroup v1 refuses
	// (HostErr). It decides the containers' swap limit (podruntime.Swap).
	SwapBehavior string
	// SingleProcessOOMKill is singleProcessOOMKill, nil unless set (the
	// kubelet's default). On cgroup v2 the runtime sets memory.oom.group=1
	// on each container's cgroup, so that an OOM kill ends the whole
	// container, unless it is true; cgroup v1 always kills single processes
	// and refuses an explicit false (HostErr).
	SingleProcessOOMKill *bool
	// HealthzBindAddress and HealthzPort are where GET /healthz is served on
	// its own (the kubelet's 127.0.0.1:10248); port 0 turns it off.
	HealthzBindAddress string
	HealthzPort        int32
	// SystemCgroups, KubeletCgroups (fields and flags) and RuntimeCgroups
	// (the --runtime-cgroups flag only) are accepted as the kubelet's, but
	// nodekeeper moves no process into them: set, they are reported in
	// Config.Warnings.
	SystemCgroups, KubeletCgroups, RuntimeCgroups string
	// FeatureGates are featureGates with --feature-gates merged over them.
	// nodekeeper acts on KubeletCrashLoopBackOffMax and
	// ReduceDefaultCrashLoopBackOffDecay only (MaxContainerRestartPeriod,
	// ReducedCrashLoopBackOff): the others set are reported in
	// Config.Warnings.
	FeatureGates map[string]bool
	// MaxContainerRestartPeriod is crashLoopBackOff.maxContainerRestartPeriod,
	// the cap of the crash-loop back-off: 300s unless set (1s to 300s) with
	// the KubeletCrashLoopBackOffMax gate on, its default; 0 with the gate
	// off, which forbids the field.
	MaxContainerRestartPeriod time.Duration
	// ReducedCrashLoopBackOff is the ReduceDefaultCrashLoopBackOffDecay gate
	// (off by default): the crash-loop back-off starts at 1s, not 10s, and
	// is capped at 60s where MaxContainerRestartPeriod is 0.
	ReducedCrashLoopBackOff bool
	// ClusterDomain is clusterDomain, "" unless set (the kubelet's default):
	// the domain of a pod with spec.subdomain is
	// <subdomain>.<namespace>.svc.<ClusterDomain>.
	ClusterDomain string
	// AllowedUnsafeSysctls are the namespaced sysctls (names or prefix
	// patterns ending in *) pods may set besides the safe ones.
	AllowedUnsafeSysctls []string
	// MaxParallelImagePulls is how many image pulls run at once: 1 with
	// serializeImagePulls (the kubelet's default, unless
	// maxParallelImagePulls is 2 or more), else maxParallelImagePulls, 0
	// (no bound) when that is unset.
	MaxParallelImagePulls int32
}

// resolveAgent defaults and validates the agent's fields of k in place and
// returns them resolved.
func resolveAgent(name string, k *kubeletv1beta1.KubeletConfiguration, raw map[string]json.RawMessage) (Agent, error) {
	fail := func(field, value, reason string) (Agent, error) {
		return Agent{}, fieldError(name, field, value, reason)
	}
	if k.PodLogsDir == "" {
		k.PodLogsDir = defaultPodLogsDir
	}
	if !filepath.IsAbs(k.PodLogsDir) {
		return fail("podLogsDir", k.PodLogsDir, "must be an absolute path")
	}
	if k.StaticPodPath != "" && !filepath.IsAbs(k.StaticPodPath) {
		return fail("staticPodPath", k.StaticPodPath, "must be an absolute path")
	}
	if k.PodCIDR != "" {
		p, err := netip.ParsePrefix(k.PodCIDR)
		if err != nil {
			return fail("podCIDR", k.PodCIDR, "not a CIDR (for example 10.88.0.0/16)")
		}
		if reason := podCIDRReason(p); reason != "" {
			return fail("podCIDR", k.PodCIDR, reason)
		}
	}
	driverSet := k.CgroupDriver != ""
	if !driverSet {
		k.CgroupDriver = defaultCgroupDriver
	}
	if k.CgroupDriver != "cgroupfs" && k.CgroupDriver != "systemd" {
		return fail("cgroupDriver", k.CgroupDriver, "unknown driver; want cgroupfs or systemd")
	}
	if k.CgroupRoot == "" {
		k.CgroupRoot = defaultCgroupRoot
	}
	if !filepath.IsAbs(k.CgroupRoot) || filepath.Clean(k.CgroupRoot) != k.CgroupRoot {
		return fail("cgroupRoot", k.CgroupRoot, "must be a clean absolute cgroup path such as / or /nodekeeper")
	}
	if k.CgroupsPerQOS == nil {
		k.CgroupsPerQOS = new(true)
	}
	if _, set := raw["address"]; !set || k.Address == "" {
		k.Address = defaultAddress
	}
	if net.ParseIP(k.Address) == nil {
		return fail("address", k.Address, "not an IP address")
	}
	if _, set := raw["readOnlyPort"]; !set {
		k.ReadOnlyPort = defaultReadOnlyPort
	}
	if k.ReadOnlyPort < 0 || k.ReadOnlyPort > 65535 {
		return fail("readOnlyPort", strconv.Itoa(int(k.ReadOnlyPort)), "must be between 0 and 65535")
	}
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"syncFrequency", &k.SyncFrequency.Duration, defaultSyncFrequency},
		{"fileCheckFrequency", &k.FileCheckFrequency.Duration, defaultFileCheckFrequency},
		{"runtimeRequestTimeout", &k.RuntimeRequestTimeout.Duration, defaultRuntimeRequestTimeout},
	} {
		switch {
		case *d.v < 0:
			return fail(d.field, d.v.String(), "must not be negative")
		case *d.v == 0:
			*d.v = d.def
		}
	}
	if k.EnableProfilingHandler == nil {
		k.EnableProfilingHandler = new(true)
	}
	if k.HealthzBindAddress == "" {
		k.HealthzBindAddress = defaultHealthzBindAddress
	}
	if net.ParseIP(k.HealthzBindAddress) == nil {
		return fail("healthzBindAddress", k.HealthzBindAddress, "not an IP address")
	}
	if k.HealthzPort == nil {
		k.HealthzPort = new(int32(defaultHealthzPort))
	}
	if p := *k.HealthzPort; p < 0 || p > 65535 {
		return fail("healthzPort", strconv.Itoa(int(p)), "must be between 0 and 65535")
	}
	for i, p := range k.AllowedUnsafeSysctls {
		if err := nodeapi.ValidateUnsafeSysctl(p); err != nil {
			return fail(fmt.Sprintf("allowedUnsafeSysctls[%d]", i), p, "not a namespaced sysctl or pattern (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*)")
		}
	}
	if k.FailCgroupV1 == nil {
		k.FailCgroupV1 = new(true)
	}
	if k.FailSwapOn == nil {
		k.FailSwapOn = new(true)
	}
	switch k.MemorySwap.SwapBehavior {
	case "":
		k.MemorySwap.SwapBehavior = SwapNo
	case SwapNo, SwapLimited:
	default:
		return fail("memorySwap.swapBehavior", k.MemorySwap.SwapBehavior, `unknown behavior; want "", NoSwap or LimitedSwap`)
	}
	if err := resolveCrashLoopBackOff(name, k); err != nil {
		return Agent{}, err
	}
	var maxRestart time.Duration
	if p := k.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
		maxRestart = p.Duration
	}
	pulls, err := imagePulls(name, k)
	if err != nil {
		return Agent{}, err
	}
	return Agent{
		StaticPodPath:         k.StaticPodPath,
		RuntimeEndpoint:       k.ContainerRuntimeEndpoint,
		ImageServiceEndpoint:  k.ImageServiceEndpoint,
		PodCIDR:               k.PodCIDR,
		PodLogsDir:            k.PodLogsDir,
		Address:               k.Address,
		ReadOnlyPort:          k.ReadOnlyPort,
		CgroupDriver:          k.CgroupDriver,
		CgroupRoot:            k.CgroupRoot,
		CgroupsPerQOS:         *k.CgroupsPerQOS,
		CgroupDriverSet:       driverSet,
		SyncFrequency:         k.SyncFrequency.Duration,
		FileCheckFrequency:    k.FileCheckFrequency.Duration,
		RuntimeRequestTimeout: k.RuntimeRequestTimeout.Duration,
		FailCgroupV1:          *k.FailCgroupV1,
		FailSwapOn:            *k.FailSwapOn,
		SwapBehavior:          k.MemorySwap.SwapBehavior,
		SingleProcessOOMKill:  k.SingleProcessOOMKill,
		HealthzBindAddress:    k.HealthzBindAddress,
		HealthzPort:           *k.HealthzPort,
		SystemCgroups:         k.SystemCgroups,
		KubeletCgroups:        k.KubeletCgroups,
		FeatureGates:          k.FeatureGates,

		MaxContainerRestartPeriod: maxRestart,
		ReducedCrashLoopBackOff:   gateOn(k.FeatureGates, GateReduceCrashLoopBackOffDecay),
		ClusterDomain:             k.ClusterDomain,
		AllowedUnsafeSysctls:      k.AllowedUnsafeSysctls,
		MaxParallelImagePulls:     pulls,

		EnableProfilingHandler: *k.EnableProfilingHandler,
	}, nil
}

// resolveCrashLoopBackOff defaults and validates
// crashLoopBackOff.maxContainerRestartPeriod in place, as the kubelet does
// (defaults.go, validation.go): with the KubeletCrashLoopBackOffMax gate on it
// is 300s unless set, and must be between 1s and 300s (to the millisecond);
// with the gate off it must not be set.
func resolveCrashLoopBackOff(name string, k *kubeletv1beta1.KubeletConfiguration) error {
	const field = "crashLoopBackOff.maxContainerRestartPeriod"
	p := k.CrashLoopBackOff.MaxContainerRestartPeriod
	if !gateOn(k.FeatureGates, GateCrashLoopBackOffMax) {
		if p != nil {
			return fieldError(name, field, p.Duration.String(), "must not be set while the feature gate "+GateCrashLoopBackOffMax+" is off")
		}
		return nil
	}
	if p == nil {
		k.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: defaultMaxContainerRestartPeriod}
		return nil
	}
	if ms := p.Duration.Milliseconds(); ms < minMaxContainerRestartPeriod.Milliseconds() || ms > defaultMaxContainerRestartPeriod.Milliseconds() {
		return fieldError(name, field, p.Duration.String(), "must be between 1s and 300s")
	}
	return nil
}

// imagePulls defaults serializeImagePulls in k as the kubelet does (true
// unless maxParallelImagePulls is 2 or more), validates both fields as the
// kubelet does and returns how many pulls may run at once (0: no bound).
func imagePulls(name string, k *kubeletv1beta1.KubeletConfiguration) (int32, error) {
	maxPulls := k.MaxParallelImagePulls
	if k.SerializeImagePulls == nil {
		k.SerializeImagePulls = new(maxPulls == nil || *maxPulls < 2)
	}
	switch {
	case maxPulls != nil && *maxPulls < 1:
		return 0, fieldError(name, "maxParallelImagePulls", strconv.Itoa(int(*maxPulls)), "must be a positive number")
	case *k.SerializeImagePulls && maxPulls != nil && *maxPulls > 1:
		return 0, fieldError(name, "maxParallelImagePulls", strconv.Itoa(int(*maxPulls)),
			"cannot be larger than 1 unless serializeImagePulls is set to false")
	case *k.SerializeImagePulls:
		return 1, nil
	case maxPulls == nil:
		return 0, nil
	}
	return *maxPulls, nil
}

// RunnableErr returns why `nodekeeper run` cannot run with these settings on
// this host, or nil: the systemd cgroup driver needs systemd as the init
// system. Explain and simulate read such files; only the agent refuses them.
func (a Agent) RunnableErr(file string) error { return a.runnableErr(file, cgroups.SystemdBootedDir) }

// runnableErr is RunnableErr with systemd's booted directory (sd_booted(3))
// at systemdBooted.
func (a Agent) runnableErr(file, systemdBooted string) error {
	if a.CgroupDriver == "systemd" {
		if _, err := os.Stat(systemdBooted); err != nil {
			return fieldError(file, "cgroupDriver", a.CgroupDriver,
				fmt.Sprintf("systemd is not the init system of this host (no %s); use cgroupfs", systemdBooted))
		}
		for _, e := range strings.Split(a.CgroupRoot, "/") {
			if strings.HasSuffix(e, ".slice") {
				return fieldError(file, "cgroupRoot", a.CgroupRoot,
					fmt.Sprintf("with cgroupDriver systemd, name the cgroup without .slice, as the kubelet does (/%s is the slice %s)", strings.TrimSuffix(e, ".slice"), e))
			}
		}
	}
	switch {
	case !a.CgroupsPerQOS:
		return fieldError(file, "cgroupsPerQOS", "false", "not supported by nodekeeper run: pods always get QoS cgroups")
	case a.ImageServiceEndpoint != "" && a.ImageServiceEndpoint != a.RuntimeEndpoint:
		return fieldError(file, "imageServiceEndpoint", a.ImageServiceEndpoint,
			fmt.Sprintf("nodekeeper run pulls images through the runtime endpoint (%q): leave it empty or the same", a.RuntimeEndpoint))
	}
	return nil
}

// RuntimeDriver returns the cgroup driver `nodekeeper run` uses when the
// container runtime at endpoint reports that it uses runtimeDriver
// ("cgroupfs" or "systemd"; CRI RuntimeConfig): runtimeDriver when
// cgroupDriver is unset, as the kubelet takes it (KubeletCgroupDriverFromCRI),
// and the configured one when it is set to the same. Set to another, the
// runtime and the agent would place pods' cgroups apart: the error names
// file, cgroupDriver, its value and the runtime's driver; it is of class
// ErrInvalid. The kubelet takes the runtime's driver there too
// (docs/differences.md).
func (a Agent) RuntimeDriver(file, endpoint, runtimeDriver string) (string, error) {
	switch {
	case runtimeDriver == a.CgroupDriver:
		return a.CgroupDriver, nil
	case !a.CgroupDriverSet:
		return runtimeDriver, nil
	}
	return "", fieldError(file, "cgroupDriver", a.CgroupDriver, fmt.Sprintf(
		"the container runtime at %s uses the %s cgroup driver: set cgroupDriver: %s (or leave it unset to take the runtime's), "+
			"or configure the runtime for %s (containerd: SystemdCgroup = %s in the runc options)",
		endpoint, runtimeDriver, runtimeDriver, a.CgroupDriver, strconv.FormatBool(a.CgroupDriver == "systemd")))
}

// Host is what the machine has that HostErr checks the settings against.
type Host struct {
	// CgroupV2 is true when /sys/fs/cgroup is a cgroup2 mount (unified),
	// false on cgroup v1 or hybrid.
	CgroupV2 bool
	// Swaps is the content of /proc/swaps ("" when it is missing): swap is
	// on when it lists a device or file below its header line.
	Swaps string
}

// SwapOn reports whether h's /proc/swaps lists a swap device or file, the
// kubelet's test (more than the header line), and the first one listed.
func (h Host) SwapOn() (on bool, first string) {
	lines := strings.Split(strings.TrimSpace(h.Swaps), "\n")
	if len(lines) < 2 {
		return false, ""
	}
	f := strings.Fields(lines[1])
	if len(f) == 0 {
		return true, lines[1]
	}
	return true, f[0]
}

// HostErr returns why `nodekeeper run` refuses to start on host with these
// settings, as the kubelet refuses at start, or nil: failCgroupV1 on cgroup
// v1, failSwapOn while swap is on, memorySwap.swapBehavior LimitedSwap on
// cgroup v1, singleProcessOOMKill: false on cgroup v1. The error names file, the field, its value and what the machine
// has; it is of class ErrInvalid.
func (a Agent) HostErr(file string, h Host) error {
	switch on, first := h.SwapOn(); {
	case a.FailCgroupV1 && !h.CgroupV2:
		return fieldError(file, "failCgroupV1", "true",
			"this host uses cgroup v1 (/sys/fs/cgroup is not a cgroup2 mount), which the kubelet refuses by default since 1.35: "+
				"cgroup v1 support is unsupported and will be removed in a future release; set failCgroupV1: false to run on it")
	case a.SwapBehavior == SwapLimited && !h.CgroupV2:
		return fieldError(file, "memorySwap.swapBehavior", SwapLimited,
			"this host uses cgroup v1 (/sys/fs/cgroup is not a cgroup2 mount); LimitedSwap needs cgroup v2 (use NoSwap or leave it unset)")
	case a.SingleProcessOOMKill != nil && !*a.SingleProcessOOMKill && !h.CgroupV2:
		return fieldError(file, "singleProcessOOMKill", "false",
			"this host uses cgroup v1 (/sys/fs/cgroup is not a cgroup2 mount), which kills single processes only: the kubelet refuses false there; leave it unset or true")
	case a.FailSwapOn && on:
		return fieldError(file, "failSwapOn", "true",
			fmt.Sprintf("swap is on (/proc/swaps lists %s): running with swap on is not supported; turn swap off or set failSwapOn: false", first))
	}
	return nil
}
