package containerd

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/utils/clock"
)

// DefaultPodCIDR is the pod network when Config.PodCIDR is empty. It is none
// of the defaults of the tools commonly found on the same machine: docker
// (172.17.0.0/16 and up), podman and containerd's example CNI config
// (10.88.0.0/16, podman's further networks 10.89.0.0/16 and up), CRI-O
// (10.85.0.0/16), k3s (10.42.0.0/16 pods, 10.43.0.0/16 services),
// kubeadm/flannel/kind/minikube (10.244.0.0/16, services 10.96.0.0/12), weave
// (10.32.0.0/12), microk8s (10.1.0.0/16) and calico (192.168.0.0/16).
const DefaultPodCIDR = "10.58.0.0/16"

// DefaultBridge is the CNI bridge's name when Config.CNIBridge is empty.
const DefaultBridge = "nk0"

// DefaultCNIBinDirs are the directories searched for CNI plugins when
// Config.CNIBinDirs is empty: Debian's containernetworking-plugins package,
// then the upstream release's location.
var DefaultCNIBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Snapshotter names.
const (
	Overlayfs = "overlayfs"
	Native    = "native"
)

// Namespace is the containerd namespace the CRI plugin uses.
const Namespace = "k8s.io"

// maxSocketPath is the longest path a unix socket address holds (sun_path is
// 108 bytes with the terminating NUL).
const maxSocketPath = 107

// Config describes the containerd that Managed runs. Zero fields take the
// defaults named on each; New resolves them (Managed.Config returns the result).
type Config struct {
	// StateDir holds everything: config.toml, root/, state/, runc/ (runc's
	// state), containerd.sock (and .ttrpc), containerd.log, cni/ (conf dir,
	// IPAM state). Required; made
	// absolute. Its socket path must fit in 107 bytes.
	StateDir string
	// Binary is the containerd executable; "" looks "containerd" up in PATH.
	// ctr is taken from the same directory (else PATH), and that directory is
	// put first in the child's PATH so containerd finds the shim next to it.
	Binary string
	// SandboxImage is the CRI plugin's sandbox_image (the pause image); required:
	// there is no registry to pull containerd's default from, so it must be an
	// image the caller imports.
	SandboxImage string
	// PodCIDR is the pod network host-local allocates from (DefaultPodCIDR if "").
	PodCIDR string
	// CNIBridge is the bridge's name (DefaultBridge if ""). The bridge is a
	// host-wide object: two agents on one machine need two names.
	CNIBridge string
	// CNIBinDirs are searched for CNI plugins (DefaultCNIBinDirs if empty); only
	// those that exist are used. containerd 1.6 takes one bin_dir: with several,
	// Run links their plugins into <StateDir>/cni/bin, earlier dirs first.
	CNIBinDirs []string
	// CNIConfDir is the CNI config dir (<StateDir>/cni/net.d if ""). Run writes
	// the bridge conflist there when it holds no *.conf/*.conflist/*.json.
	CNIConfDir string
	// RestrictOOMScoreAdj sets the CRI plugin's restrict_oom_score_adj; nil
	// detects it: true only when this process may not lower its oom_score_adj.
	RestrictOOMScoreAdj *bool
	// Snapshotter is the CRI plugin's snapshotter and the one images are
	// unpacked for; "" detects it: Overlayfs when an overlay mount works in
	// StateDir's filesystem, else Native.
	Snapshotter string
	// Place, when set, is called with the pid of each containerd Run starts,
	// before it serves, to move it into a cgroup of its own (the agent's
	// runtime cgroup); the shims it starts inherit that cgroup. An error is
	// logged and containerd runs on where it was started.
	Place func(pid int) error
	// SystemdCgroup sets runc's SystemdCgroup option: runc has systemd make
	// each container's cgroup, a scope (cri-containerd-<ID>.scope) in the
	// slice the sandbox's cgroupParent names. It must match the agent's
	// cgroupDriver (true for "systemd"), as the kubelet's must match the
	// runtime's.
	SystemdCgroup bool
	// CDISpecDirs, when not empty, turns on the CRI plugin's CDI support
	// (enable_cdi) with these directories of CDI specs (cdi_spec_dirs): a
	// container's CDI devices (CRI ContainerConfig.CDIDevices, the names a
	// device plugin's Allocate answers with) are then looked up in the specs
	// there, read when the container is created, and their edits (env,
	// device nodes, mounts, hooks) applied to it. containerd 1.7 or newer:
	// 1.6 has no CDI and ignores both keys. Each must be an absolute path;
	// a missing one holds no spec. Empty: CDI stays off and the config is
	// the same as without the field.
	CDISpecDirs []string
	// DieWithParent starts containerd with Pdeathsig SIGKILL, so that it dies
	// with this process: for test harnesses, which must leave nothing
	// behind. The agent leaves it false: containerd then outlives the agent,
	// and the next agent's Run adopts it.
	DieWithParent bool
	// RegistryMirrors sends the CRI plugin's pulls of a registry's images to
	// a mirror: the key is the registry's host as image references name it
	// ("registry.k8s.io", "docker.io", "localhost:5000"), the value the
	// mirror's base URL ("http://127.0.0.1:5000"; plain HTTP with http). The
	// mirror replaces the registry: a pull never reaches the registry itself,
	// so an image the mirror lacks fails at once. Run writes one
	// <StateDir>/certs.d/<registry>/hosts.toml per entry and points the CRI
	// plugin's registry config_path there (containerd 1.6 and 1.7 read it on
	// each pull); empty leaves containerd's registry settings as they are
	// (pulls go to each registry itself) and the config without a registry
	// section. Pushes (ctr push) are not redirected.
	RegistryMirrors map[string]string
	// Logger receives the supervisor's logs (nil: discarded).
	Logger *slog.Logger
	// Clock times the restart back-off (nil: the real clock). It is
	// injected because a test must step the back-off while Run starts and
	// waits for real processes, which a synctest bubble cannot hold (a
	// goroutine in a system call is never durably blocked); the delay itself
	// is decided with the run's length as data (nextBackoff).
	Clock clock.WithTicker
}

