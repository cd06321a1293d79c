package containerd

import (
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -rewrite.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

// executable writes an executable file named name into dir.
func executable(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolve(t *testing.T) {
	// PATH holds a fake containerd and runc (or not); not parallel: Setenv.
	bin := t.TempDir()
	containerd := executable(t, bin, "containerd")
	executable(t, bin, "runc")
	noRunc := t.TempDir()
	executable(t, noRunc, "containerd")
	cniA, cniB := t.TempDir(), t.TempDir()
	yes := true
	long := "/tmp/" + strings.Repeat("d", 100)
	base := Config{StateDir: "/tmp/nk-state", SandboxImage: "docker.io/nodekeeper/pause:1"}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }

	tests := []struct {
		name    string
		path    string
		cfg     Config
		canLow  bool
		want    Config
		wantErr string
	}{{
		name: "defaults", path: bin, cfg: with(func(c *Config) { c.CNIBinDirs = []string{cniA, "/nonexistent", cniB, cniA} }),
		canLow: true,
		want: with(func(c *Config) {
			c.Binary, c.PodCIDR, c.CNIBridge = containerd, DefaultPodCIDR, DefaultBridge
			c.CNIBinDirs, c.CNIConfDir = []string{cniA, cniB}, "/tmp/nk-state/cni/net.d"
			no := false
			c.RestrictOOMScoreAdj = &no
		}),
	}, {
		name: "relative CDI spec dir", path: bin, cfg: with(func(c *Config) { c.CDISpecDirs = []string{"/etc/cdi", "run/cdi"} }),
		wantErr: `containerd: cdiSpecDirs "run/cdi": not an absolute path`,
	}, {
		name: "restricted when negative scores are refused", path: bin, cfg: base, canLow: false,
		want: with(func(c *Config) {
			c.Binary, c.PodCIDR, c.CNIBridge = containerd, DefaultPodCIDR, DefaultBridge
			c.CNIBinDirs, c.CNIConfDir = existingDirs(DefaultCNIBinDirs), "/tmp/nk-state/cni/net.d"
			c.RestrictOOMScoreAdj = &yes
		}),
	}, {
		name: "explicit settings kept", path: bin,
		cfg: with(func(c *Config) {
			c.Binary, c.PodCIDR, c.CNIBridge, c.CNIConfDir = containerd, "10.1.2.0/24", "nkt0", "/etc/cni/net.d"
			c.CNIBinDirs, c.RestrictOOMScoreAdj, c.Snapshotter = []string{cniB}, &yes, Native
		}),
		canLow: true,
		want: with(func(c *Config) {
			c.Binary, c.PodCIDR, c.CNIBridge, c.CNIConfDir = containerd, "10.1.2.0/24", "nkt0", "/etc/cni/net.d"
			c.CNIBinDirs, c.RestrictOOMScoreAdj, c.Snapshotter = []string{cniB}, &yes, Native
		}),
	}, {
		name: "no containerd on PATH", path: t.TempDir(), cfg: base,
		wantErr: "containerd not found on PATH; install the containerd and runc packages or set containerRuntimeEndpoint",
	}, {
		name: "no runc on PATH", path: noRunc, cfg: base,
		wantErr: "runc not found on PATH; install the containerd and runc packages or set containerRuntimeEndpoint",
	}, {
		name: "binary not executable", path: bin, cfg: with(func(c *Config) { c.Binary = "/nonexistent/containerd" }),
		wantErr: `containerd binary "/nonexistent/containerd" is not an executable file; install the containerd and runc packages or set containerRuntimeEndpoint`,
	}, {
		name: "no state dir", path: bin, cfg: with(func(c *Config) { c.StateDir = "" }),
		wantErr: "containerd: stateDir is empty",
	}, {
		name: "socket path too long", path: bin, cfg: with(func(c *Config) { c.StateDir = long }),
		wantErr: `containerd: stateDir "` + long + `": the socket path "` + long + `/containerd.sock.ttrpc" is 127 bytes, longer than the 107 a unix socket allows`,
	}, {
		name: "no sandbox image", path: bin, cfg: with(func(c *Config) { c.SandboxImage = "" }),
		wantErr: "containerd: sandboxImage is empty",
	}, {
		name: "bad pod CIDR", path: bin, cfg: with(func(c *Config) { c.PodCIDR = "10.0.0.1/16" }),
		wantErr: `podCIDR "10.0.0.1/16": host bits set (did you mean 10.0.0.0/16?)`,
	}, {
		name: "bad bridge", path: bin, cfg: with(func(c *Config) { c.CNIBridge = "a-name-longer-than-15" }),
		wantErr: `containerd: cniBridge "a-name-longer-than-15": not a valid interface name (at most 15 bytes, no '/', ':' or spaces)`,
	}, {
		name: "registry mirrors kept", path: bin,
		cfg: with(func(c *Config) {
			c.RegistryMirrors = map[string]string{"registry.k8s.io": "http://127.0.0.1:5000", "localhost:5001": "https://mirror.example/v2"}
		}),
		canLow: true,
		want: with(func(c *Config) {
			c.Binary, c.PodCIDR, c.CNIBridge = containerd, DefaultPodCIDR, DefaultBridge
			c.CNIBinDirs, c.CNIConfDir = existingDirs(DefaultCNIBinDirs), "/tmp/nk-state/cni/net.d"
			no := false
			c.RestrictOOMScoreAdj = &no
			c.RegistryMirrors = map[string]string{"registry.k8s.io": "http://127.0.0.1:5000", "localhost:5001": "https://mirror.example/v2"}
		}),
	}, {
		name: "registry mirror of a path", path: bin,
		cfg:     with(func(c *Config) { c.RegistryMirrors = map[string]string{"registry.k8s.io/e2e": "http://127.0.0.1:5000"} }),
		wantErr: `containerd: registryMirrors: registry "registry.k8s.io/e2e": want a host as an image reference names it, e.g. registry.k8s.io or localhost:5000`,
	}, {
		name: "registry mirror without a scheme", path: bin,
		cfg:     with(func(c *Config) { c.RegistryMirrors = map[string]string{"docker.io": "127.0.0.1:5000"} }),
		wantErr: `containerd: registryMirrors["docker.io"]: mirror "127.0.0.1:5000": want an http or https URL such as http://127.0.0.1:5000`,
	}, {
		name: "bad snapshotter", path: bin, cfg: with(func(c *Config) { c.Snapshotter = "zfs" }),
		wantErr: `containerd: snapshotter "zfs": want "overlayfs" or "native"`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			got, err := resolve(tc.cfg, func() bool { return tc.canLow })
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Logger == nil || got.Clock == nil {
				t.Error("Logger and Clock must be defaulted")
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Config{}, "Logger", "Clock")); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePodCIDR(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, wantErr string }{
		{in: "10.58.0.0/16"},
		{in: "192.168.7.0/24"},
		{in: "10.0.0.0/8"},
		{in: "10.0.0.0/28"},
		{in: "10.58.0.0", wantErr: `podCIDR "10.58.0.0": not a CIDR (want e.g. 10.58.0.0/16)`},
		{in: "fd00::/64", wantErr: `podCIDR "fd00::/64": only IPv4 pod networks are supported`},
		{in: "10.58.1.0/16", wantErr: `podCIDR "10.58.1.0/16": host bits set (did you mean 10.58.0.0/16?)`},
		{in: "10.0.0.0/30", wantErr: `podCIDR "10.0.0.0/30": prefix /30 out of range /8../28`},
		{in: "0.0.0.0/0", wantErr: `podCIDR "0.0.0.0/0": prefix /0 out of range /8../28`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePodCIDR(tc.in)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("ParsePodCIDR(%q) error = %q, want %q", tc.in, got, tc.wantErr)
			}
		})
	}
}

