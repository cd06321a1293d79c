package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAgentFields(t *testing.T) {
	t.Parallel()
	c, err := Parse("agent.yaml", []byte(header+`staticPodPath: /etc/nk/manifests
containerRuntimeEndpoint: unix:///run/x.sock
podCIDR: 10.99.0.0/24
podLogsDir: /tmp/logs
address: 0.0.0.0
readOnlyPort: 0
enableProfilingHandler: false
cgroupRoot: /nk
syncFrequency: 30s
fileCheckFrequency: 5s
runtimeRequestTimeout: 1m
failCgroupV1: false
failSwapOn: false
memorySwap: {swapBehavior: LimitedSwap}
healthzBindAddress: 0.0.0.0
healthzPort: 0
clusterDomain: cluster.local
allowedUnsafeSysctls: ["kernel.msg*", "net.core.somaxconn"]
serializeImagePulls: false
maxParallelImagePulls: 5
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Agent{
		StaticPodPath: "/etc/nk/manifests", RuntimeEndpoint: "unix:///run/x.sock", PodCIDR: "10.99.0.0/24",
		PodLogsDir: "/tmp/logs", Address: "0.0.0.0", ReadOnlyPort: 0, CgroupDriver: "cgroupfs", CgroupRoot: "/nk",
		CgroupsPerQOS: true, SyncFrequency: 30 * time.Second, FileCheckFrequency: 5 * time.Second,
		RuntimeRequestTimeout: time.Minute, FailCgroupV1: false, FailSwapOn: false, SwapBehavior: SwapLimited, HealthzBindAddress: "0.0.0.0", HealthzPort: 0,
		ClusterDomain: "cluster.local", AllowedUnsafeSysctls: []string{"kernel.msg*", "net.core.somaxconn"},
		MaxContainerRestartPeriod: 5 * time.Minute,
		MaxParallelImagePulls:     5,
	}
	if diff := cmp.Diff(want, c.Agent); diff != "" {
		t.Errorf("Agent (-want +got):\n%s", diff)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings for supported fields: %q", c.Warnings)
	}
	if err := c.Agent.RunnableErr("agent.yaml"); err != nil {
		t.Errorf("RunnableErr: %v", err)
	}
}

func TestAgentFieldErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"relative podLogsDir", "podLogsDir: logs\n", []string{"podLogsDir", `"logs"`, "absolute"}},
		{"relative staticPodPath", "staticPodPath: manifests\n", []string{"staticPodPath", `"manifests"`}},
		{"bad podCIDR", "podCIDR: 10.0.0.0/33\n", []string{"podCIDR", `"10.0.0.0/33"`}},
		{"unknown cgroupDriver", "cgroupDriver: cgroupv3\n", []string{"cgroupDriver", `"cgroupv3"`}},
		{"unknown swapBehavior", "memorySwap: {swapBehavior: UnlimitedSwap}\n", []string{"memorySwap.swapBehavior", `"UnlimitedSwap"`, "NoSwap or LimitedSwap"}},
		{"swapBehavior of the wrong case", "memorySwap: {swapBehavior: limitedswap}\n", []string{"memorySwap.swapBehavior", `"limitedswap"`}},
		{"unclean cgroupRoot", "cgroupRoot: /a/../b\n", []string{"cgroupRoot", `"/a/../b"`}},
		{"address not an IP", "address: localhost\n", []string{"address", `"localhost"`}},
		{"readOnlyPort out of range", "readOnlyPort: 70000\n", []string{"readOnlyPort", `"70000"`}},
		{"negative syncFrequency", "syncFrequency: -1s\n", []string{"syncFrequency", `"-1s"`}},
		{"healthzBindAddress not an IP", "healthzBindAddress: localhost\n", []string{"healthzBindAddress", `"localhost"`}},
		{"healthzPort out of range", "healthzPort: -1\n", []string{"healthzPort", `"-1"`}},
		{"loopback podCIDR", "podCIDR: 127.0.0.0/8\n", []string{`podCIDR: "127.0.0.0/8"`, "loopback"}},
		{"podCIDR inside loopback", "podCIDR: 127.1.0.0/16\n", []string{`podCIDR: "127.1.0.0/16"`, "loopback"}},
		{"podCIDR holding loopback", "podCIDR: 96.0.0.0/3\n", []string{`podCIDR: "96.0.0.0/3"`, "loopback"}},
		{"link-local podCIDR", "podCIDR: 169.254.0.0/16\n", []string{`podCIDR: "169.254.0.0/16"`, "link-local"}},
		{"multicast podCIDR", "podCIDR: 224.1.0.0/16\n", []string{`podCIDR: "224.1.0.0/16"`, "multicast"}},
		{"unspecified podCIDR", "podCIDR: 0.0.0.0/0\n", []string{`podCIDR: "0.0.0.0/0"`, "unspecified"}},
		{"broadcast podCIDR", "podCIDR: 255.255.255.255/32\n", []string{`podCIDR: "255.255.255.255/32"`, "broadcast"}},
		{"IPv6 loopback podCIDR", "podCIDR: ::1/128\n", []string{`podCIDR: "::1/128"`, "loopback"}},
		{"IPv6 unspecified podCIDR", "podCIDR: ::/0\n", []string{`podCIDR: "::/0"`, "unspecified"}},
		{"IPv6 link-local podCIDR", "podCIDR: fe80::/64\n", []string{`podCIDR: "fe80::/64"`, "link-local"}},
		{"IPv6 multicast podCIDR", "podCIDR: ff02::/16\n", []string{`podCIDR: "ff02::/16"`, "multicast"}},
		{"IPv4-mapped podCIDR", "podCIDR: ::ffff:10.0.0.0/104\n", []string{`podCIDR: "::ffff:10.0.0.0/104"`, "IPv4-mapped"}},
		{"readOnlyPort on healthzPort", "readOnlyPort: 10248\n", []string{`readOnlyPort: "10248"`, "healthzPort"}},
		{"both set on one port", "readOnlyPort: 9000\nhealthzPort: 9000\n", []string{`healthzPort: "9000"`, "readOnlyPort"}},
		{"readOnlyPort on the kubelet API's port", "readOnlyPort: 10250\n", []string{`readOnlyPort: "10250"`, "port (the kubelet API"}},
		{"port on healthzPort", "port: 10248\n", []string{`port: "10248"`, "healthzPort"}},
		{"node-level unsafe sysctl", "allowedUnsafeSysctls: [net.core.somaxconn, vm.swappiness]\n", []string{"allowedUnsafeSysctls[1]", `"vm.swappiness"`, "namespaced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("bad.yaml", []byte(header+tc.data))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want an ErrInvalid error", err)
			}
			for _, w := range append(tc.want, "bad.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestCrashLoopBackOff: crashLoopBackOff.maxContainerRestartPeriod and the
// two crash-loop gates as the kubelet v1.36 defaults and validates them; the
// gates nodekeeper acts on are no longer in the feature gate warning.
func TestCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		data        string
		wantMax     time.Duration // Agent.MaxContainerRestartPeriod
		wantKubelet time.Duration // Kubelet's, for /configz; 0: nil
		wantReduced bool
		wantWarning string
	}{
		{name: "defaults", wantMax: 300 * time.Second, wantKubelet: 300 * time.Second},
		{name: "set", data: "crashLoopBackOff: {maxContainerRestartPeriod: 2s}\n", wantMax: 2 * time.Second, wantKubelet: 2 * time.Second},
		{name: "lowest", data: "crashLoopBackOff: {maxContainerRestartPeriod: 1s}\n", wantMax: time.Second, wantKubelet: time.Second},
		{name: "highest", data: "crashLoopBackOff: {maxContainerRestartPeriod: 5m}\n", wantMax: 5 * time.Minute, wantKubelet: 5 * time.Minute},
		{name: "empty crashLoopBackOff", data: "crashLoopBackOff: {}\n", wantMax: 300 * time.Second, wantKubelet: 300 * time.Second},
		{name: "max gate on as set", data: "featureGates: {KubeletCrashLoopBackOffMax: true}\ncrashLoopBackOff: {maxContainerRestartPeriod: 30s}\n",
			wantMax: 30 * time.Second, wantKubelet: 30 * time.Second},
		{name: "max gate off", data: "featureGates: {KubeletCrashLoopBackOffMax: false}\n"},
		{name: "reduced", data: "featureGates: {ReduceDefaultCrashLoopBackOffDecay: true}\n", wantMax: 300 * time.Second, wantKubelet: 300 * time.Second, wantReduced: true},
		{name: "reduced, max gate off", data: "featureGates: {ReduceDefaultCrashLoopBackOffDecay: true, KubeletCrashLoopBackOffMax: false}\n", wantReduced: true},
		{name: "other gates warned of alone", data: "featureGates: {ReduceDefaultCrashLoopBackOffDecay: true, Other: true}\n",
			wantMax: 300 * time.Second, wantKubelet: 300 * time.Second, wantReduced: true,
			wantWarning: "featureGates Other=true (gates.yaml): nodekeeper acts on no feature gate but KubeletCrashLoopBackOffMax and ReduceDefaultCrashLoopBackOffDecay; ignored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("gates.yaml", []byte(header+tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if c.Agent.MaxContainerRestartPeriod != tc.wantMax || c.Agent.ReducedCrashLoopBackOff != tc.wantReduced {
				t.Errorf("MaxContainerRestartPeriod %v, ReducedCrashLoopBackOff %t; want %v, %t",
					c.Agent.MaxContainerRestartPeriod, c.Agent.ReducedCrashLoopBackOff, tc.wantMax, tc.wantReduced)
			}
			var kubelet time.Duration
			if p := c.Kubelet.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
				kubelet = p.Duration
			}
			if kubelet != tc.wantKubelet {
				t.Errorf("Kubelet maxContainerRestartPeriod %v, want %v", kubelet, tc.wantKubelet)
			}
			var want []string
			if tc.wantWarning != "" {
				want = []string{tc.wantWarning}
			}
			if diff := cmp.Diff(want, c.Warnings); diff != "" {
				t.Errorf("Warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCrashLoopBackOffErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"zero", "crashLoopBackOff: {maxContainerRestartPeriod: 0s}\n", []string{`crashLoopBackOff.maxContainerRestartPeriod: "0s"`, "between 1s and 300s"}},
		{"below 1s", "crashLoopBackOff: {maxContainerRestartPeriod: 999ms}\n", []string{`crashLoopBackOff.maxContainerRestartPeriod: "999ms"`, "between 1s and 300s"}},
		{"negative", "crashLoopBackOff: {maxContainerRestartPeriod: -5s}\n", []string{`crashLoopBackOff.maxContainerRestartPeriod: "-5s"`, "between 1s and 300s"}},
		{"over 300s", "crashLoopBackOff: {maxContainerRestartPeriod: 301s}\n", []string{`crashLoopBackOff.maxContainerRestartPeriod: "5m1s"`, "between 1s and 300s"}},
		{"set with the gate off", "featureGates: {KubeletCrashLoopBackOffMax: false}\ncrashLoopBackOff: {maxContainerRestartPeriod: 30s}\n",
			[]string{`crashLoopBackOff.maxContainerRestartPeriod: "30s"`, "must not be set", "KubeletCrashLoopBackOffMax is off"}},
		{"not a duration", "crashLoopBackOff: {maxContainerRestartPeriod: soon}\n", []string{"maxContainerRestartPeriod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("bad.yaml", []byte(header+tc.data))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want an ErrInvalid error", err)
			}
			for _, w := range append(tc.want, "bad.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestAgentAcceptedNetworks: pod networks of unicast ranges, listeners on
// distinct ports, listeners turned off (two 0 ports share nothing), and the
// read-only port on the kubelet API's port while that is not served, are
// accepted.
func TestAgentAcceptedNetworks(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		"podCIDR: 10.0.0.0/8\n",
		"podCIDR: 100.64.0.0/10\n",
		"podCIDR: 126.0.0.0/8\n",
		"podCIDR: fd00:10::/64\n",
		"readOnlyPort: 0\nhealthzPort: 0\n",
		"readOnlyPort: 0\nhealthzPort: 0\nport: 10250\n",
		"readOnlyPort: 10250\nenableServer: false\n",
		"readOnlyPort: 9001\nhealthzPort: 9002\nport: 9003\n",
	} {
		if _, err := Parse("ok.yaml", []byte(header+data)); err != nil {
			t.Errorf("Parse(%q): %v", data, err)
		}
	}
}

// TestAgentRunnable: explain reads any of these files, but the agent refuses
// to run with them, naming the field.
func TestAgentRunnable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ data, want string }{
		{"cgroupsPerQOS: false\n", `cgroupsPerQOS: "false"`},
		{"imageServiceEndpoint: unix:///img.sock\n", `imageServiceEndpoint: "unix:///img.sock"`},
		{"containerRuntimeEndpoint: unix:///a.sock\nimageServiceEndpoint: unix:///img.sock\n", `imageServiceEndpoint: "unix:///img.sock"`},
	} {
		c, err := Parse("k.yaml", []byte(header+tc.data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.data, err)
		}
		err = c.Agent.RunnableErr("k.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("RunnableErr for %q = %v, want an ErrInvalid error naming %s", tc.data, err, tc.want)
		}
	}
}

// TestAgentHostDefaults: failCgroupV1 and failSwapOn are true unless set and
// memorySwap.swapBehavior is NoSwap, the kubelet's defaults.
func TestAgentHostDefaults(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "memorySwap: {}\n", "memorySwap: {swapBehavior: \"\"}\n"} {
		c, err := Parse("d.yaml", []byte(header+data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		if a := c.Agent; !a.FailCgroupV1 || !a.FailSwapOn || a.SwapBehavior != SwapNo {
			t.Errorf("Parse(%q): FailCgroupV1 %v, FailSwapOn %v, SwapBehavior %q; want true, true, NoSwap",
				data, a.FailCgroupV1, a.FailSwapOn, a.SwapBehavior)
		}
	}
	if a := Default().Agent; !a.FailCgroupV1 || !a.FailSwapOn || a.SwapBehavior != SwapNo {
		t.Errorf("Default(): FailCgroupV1 %v, FailSwapOn %v, SwapBehavior %q; want true, true, NoSwap", a.FailCgroupV1, a.FailSwapOn, a.SwapBehavior)
	}
}

// TestAgentHostErr: the kubelet's start-time refusals of the machine: cgroup
// v1 with failCgroupV1, swap on with failSwapOn (whatever the swap
// behavior), LimitedSwap on cgroup v1. Each error names the file, the field,
// its value and what the machine has.
func TestAgentHostErr(t *testing.T) {
	t.Parallel()
	const (
		header2 = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
		swapOn  = header2 + "/var/tmp/swapfile                       file\t\t65532\t\t0\t\t-2\n"
	)
	v1, v2 := Host{}, Host{CgroupV2: true}
	on := func(h Host) Host { h.Swaps = swapOn; return h }
	headerOnly := func(h Host) Host { h.Swaps = header2; return h }
	for _, tc := range []struct {
		name string
		data string
		host Host
		want []string // nil: no error
	}{
		{"defaults on v2", "", v2, nil},
		{"defaults on v2, /proc/swaps only a header", "", headerOnly(v2), nil},
		{"defaults on v1", "", v1, []string{`failCgroupV1: "true"`, "cgroup v1", "failCgroupV1: false"}},
		{"failCgroupV1 false on v1", "failCgroupV1: false\n", v1, nil},
		{"defaults with swap on", "", on(v2), []string{`failSwapOn: "true"`, "/var/tmp/swapfile", "failSwapOn: false"}},
		{"LimitedSwap with failSwapOn and swap on", "memorySwap: {swapBehavior: LimitedSwap}\n", on(v2), []string{`failSwapOn: "true"`}},
		{"LimitedSwap with swap on", "failSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n", on(v2), nil},
		{"failSwapOn false, swap on, NoSwap", "failSwapOn: false\n", on(v2), nil},
		{"LimitedSwap on v1", "failCgroupV1: false\nfailSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n", on(v1),
			[]string{`memorySwap.swapBehavior: "LimitedSwap"`, "cgroup v1", "cgroup v2"}},
		{"NoSwap on v1", "failCgroupV1: false\nmemorySwap: {swapBehavior: NoSwap}\n", v1, nil},
		{"singleProcessOOMKill false on v1", "failCgroupV1: false\nsingleProcessOOMKill: false\n", v1,
			[]string{`singleProcessOOMKill: "false"`, "cgroup v1", "kills single processes only"}},
		{"singleProcessOOMKill true on v1", "failCgroupV1: false\nsingleProcessOOMKill: true\n", v1, nil},
		{"singleProcessOOMKill false on v2", "singleProcessOOMKill: false\n", v2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("h.yaml", []byte(header+tc.data))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Agent.HostErr("h.yaml", tc.host)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("HostErr = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("HostErr = %v, want an ErrInvalid error", err)
			}
			for _, w := range append(tc.want, "h.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestAgentRuntimeDriver: the runtime's cgroup driver is taken when
// cgroupDriver is unset (null or "" included), kept when it agrees, and
// refused when the file sets another one: the error names the file,
// cgroupDriver, its value, the runtime's driver and its endpoint.
func TestAgentRuntimeDriver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data, runtime string
		want                string   // the driver used, "" when refused
		wantErr             []string // what the error names
	}{
		{"unset takes systemd", "", "systemd", "systemd", nil},
		{"unset takes cgroupfs", "", "cgroupfs", "cgroupfs", nil},
		{"null is unset", "cgroupDriver: null\n", "systemd", "systemd", nil},
		{"empty is unset", "cgroupDriver: \"\"\n", "systemd", "systemd", nil},
		{"cgroupfs agrees", "cgroupDriver: cgroupfs\n", "cgroupfs", "cgroupfs", nil},
		{"systemd agrees", "cgroupDriver: systemd\n", "systemd", "systemd", nil},
		{"cgroupfs against systemd", "cgroupDriver: cgroupfs\n", "systemd", "",
			[]string{`cgroupDriver: "cgroupfs"`, "uses the systemd cgroup driver", "unix:///run/rt.sock", "SystemdCgroup = false"}},
		{"systemd against cgroupfs", "cgroupDriver: systemd\n", "cgroupfs", "",
			[]string{`cgroupDriver: "systemd"`, "uses the cgroupfs cgroup driver", "SystemdCgroup = true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("d.yaml", []byte(header+tc.data))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Agent.RuntimeDriver("d.yaml", "unix:///run/rt.sock", tc.runtime)
			if tc.wantErr == nil {
				if err != nil || got != tc.want {
					t.Fatalf("RuntimeDriver = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("RuntimeDriver = %q, %v; want an ErrInvalid error", got, err)
			}
			for _, w := range append(tc.wantErr, "d.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestSingleProcessOOMKill: singleProcessOOMKill is read without a warning,
// and unset stays unset (nil): its default depends on the machine's cgroup
// version, which `run` knows, as the kubelet's.
func TestSingleProcessOOMKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		want       *bool
	}{
		{"unset", "", nil},
		{"true", "singleProcessOOMKill: true\n", new(true)},
		{"false", "singleProcessOOMKill: false\n", new(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("agent.yaml", []byte(header+tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, c.Agent.SingleProcessOOMKill); diff != "" {
				t.Errorf("SingleProcessOOMKill (-want +got):\n%s", diff)
			}
			if len(c.Warnings) != 0 {
				t.Errorf("warnings: %q", c.Warnings)
			}
		})
	}
}

// TestAgentRunnableSystemd: the systemd driver runs where systemd is the init
// system (its booted directory exists), with a cgroupRoot named as the
// kubelet names it.
func TestAgentRunnableSystemd(t *testing.T) {
	t.Parallel()
	booted := t.TempDir()
	absent := filepath.Join(booted, "none")
	for _, tc := range []struct {
		data, booted, want string
	}{
		{"cgroupDriver: systemd\n", booted, ""},
		{"cgroupDriver: systemd\ncgroupRoot: /nk\n", booted, ""},
		{"cgroupDriver: systemd\n", absent, `k.yaml: invalid configuration: cgroupDriver: "systemd": systemd is not the init system of this host (no ` + absent + `); use cgroupfs`},
		{"cgroupDriver: systemd\ncgroupRoot: /nk.slice\n", booted,
			`k.yaml: invalid configuration: cgroupRoot: "/nk.slice": with cgroupDriver systemd, name the cgroup without .slice, as the kubelet does (/nk is the slice nk.slice)`},
		{"cgroupDriver: cgroupfs\n", absent, ""},
	} {
		c, err := Parse("k.yaml", []byte(header+tc.data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.data, err)
		}
		err = c.Agent.runnableErr("k.yaml", tc.booted)
		if tc.want == "" {
			if err != nil {
				t.Errorf("runnableErr for %q, %s: %v, want nil", tc.data, tc.booted, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalid) {
			t.Errorf("runnableErr for %q, %s = %v, want the ErrInvalid error %q", tc.data, tc.booted, err, tc.want)
		}
	}
}

// TestImagePulls: serializeImagePulls and maxParallelImagePulls give the
// pulls that run at once as the kubelet's pullers take them
// (pkg/kubelet/images: serialized unless serializeImagePulls is false, which
// it defaults to only with maxParallelImagePulls of 2 or more; then
// maxParallelImagePulls, no bound when unset), and serializeImagePulls is
// defaulted in Kubelet as /configz shows it.
func TestImagePulls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data    string
		want          int32
		wantSerialize bool
	}{
		{name: "neither set: serialized", want: 1, wantSerialize: true},
		{name: "serializeImagePulls false: no bound", data: "serializeImagePulls: false\n", want: 0},
		{name: "maxParallelImagePulls 5 alone", data: "maxParallelImagePulls: 5\n", want: 5},
		{name: "maxParallelImagePulls 1 alone", data: "maxParallelImagePulls: 1\n", want: 1, wantSerialize: true},
		{name: "both, as the serialize spec sets them", data: "serializeImagePulls: true\nmaxParallelImagePulls: 1\n", want: 1, wantSerialize: true},
		{name: "both, as the parallel spec sets them", data: "serializeImagePulls: false\nmaxParallelImagePulls: 5\n", want: 5},
		{name: "not serialized, one at a time", data: "serializeImagePulls: false\nmaxParallelImagePulls: 1\n", want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse("config.yaml", []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if c.Agent.MaxParallelImagePulls != tc.want {
				t.Errorf("Agent.MaxParallelImagePulls %d, want %d", c.Agent.MaxParallelImagePulls, tc.want)
			}
			if s := c.Kubelet.SerializeImagePulls; s == nil || *s != tc.wantSerialize {
				t.Errorf("Kubelet.SerializeImagePulls %v, want %v", s, tc.wantSerialize)
			}
			if len(c.Warnings) != 0 {
				t.Errorf("warnings: %q", c.Warnings)
			}
		})
	}
}
