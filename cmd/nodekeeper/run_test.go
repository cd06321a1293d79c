package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestRunBadInput: configuration and flag errors end `run` before it starts
// anything, with exit 2 and one line naming the field or flag and the value.
func TestRunBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := filepath.Join(dir, "root")
	zeroDropIns := filepath.Join(dir, "zero.d")
	if err := os.MkdirAll(zeroDropIns, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(zeroDropIns, "10-zero.conf")); err != nil {
		t.Fatal(err)
	}
	big := write("big.yaml", "maxPods: 100\n"+strings.Repeat("# padding\n", 20))
	// The systemd driver without systemd as init; where systemd is init, a
	// cgroupRoot the driver refuses.
	systemd, systemdWant := write("systemd.yaml", "cgroupDriver: systemd\n"), []string{"systemd.yaml", "cgroupDriver", `"systemd"`, "not the init system"}
	if integration.SystemdBooted() {
		systemd, systemdWant = write("systemd.yaml", "cgroupDriver: systemd\ncgroupRoot: /nk.slice\n"), []string{"systemd.yaml", "cgroupRoot", `"/nk.slice"`}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"systemd driver", []string{"--config", systemd}, systemdWant},
		{"bad podCIDR", []string{"--config", write("cidr.yaml", "podCIDR: 10.1.2.3/40\n")}, []string{"cidr.yaml", "podCIDR", `"10.1.2.3/40"`}},
		{"unknown field", []string{"--config", write("unknown.yaml", "evictionHardd: {}\n")}, []string{"unknown.yaml", "evictionHardd"}},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml"}},
		{"unknown flag", []string{"--no-such-flag"}, []string{"--no-such-flag"}},
		{"bad verbosity", []string{"--v", "x"}, []string{"--v", `"x"`}},
		{"bad node IP", []string{"--node-ip", "10.1.2"}, []string{"--node-ip", `"10.1.2"`}},
		{"negative verbosity", []string{"--v", "-5"}, []string{"--v", `"-5"`, "negative"}},
		{"negative status interval", []string{"--status-interval", "-1s"}, []string{"--status-interval", `"-1s"`, "negative"}},
		{"lock contention without a lock file", []string{"--exit-on-lock-contention"}, []string{"--exit-on-lock-contention", "no --lock-file"}},
		{"loopback podCIDR", []string{"--config", write("loopback.yaml", "podCIDR: 127.0.0.0/8\n")}, []string{"loopback.yaml", `podCIDR: "127.0.0.0/8"`}},
		{"link-local podCIDR in a drop-in", []string{"--config-dir", dropInDir(t, filepath.Join(dir, "ll"), "podCIDR: 169.254.0.0/16\n")},
			[]string{"50-bad.conf", `podCIDR: "169.254.0.0/16"`}},
		{"readOnlyPort on healthzPort", []string{"--config", write("ports.yaml", "readOnlyPort: 10248\n")}, []string{"ports.yaml", `readOnlyPort: "10248"`, "healthzPort"}},
		{"missing kubeconfig", []string{"--kubeconfig", filepath.Join(dir, "kc")}, []string{"--kubeconfig", filepath.Join(dir, "kc")}},
		{"malformed kubeconfig", []string{"--kubeconfig", write("kubeconfig", "clusters: [\n")}, []string{"--kubeconfig", "kubeconfig"}},
		{"bad feature gate", []string{"--feature-gates", "A=maybe"}, []string{"--feature-gates", `"A=maybe"`}},
		{"missing drop-in directory", []string{"--config-dir", filepath.Join(dir, "nodir")}, []string{"nodir"}},
		{"bad drop-in", []string{"--config-dir", dropInDir(t, dir, "maxPods: -3\n")}, []string{"50-bad.conf", "maxPods", `"-3"`}},
		{"config is a directory", []string{"--config", dir}, []string{dir + ": is a directory"}},
		{"root dir is a file", []string{"--root-dir", big}, []string{"--root-dir", big, "not a directory"}},
		{"kubeconfig is /dev/zero", []string{"--kubeconfig", "/dev/zero"},
			[]string{"--kubeconfig", "/dev/zero: larger than the input size limit of 10Mi (10485760 bytes"}},
		{"drop-in is /dev/zero", []string{"--config-dir", zeroDropIns},
			[]string{"10-zero.conf: larger than the input size limit of 10Mi (10485760 bytes"}},
		{"config over --max-input-size", []string{"--max-input-size", "100", "--config", big},
			[]string{"big.yaml: larger than the input size limit of 100 (100 bytes"}},
		{"kubeconfig over --max-input-size", []string{"--max-input-size", "100", "--kubeconfig", big},
			[]string{"--kubeconfig", "big.yaml: larger than the input size limit of 100 (100 bytes"}},
		{"other image endpoint", []string{"--container-runtime-endpoint", "unix:///a.sock", "--image-service-endpoint", "unix:///b.sock"},
			[]string{"imageServiceEndpoint", `"unix:///b.sock"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"run", "--root-dir", root}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			msg := stderr.String()
			if strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Errorf("stderr is not one line:\n%s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q does not name %s", msg, w)
				}
			}
		})
	}
}

// TestRunRootDirLocked: a second agent on a root directory in use is refused
// with exit 2, naming the directory, and touches nothing.
func TestRunRootDirLocked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f, err := os.OpenFile(filepath.Join(root, "nodekeeper.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// On any machine: cgroup v1 and swap refusals come before the lock.
	conf := writeConfig(t, t.TempDir(), "k.yaml", "failCgroupV1: false\nfailSwapOn: false\n")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"run", "--root-dir", root, "--config", conf}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "another nodekeeper is running") || !strings.Contains(stderr.String(), root) {
		t.Fatalf("exit %d, stderr %q: want exit 2 saying another nodekeeper runs on %s", code, stderr.String(), root)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("the refused agent left %d entries in the root dir, want only the lock", len(entries))
	}
}

// TestRunReadOnlyPortTaken: a read-only port another process listens on
// ends run with exit 1 before anything is touched (the root directory, so
// containerd and the images, never made), one line naming the file, the
// field, the port and what to change. Before, run started containerd and
// imported the images, then exited when the read-only port failed to listen.
func TestRunReadOnlyPortTaken(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	root := filepath.Join(t.TempDir(), "root")
	conf := writeConfig(t, t.TempDir(), "k.yaml", "failCgroupV1: false\nfailSwapOn: false\nhealthzPort: 0\nreadOnlyPort: "+strconv.Itoa(port)+"\n")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"run", "--root-dir", root, "--config", conf, "--status-interval", "0"}, &stdout, &stderr)
	msg := stderr.String()
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, msg)
	}
	if strings.Count(strings.TrimSpace(msg), "\n") != 0 {
		t.Errorf("stderr is not one line:\n%s", msg)
	}
	for _, w := range []string{conf, "readOnlyPort " + strconv.Itoa(port), held.Addr().String(), "set readOnlyPort to a free port"} {
		if !strings.Contains(msg, w) {
			t.Errorf("stderr %q does not say %q", msg, w)
		}
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the root directory was made (%v): run went on past the port check", err)
	}
}

// TestRunKubeletFlags: every flag the node e2e harness passes the kubelet is
// accepted by run with the kubelet's meaning.
func TestRunKubeletFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	conf := filepath.Join(dir, "kubelet-config")
	dropIns := filepath.Join(dir, "kubelet.conf.d")
	for name, body := range map[string]string{
		conf: head + "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nsystemCgroups: /system\nkubeletCgroups: /kubelet\n" +
			"featureGates: {A: true}\nmaxPods: 50\n",
		filepath.Join(dropIns, "10-pods.conf"): head + "maxPods: 60\n",
	} {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"--config", conf}
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, c *config.Config)
	}{
		{"config file alone", base, func(t *testing.T, c *config.Config) {
			wantField(t, "MaxPods", int32(50), c.MaxPods)
			wantField(t, "SystemCgroups", "/system", c.Agent.SystemCgroups)
		}},
		{"--config-dir", append([]string{"--config-dir", dropIns}, base...), func(t *testing.T, c *config.Config) {
			wantField(t, "MaxPods", int32(60), c.MaxPods)
		}},
		{"--system-cgroups= --kubelet-cgroups= empty the fields", append(base, "--system-cgroups=", "--kubelet-cgroups="), func(t *testing.T, c *config.Config) {
			wantField(t, "cgroups", [2]string{}, [2]string{c.Agent.SystemCgroups, c.Agent.KubeletCgroups})
			wantField(t, "Kubelet.SystemCgroups", "", c.Kubelet.SystemCgroups)
		}},
		{"--runtime-cgroups", append(base, "--runtime-cgroups=/docker-daemon"), func(t *testing.T, c *config.Config) {
			wantField(t, "RuntimeCgroups", "/docker-daemon", c.Agent.RuntimeCgroups)
		}},
		{"--feature-gates merged over featureGates", append(base, "--feature-gates", "B=true,A=false", "--feature-gates=C=true"), func(t *testing.T, c *config.Config) {
			wantField(t, "FeatureGates", map[string]bool{"A": false, "B": true, "C": true}, c.Agent.FeatureGates)
		}},
		{"--container-runtime-endpoint and --image-service-endpoint", append(base, "--container-runtime-endpoint", "unix:///run/x.sock",
			"--image-service-endpoint", "unix:///run/x.sock"), func(t *testing.T, c *config.Config) {
			wantField(t, "endpoints", [2]string{"unix:///run/x.sock", "unix:///run/x.sock"}, [2]string{c.Agent.RuntimeEndpoint, c.Agent.ImageServiceEndpoint})
		}},
		{"--pod-manifest-path made absolute", append(base, "--pod-manifest-path", "manifests"), func(t *testing.T, c *config.Config) {
			wd, _ := os.Getwd()
			wantField(t, "StaticPodPath", filepath.Join(wd, "manifests"), c.Agent.StaticPodPath)
		}},
		{"the harness's other flags", append(base, "--kubeconfig", "./kubeconfig", "--root-dir", "/var/lib/kubelet", "--v", "4",
			"--hostname-override", "h2"), func(t *testing.T, c *config.Config) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f runFlags
			fl := pflag.NewFlagSet("run", pflag.ContinueOnError)
			f.register(fl)
			if err := fl.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c, err := loadRunConfig(t.Context(), fl, f, 0)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func wantField[T any](t *testing.T, what string, want, got T) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// dropInDir makes a drop-in directory under dir holding 50-bad.conf with body.
func dropInDir(t *testing.T, dir, body string) string {
	t.Helper()
	d := filepath.Join(dir, "conf.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "50-bad.conf"), []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRunReadsBounded: /dev/zero as --kubeconfig and as a drop-in ends run
// with exit 2 having read up to the 10 MiB limit, not the 256 MiB of the
// other commands' inputs (or, for the kubeconfig, until memory ran out).
// Not parallel: parallel tests run after it, so the allocation is its own.
func TestRunReadsBounded(t *testing.T) {
	dir := t.TempDir()
	dropIns := filepath.Join(dir, "conf.d")
	if err := os.MkdirAll(dropIns, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dropIns, "10-zero.conf")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--kubeconfig", "/dev/zero"}, {"--config-dir", dropIns}} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"run", "--root-dir", filepath.Join(dir, "root")}, args...), &stdout, &stderr)
		runtime.ReadMemStats(&after)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %q", args, code, exitUsage, stderr.String())
		}
		// Reading to the 10 MiB limit, the doubling buffer allocates 32 MiB
		// (64 MiB with -race); the 256 MiB limit would take over 512 MiB.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
			t.Errorf("%v: allocated %d MiB, want a few times the 10 MiB limit", args, alloc>>20)
		}
	}
}