func TestCanLowerOOMScoreAdj(t *testing.T) {
	t.Parallel()
	refused := errors.New("permission denied")
	tests := []struct {
		name      string
		value     string
		readErr   error
		refuse    func(string) bool // which writes fail
		want      bool
		wantFinal string // the value left behind
	}{
		{name: "lowering allowed", value: "0", want: true, wantFinal: "0"},
		{name: "lowering allowed from a positive score", value: "500\n", want: true, wantFinal: "500"},
		{name: "negative refused", value: "0", refuse: func(v string) bool { return v == "-1" }, wantFinal: "0"},
		{name: "already at the minimum", value: "-1000", wantFinal: "-1000"},
		{name: "unreadable", readErr: os.ErrNotExist},
		{name: "garbage", value: "x", wantFinal: "x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			val := tc.value
			read := func() ([]byte, error) { return []byte(val), tc.readErr }
			write := func(b []byte) error {
				if tc.refuse != nil && tc.refuse(string(b)) {
					return refused
				}
				val = string(b)
				return nil
			}
			if got := canLowerOOMScoreAdj(read, write); got != tc.want {
				t.Errorf("canLowerOOMScoreAdj = %v, want %v", got, tc.want)
			}
			if strings.TrimSpace(val) != tc.wantFinal {
				t.Errorf("oom_score_adj left at %q, want %q", val, tc.wantFinal)
			}
		})
	}
}

func TestNextBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		prev, ranFor time.Duration
		want         time.Duration
	}{
		{name: "first restart", prev: 0, ranFor: time.Second, want: time.Second},
		{name: "doubles", prev: time.Second, ranFor: 5 * time.Second, want: 2 * time.Second},
		{name: "doubles again", prev: 8 * time.Second, ranFor: 0, want: 16 * time.Second},
		{name: "capped", prev: 16 * time.Second, ranFor: 59 * time.Second, want: 30 * time.Second},
		{name: "stays capped", prev: 30 * time.Second, ranFor: 0, want: 30 * time.Second},
		{name: "reset after a minute running", prev: 30 * time.Second, ranFor: time.Minute, want: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := nextBackoff(tc.prev, tc.ranFor); got != tc.want {
				t.Errorf("nextBackoff(%v, %v) = %v, want %v", tc.prev, tc.ranFor, got, tc.want)
			}
		})
	}
}

func TestConfigTOML(t *testing.T) {
	t.Parallel()
	yes := true
	cfg := Config{
		StateDir: "/var/lib/nodekeeper/containerd", SandboxImage: "docker.io/nodekeeper/pause:1",
		PodCIDR: DefaultPodCIDR, CNIConfDir: "/var/lib/nodekeeper/containerd/cni/net.d",
		RestrictOOMScoreAdj: &yes, Snapshotter: Overlayfs,
	}
	golden(t, "config.toml", configTOML(cfg, "/usr/lib/cni"))
	// The systemd cgroup driver differs in runc's SystemdCgroup only.
	cfg.SystemdCgroup = true
	systemd := configTOML(cfg, "/usr/lib/cni")
	want := strings.Replace(configTOML(Config{
		StateDir: cfg.StateDir, SandboxImage: cfg.SandboxImage, PodCIDR: cfg.PodCIDR, CNIConfDir: cfg.CNIConfDir,
		RestrictOOMScoreAdj: &yes, Snapshotter: Overlayfs,
	}, "/usr/lib/cni"), "SystemdCgroup = false", "SystemdCgroup = true", 1)
	if diff := cmp.Diff(want, systemd); diff != "" || !strings.Contains(systemd, "\n  SystemdCgroup = true\n") {
		t.Errorf("config.toml with SystemdCgroup (-want +got):\n%s", diff)
	}
}

// TestConfigTOMLRegistryMirrors: mirrors add the CRI plugin's registry
// config_path and change nothing else; without them there is no registry
// section (the golden config.toml above).
func TestConfigTOMLRegistryMirrors(t *testing.T) {
	t.Parallel()
	yes := true
	cfg := Config{
		StateDir: "/var/lib/nodekeeper/containerd", SandboxImage: "docker.io/nodekeeper/pause:1",
		PodCIDR: DefaultPodCIDR, CNIConfDir: "/var/lib/nodekeeper/containerd/cni/net.d",
		RestrictOOMScoreAdj: &yes, Snapshotter: Overlayfs,
	}
	plain := configTOML(cfg, "/usr/lib/cni")
	if strings.Contains(plain, "registry") {
		t.Errorf("config.toml without mirrors has a registry setting:\n%s", plain)
	}
	cfg.RegistryMirrors = map[string]string{"registry.k8s.io": "http://127.0.0.1:5000"}
	want := plain + `
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/var/lib/nodekeeper/containerd/certs.d"
`
	if diff := cmp.Diff(want, configTOML(cfg, "/usr/lib/cni")); diff != "" {
		t.Errorf("config.toml with mirrors (-want +got):\n%s", diff)
	}
}