// resolve validates cfg and fills in what New can: every default and the
// oom_score_adj detection. The snapshotter is detected by Run (it mounts).
func resolve(cfg Config, canLowerOOM func() bool) (Config, error) {
	if cfg.StateDir == "" {
		return cfg, errors.New("containerd: stateDir is empty")
	}
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return cfg, fmt.Errorf("containerd: stateDir %q: %w", cfg.StateDir, err)
	}
	cfg.StateDir = dir
	if s := ttrpcSocket(cfg.StateDir); len(s) > maxSocketPath {
		return cfg, fmt.Errorf("containerd: stateDir %q: the socket path %q is %d bytes, longer than the %d a unix socket allows",
			cfg.StateDir, s, len(s), maxSocketPath)
	}
	if cfg.Binary == "" {
		bin, err := exec.LookPath("containerd")
		if err != nil {
			return cfg, errors.New("containerd not found on PATH; install the containerd and runc packages or set containerRuntimeEndpoint")
		}
		cfg.Binary = bin
	} else if st, err := os.Stat(cfg.Binary); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return cfg, fmt.Errorf("containerd binary %q is not an executable file; install the containerd and runc packages or set containerRuntimeEndpoint", cfg.Binary)
	}
	if cfg.Binary, err = filepath.Abs(cfg.Binary); err != nil {
		return cfg, err
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return cfg, errors.New("runc not found on PATH; install the containerd and runc packages or set containerRuntimeEndpoint")
	}
	if cfg.SandboxImage == "" {
		return cfg, errors.New("containerd: sandboxImage is empty")
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	if _, err := ParsePodCIDR(cfg.PodCIDR); err != nil {
		return cfg, err
	}
	if cfg.CNIBridge == "" {
		cfg.CNIBridge = DefaultBridge
	}
	if err := validBridge(cfg.CNIBridge); err != nil {
		return cfg, err
	}
	if len(cfg.CNIBinDirs) == 0 {
		cfg.CNIBinDirs = DefaultCNIBinDirs
	}
	cfg.CNIBinDirs = existingDirs(cfg.CNIBinDirs)
	if cfg.CNIConfDir == "" {
		cfg.CNIConfDir = filepath.Join(cfg.StateDir, "cni", "net.d")
	}
	if cfg.RestrictOOMScoreAdj == nil {
		restrict := !canLowerOOM()
		cfg.RestrictOOMScoreAdj = &restrict
	}
	switch cfg.Snapshotter {
	case "", Overlayfs, Native:
	default:
		return cfg, fmt.Errorf("containerd: snapshotter %q: want %q or %q", cfg.Snapshotter, Overlayfs, Native)
	}
	for _, d := range cfg.CDISpecDirs {
		if !filepath.IsAbs(d) {
			return cfg, fmt.Errorf("containerd: cdiSpecDirs %q: not an absolute path", d)
		}
	}
	if err := validMirrors(cfg.RegistryMirrors); err != nil {
		return cfg, err
	}
	cfg.RegistryMirrors = maps.Clone(cfg.RegistryMirrors) // the caller's map may change
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return cfg, nil
}

// validBridge checks a Linux interface name: 1 to 15 bytes, no '/', no
// whitespace, not "." or "..".
func validBridge(name string) error {
	if len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n") {
		return fmt.Errorf("containerd: cniBridge %q: not a valid interface name (at most 15 bytes, no '/', ':' or spaces)", name)
	}
	return nil
}

// ParsePodCIDR parses a pod CIDR: an IPv4 network in canonical form (no host
// bits set) with a prefix of /8 to /28, room for pods and a gateway. The error
// names the field podCIDR and the value.
func ParsePodCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("podCIDR %q: not a CIDR (want e.g. %s)", s, DefaultPodCIDR)
	}
	switch {
	case !p.Addr().Is4():
		return p, fmt.Errorf("podCIDR %q: only IPv4 pod networks are supported", s)
	case p.Masked() != p:
		return p, fmt.Errorf("podCIDR %q: host bits set (did you mean %s?)", s, p.Masked())
	case p.Bits() < 8 || p.Bits() > 28:
		return p, fmt.Errorf("podCIDR %q: prefix /%d out of range /8../28", s, p.Bits())
	}
	return p, nil
}

// existingDirs returns the dirs that exist, in order, without duplicates.
func existingDirs(dirs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func socketPath(stateDir string) string  { return filepath.Join(stateDir, "containerd.sock") }
func ttrpcSocket(stateDir string) string { return socketPath(stateDir) + ".ttrpc" }

// canLowerOOMScoreAdj reports whether this process may lower its oom_score_adj
// (containers with negative scores need it): it writes its current value minus
// one through write and, on success, restores the value.
func canLowerOOMScoreAdj(read func() ([]byte, error), write func([]byte) error) bool {
	b, err := read()
	if err != nil {
		return false
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || cur <= -1000 {
		return false
	}
	if err := write([]byte(strconv.Itoa(cur - 1))); err != nil {
		return false
	}
	_ = write([]byte(strconv.Itoa(cur)))
	return true
}

// CanLowerOOMScoreAdj reports whether this process may lower its own
// oom_score_adj (/proc/self/oom_score_adj); it leaves the value as it found it.
func CanLowerOOMScoreAdj() bool {
	const path = "/proc/self/oom_score_adj"
	return canLowerOOMScoreAdj(
		func() ([]byte, error) { return os.ReadFile(path) },
		func(b []byte) error { return os.WriteFile(path, b, 0o644) })
}

// configTOML renders containerd's config (version 2: containerd 1.6 and 1.7)
// for the resolved cfg; binDir is the CNI bin_dir. With RegistryMirrors it
// ends with the CRI plugin's registry section naming registryHostsDir.
func configTOML(cfg Config, binDir string) string {
	cdi := ""
	if len(cfg.CDISpecDirs) > 0 {
		dirs := make([]string, len(cfg.CDISpecDirs))
		for i, d := range cfg.CDISpecDirs {
			dirs[i] = strconv.Quote(d)
		}
		cdi = "  enable_cdi = true\n  cdi_spec_dirs = [" + strings.Join(dirs, ", ") + "]\n"
	}
	registry := ""
	if len(cfg.RegistryMirrors) > 0 {
		registry = fmt.Sprintf(`
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = %q
`, registryHostsDir(cfg.StateDir))
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = %t
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
%s
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = %q
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = %t
  Root = %q

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %q
  conf_dir = %q
`, filepath.Join(cfg.StateDir, "root"), filepath.Join(cfg.StateDir, "state"),
		socketPath(cfg.StateDir), ttrpcSocket(cfg.StateDir), filepath.Join(cfg.StateDir, "opt"),
		cfg.SandboxImage, *cfg.RestrictOOMScoreAdj, cdi, cfg.Snapshotter, cfg.SystemdCgroup, filepath.Join(cfg.StateDir, "runc"), binDir, cfg.CNIConfDir) + registry
}