// TestWriteRegistryHosts: one hosts.toml per mirrored registry, the mirror
// as both host and server (no fallback to the registry); a registry dropped
// from the config loses its directory, and no mirrors leave none.
func TestWriteRegistryHosts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs.d")
	list := func() map[string]string {
		t.Helper()
		got := map[string]string{}
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			got[rel] = string(b)
			return err
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return got
	}
	if err := writeRegistryHosts(dir, map[string]string{"registry.k8s.io": "http://127.0.0.1:5000", "docker.io": "http://127.0.0.1:5000"}); err != nil {
		t.Fatal(err)
	}
	got := list()
	golden(t, "hosts.toml", got["registry.k8s.io/hosts.toml"])
	if diff := cmp.Diff([]string{"docker.io/hosts.toml", "registry.k8s.io/hosts.toml"}, slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if !strings.Contains(got["docker.io/hosts.toml"], `server = "http://127.0.0.1:5000"`) {
		t.Errorf("docker.io/hosts.toml:\n%s", got["docker.io/hosts.toml"])
	}
	if err := writeRegistryHosts(dir, map[string]string{"gcr.io": "http://127.0.0.1:6000"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gcr.io/hosts.toml"}, slices.Sorted(maps.Keys(list()))); diff != "" {
		t.Errorf("files after a change (-want +got):\n%s", diff)
	}
	if err := writeRegistryHosts(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after mirrors were dropped: %v, want it gone", dir, err)
	}
}

func TestDetectSnapshotterFake(t *testing.T) {
	t.Parallel()
	refused := errors.New("invalid argument")
	tests := []struct {
		name      string
		mountErr  error
		want      string
		wantErr   bool
		wantUnmnt int
	}{
		{name: "overlay mounts", want: Overlayfs, wantUnmnt: 1},
		{name: "overlay refused", mountErr: refused, want: Native, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var gotData string
			unmounts := 0
			mount := func(source, target, fstype string, flags uintptr, data string) error {
				if source != "overlay" || fstype != "overlay" || !strings.HasPrefix(target, dir+"/overlay-check-") {
					t.Errorf("mount(%q, %q, %q)", source, target, fstype)
				}
				gotData = data
				return tc.mountErr
			}
			unmount := func(string, int) error { unmounts++; return nil }
			got, err := detectSnapshotter(dir, mount, unmount)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("detectSnapshotter = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
			if unmounts != tc.wantUnmnt {
				t.Errorf("%d unmounts, want %d", unmounts, tc.wantUnmnt)
			}
			if !strings.Contains(gotData, "lowerdir="+dir) || !strings.Contains(gotData, ",upperdir=") || !strings.Contains(gotData, ",workdir=") {
				t.Errorf("mount data = %q", gotData)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("trial directories left behind: %v", entries)
			}
		})
	}
}

// TestDetectSnapshotterReal mounts for real: overlay works on a directory of
// the root filesystem, and not on one inside an overlay mount (overlayfs
// cannot be an upper layer).
func TestDetectSnapshotterReal(t *testing.T) {
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting needs root")
	}
	dir, err := os.MkdirTemp("/tmp", "nk-ovl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	got, err := detectSnapshotter(dir, syscall.Mount, syscall.Unmount)
	if got != Overlayfs {
		t.Fatalf("on %s: snapshotter %q (%v), want %q", dir, got, err, Overlayfs)
	}

	// An overlay mount, then the check inside it.
	for _, d := range []string{"l", "u", "w", "m"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(dir, "m")
	opts := "lowerdir=" + filepath.Join(dir, "l") + ",upperdir=" + filepath.Join(dir, "u") + ",workdir=" + filepath.Join(dir, "w")
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(merged, syscall.MNT_DETACH) }) // before RemoveAll (LIFO)
	got, err = detectSnapshotter(merged, syscall.Mount, syscall.Unmount)
	if got != Native || err == nil {
		t.Fatalf("inside an overlay: snapshotter %q (%v), want %q and the reason", got, err, Native)
	}
	t.Logf("native because: %v", err)
	if entries, _ := os.ReadDir(merged); len(entries) != 0 {
		t.Errorf("trial directories left behind: %v", entries)
	}
}

// TestConfigTOMLCDI: CDISpecDirs turns CDI on in the CRI plugin's section
// with exactly those directories, and adds nothing else; without it the
// config has no CDI key (the golden config.toml above).
func TestConfigTOMLCDI(t *testing.T) {
	t.Parallel()
	yes := true
	cfg := Config{
		StateDir: "/var/lib/nodekeeper/containerd", SandboxImage: "docker.io/nodekeeper/pause:1",
		PodCIDR: DefaultPodCIDR, CNIConfDir: "/var/lib/nodekeeper/containerd/cni/net.d",
		RestrictOOMScoreAdj: &yes, Snapshotter: Overlayfs,
	}
	plain := configTOML(cfg, "/usr/lib/cni")
	if strings.Contains(plain, "cdi") {
		t.Errorf("config.toml without CDISpecDirs mentions CDI:\n%s", plain)
	}
	cfg.CDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}
	got := configTOML(cfg, "/usr/lib/cni")
	want := strings.Replace(plain, "  enable_selinux = false\n",
		"  enable_selinux = false\n  enable_cdi = true\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n", 1)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config.toml with CDISpecDirs (-want +got):\n%s", diff)
	}
	// The keys belong to the CRI plugin's own table, not a sub-table.
	section := got[strings.Index(got, "[plugins.\"io.containerd.grpc.v1.cri\"]\n"):]
	section = section[:strings.Index(section, "\n[")]
	if !strings.Contains(section, "\n  enable_cdi = true\n") {
		t.Errorf("enable_cdi is not in the CRI plugin's table:\n%s", section)
	}
}
