package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// writeTree writes files (path relative to dir → content) and returns dir.
func writeTree(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadSourcesMerge: drop-in files merge over the file in lexical order
// of their paths as JSON merge patches, over the defaulted evictionHard, and
// the flags given win over both.
func TestLoadSourcesMerge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		base    string            // "" for no --config
		dropIns map[string]string // relative to the drop-in directory
		flags   Flags
		check   func(t *testing.T, c *Config)
	}{
		{
			name:    "later file wins",
			base:    header + "maxPods: 10\n",
			dropIns: map[string]string{"20-b.conf": header + "maxPods: 30\n", "10-a.conf": header + "maxPods: 20\n"},
			check:   func(t *testing.T, c *Config) { wantEq(t, "MaxPods", int32(30), c.MaxPods) },
		},
		{
			name: "subdirectories are walked in lexical order",
			base: header,
			dropIns: map[string]string{
				"10-a.conf": header + "maxPods: 20\n", "05/x.conf": header + "maxPods: 40\n", "50/x.conf": header + "maxPods: 50\n",
			},
			check: func(t *testing.T, c *Config) { wantEq(t, "MaxPods", int32(50), c.MaxPods) },
		},
		{
			name:    "objects merge key by key",
			base:    header + "authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 7m\n",
			dropIns: map[string]string{"a.conf": header + "authorization:\n  mode: AlwaysAllow\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "mode", "AlwaysAllow", string(c.Cluster.Authorization.Mode))
				wantEq(t, "cacheAuthorizedTTL", "7m0s", c.Cluster.Authorization.Webhook.CacheAuthorizedTTL.Duration.String())
			},
		},
		{
			name:    "lists replace",
			base:    header + "enforceNodeAllocatable: [pods, kube-reserved]\nkubeReserved: {cpu: 100m}\n",
			dropIns: map[string]string{"a.conf": header + "enforceNodeAllocatable: [none]\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "enforceNodeAllocatable", []string{"none"}, c.Kubelet.EnforceNodeAllocatable)
			},
		},
		{
			name:    "null removes",
			base:    header + "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n",
			dropIns: map[string]string{"a.conf": header + "evictionSoft: null\nevictionSoftGracePeriod: null\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "evictionSoft", map[string]string(nil), c.Kubelet.EvictionSoft)
			},
		},
		{
			name:    "a drop-in's evictionHard merges over the defaults when the file has none",
			base:    header,
			dropIns: map[string]string{"a.conf": header + "evictionHard: {memory.available: 300Mi}\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "evictionHard", map[string]string{
					"memory.available": "300Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
					"imagefs.available": "15%", "imagefs.inodesFree": "5%",
				}, c.Kubelet.EvictionHard)
			},
		},
		{
			name:    "a drop-in's evictionHard merges over the file's",
			base:    header + "evictionHard: {nodefs.available: 20%}\n",
			dropIns: map[string]string{"a.conf": header + "evictionHard: {memory.available: 300Mi}\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "evictionHard", map[string]string{"memory.available": "300Mi", "nodefs.available": "20%"}, c.Kubelet.EvictionHard)
			},
		},
		{
			name:    "no configuration file",
			dropIns: map[string]string{"a.conf": header + "readOnlyPort: 0\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "ReadOnlyPort", int32(0), c.Agent.ReadOnlyPort)
				wantEq(t, "File", "", c.File)
			},
		},
		{
			name:    "other files are skipped",
			base:    header,
			dropIns: map[string]string{"a.yaml": "not: [a config", "README": "x"},
			check: func(t *testing.T, c *Config) {
				var rel []string
				for _, p := range c.SkippedDropIns {
					rel = append(rel, filepath.Base(p))
				}
				wantEq(t, "SkippedDropIns", []string{"README", "a.yaml"}, rel)
			},
		},
		{
			name:    "flags win over drop-ins",
			base:    header + "containerRuntimeEndpoint: unix:///a.sock\nkubeletCgroups: /kubelet\nsystemCgroups: /system\n",
			dropIns: map[string]string{"a.conf": header + "containerRuntimeEndpoint: unix:///b.sock\nstaticPodPath: /b\n"},
			flags: Flags{ContainerRuntimeEndpoint: new("unix:///c.sock"), ImageServiceEndpoint: new("unix:///c.sock"),
				PodManifestPath: new("/c"), KubeletCgroups: new(""), SystemCgroups: new("")},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "RuntimeEndpoint", "unix:///c.sock", c.Agent.RuntimeEndpoint)
				wantEq(t, "ImageServiceEndpoint", "unix:///c.sock", c.Agent.ImageServiceEndpoint)
				wantEq(t, "StaticPodPath", "/c", c.Agent.StaticPodPath)
				wantEq(t, "Kubelet.ContainerRuntimeEndpoint", "unix:///c.sock", c.Kubelet.ContainerRuntimeEndpoint)
				wantEq(t, "cgroups", [2]string{}, [2]string{c.Agent.KubeletCgroups, c.Agent.SystemCgroups})
				wantEq(t, "Kubelet cgroups", [2]string{}, [2]string{c.Kubelet.KubeletCgroups, c.Kubelet.SystemCgroups})
				wantEq(t, "Warnings", []string(nil), c.Warnings)
			},
		},
		{
			name:    "feature gates merge gate by gate, the flag's win",
			base:    header + "featureGates: {A: true, B: true}\n",
			dropIns: map[string]string{"a.conf": header + "featureGates: {D: false}\n"},
			flags:   Flags{FeatureGates: map[string]bool{"B": false, "C": true}},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "FeatureGates", map[string]bool{"A": true, "B": false, "C": true, "D": false}, c.Agent.FeatureGates)
				wantEq(t, "Warnings", []string{"featureGates A=true,B=false,C=true,D=false (--feature-gates): nodekeeper acts on no feature gate but KubeletCrashLoopBackOffMax and ReduceDefaultCrashLoopBackOffDecay; ignored"}, c.Warnings)
			},
		},
		{
			name:  "the crash-loop gates from --feature-gates, with no warning",
			base:  header + "crashLoopBackOff: {maxContainerRestartPeriod: 30s}\n",
			flags: Flags{FeatureGates: map[string]bool{"ReduceDefaultCrashLoopBackOffDecay": true, "KubeletCrashLoopBackOffMax": true}},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "ReducedCrashLoopBackOff", true, c.Agent.ReducedCrashLoopBackOff)
				wantEq(t, "MaxContainerRestartPeriod", 30*time.Second, c.Agent.MaxContainerRestartPeriod)
				wantEq(t, "Warnings", []string(nil), c.Warnings)
			},
		},
		{
			name:    "cgroups set are one warning naming where each came from",
			base:    header + "systemCgroups: /system\n",
			dropIns: map[string]string{"a.conf": header + "kubeletCgroups: /kubelet\n"},
			flags:   Flags{RuntimeCgroups: "/docker-daemon"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "RuntimeCgroups", "/docker-daemon", c.Agent.RuntimeCgroups)
				want := `systemCgroups "/system" (BASE), kubeletCgroups "/kubelet" (DIR/a.conf), --runtime-cgroups "/docker-daemon": ` +
					"nodekeeper does not move processes into these cgroups; ignored"
				wantEq(t, "Warnings", []string{want}, c.Warnings)
			},
		},
		{
			name:    "ignored fields are one warning per file",
			base:    header + "cpuManagerPolicy: none\n",
			dropIns: map[string]string{"a.conf": header + "clusterDNS: [10.0.0.10]\ncontainerLogMaxFiles: 3\n", "b.conf": header + "maxPods: 3\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "Warnings", []string{
					"BASE: fields not supported by nodekeeper and ignored: cpuManagerPolicy",
					"DIR/a.conf: fields not supported by nodekeeper and ignored: clusterDNS, containerLogMaxFiles",
				}, c.Warnings)
			},
		},
		{
			name:    "warnings follow the merge order, the walk's",
			base:    header,
			dropIns: map[string]string{"a.conf": header + "clusterDNS: [10.0.0.10]\n", "a/x.conf": header + "containerLogMaxFiles: 3\n"},
			check: func(t *testing.T, c *Config) {
				wantEq(t, "Warnings", []string{
					"DIR/a/x.conf: fields not supported by nodekeeper and ignored: containerLogMaxFiles",
					"DIR/a.conf: fields not supported by nodekeeper and ignored: clusterDNS",
				}, c.Warnings)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := Sources{DropInDir: writeTree(t, filepath.Join(dir, "conf.d"), tc.dropIns), Flags: tc.flags}
			if err := os.MkdirAll(s.DropInDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.base != "" {
				s.File = filepath.Join(dir, "config.yaml")
				writeTree(t, dir, map[string]string{"config.yaml": tc.base})
			}
			c, err := LoadSources(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range c.Warnings {
				c.Warnings[i] = strings.ReplaceAll(strings.ReplaceAll(w, s.DropInDir, "DIR"), filepath.Join(dir, "config.yaml"), "BASE")
			}
			tc.check(t, c)
		})
	}
}

func wantEq[T any](t *testing.T, what string, want, got T) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// TestLoadSourcesErrors: each error is one line naming the file (the drop-in
// file, or the flag) that set the field, the field and the value.
func TestLoadSourcesErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		base    string
		dropIns map[string]string
		flags   Flags
		want    []string // substrings; DIR is the drop-in directory, BASE the file
	}{
		{"unknown field in a drop-in", header, map[string]string{"a.conf": header + "maxPodz: 3\n"}, Flags{},
			[]string{"DIR/a.conf", "maxPodz"}},
		{"drop-in without apiVersion and kind", header, map[string]string{"a.conf": "maxPods: 3\n"}, Flags{},
			[]string{"DIR/a.conf", "apiVersion", "missing"}},
		{"wrong type in a drop-in", header, map[string]string{"a.conf": header + "maxPods: many\n"}, Flags{},
			[]string{"DIR/a.conf", "maxPods", `"many"`}},
		{"malformed drop-in", header, map[string]string{"a.conf": header + "maxPods: [\n"}, Flags{},
			[]string{"DIR/a.conf", "malformed"}},
		{"merged value invalid, set by the drop-in", header + "imageGCHighThresholdPercent: 70\n",
			map[string]string{"a.conf": header + "imageGCLowThresholdPercent: 90\n"}, Flags{},
			[]string{"DIR/a.conf", "imageGCLowThresholdPercent", `"90"`}},
		{"nested field set by the drop-in", header,
			map[string]string{"a.conf": header + "kubeReserved: {cpu: -1}\n"}, Flags{},
			[]string{"DIR/a.conf", "kubeReserved[cpu]", `"-1"`}},
		{"eviction threshold set by the drop-in", header,
			map[string]string{"a.conf": header + "evictionHard: {memory.available: lots}\n"}, Flags{},
			[]string{"DIR/a.conf", "evictionHard[memory.available]", `"lots"`}},
		{"invalid value in the file, with drop-ins", header + "maxPods: -1\n",
			map[string]string{"a.conf": header + "podPidsLimit: 5\n"}, Flags{},
			[]string{"BASE", "maxPods", `"-1"`}},
		{"invalid flag value", header, nil, Flags{PodManifestPath: new("relative/dir")},
			[]string{"--pod-manifest-path", "staticPodPath", `"relative/dir"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := Sources{File: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "conf.d"), Flags: tc.flags}
			writeTree(t, dir, map[string]string{"config.yaml": tc.base})
			if err := os.MkdirAll(s.DropInDir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeTree(t, s.DropInDir, tc.dropIns)
			c, err := LoadSources(t.Context(), s)
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v is not ErrInvalid", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is not one line", msg)
			}
			for _, w := range tc.want {
				w = strings.ReplaceAll(strings.ReplaceAll(w, "DIR", s.DropInDir), "BASE", s.File)
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %s", msg, w)
				}
			}
		})
	}
}

func TestLoadSourcesMissingDropInDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := LoadSources(t.Context(), Sources{DropInDir: dir})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %v: want one naming %s that is fs.ErrNotExist", err, dir)
	}
}

// TestLoadE2ENodeConfig: the fully defaulted configuration e2e_node.test
// writes for the kubelet it starts (captured from its services mode) loads,
// with the flags it passes, and its unimplemented fields are one warning.
func TestLoadE2ENodeConfig(t *testing.T) {
	t.Parallel()
	const file = "testdata/e2e-node-kubelet-config.yaml"
	c, err := LoadSources(t.Context(), Sources{File: file, DropInDir: t.TempDir(), Flags: Flags{
		ContainerRuntimeEndpoint: new("unix:///run/e2e.sock"),
		SystemCgroups:            new(""), KubeletCgroups: new(""), RuntimeCgroups: "/docker-daemon",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Agent.RunnableErr(file); err != nil {
		t.Errorf("RunnableErr: %v", err)
	}
	want := Agent{
		StaticPodPath: "/tmp/e2e-node/static-pods357026526", RuntimeEndpoint: "unix:///run/e2e.sock",
		PodLogsDir: "/var/log/pods", Address: "0.0.0.0", ReadOnlyPort: 10255, EnableProfilingHandler: true,
		CgroupDriver: "cgroupfs", CgroupDriverSet: true, CgroupRoot: "/", CgroupsPerQOS: true, // the file sets it
		SyncFrequency: defaultSyncFrequency, FileCheckFrequency: defaultFileCheckFrequency, RuntimeRequestTimeout: defaultRuntimeRequestTimeout,
		HealthzBindAddress: "127.0.0.1", HealthzPort: 10248, RuntimeCgroups: "/docker-daemon",
		FailSwapOn: true, SwapBehavior: SwapNo, MaxContainerRestartPeriod: 5 * time.Minute,
		MaxParallelImagePulls: 1, // serializeImagePulls: true
	}
	wantEq(t, "Agent", want, c.Agent)
	wantEq(t, "Cluster.Authorization.Mode", "AlwaysAllow", string(c.Cluster.Authorization.Mode))
	wantEq(t, "Cluster.Authentication.Anonymous", true, *c.Cluster.Authentication.Anonymous.Enabled)
	wantEq(t, "oomScoreAdj", int32(-999), *c.Kubelet.OOMScoreAdj)
	if len(c.Warnings) != 2 || !strings.HasPrefix(c.Warnings[0], file+": fields not supported by nodekeeper and ignored: configMapAndSecretChangeDetectionStrategy, ") ||
		c.Warnings[1] != `--runtime-cgroups "/docker-daemon": nodekeeper does not move processes into these cgroups; ignored` {
		t.Errorf("Warnings = %q: want the ignored fields and the runtime cgroups, one line each", c.Warnings)
	}
	for _, f := range []string{"healthzPort", "healthzBindAddress", "systemCgroups", "kubeletCgroups", "oomScoreAdj", "staticPodPath",
		"failCgroupV1", "failSwapOn", "memorySwap"} {
		if strings.Contains(c.Warnings[0], " "+f+",") || strings.HasSuffix(c.Warnings[0], " "+f) {
			t.Errorf("warning names %s, which nodekeeper reads: %s", f, c.Warnings[0])
		}
	}
}

func TestParseFeatureGates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     map[string]bool
		wantErr  string
	}{
		{"empty", "", map[string]bool{}, ""},
		{"two", "A=true,B=false", map[string]bool{"A": true, "B": false}, ""},
		{"spaces and empty entries", " A = true , ,B=0,", map[string]bool{"A": true, "B": false}, ""},
		{"later wins", "A=true,A=false", map[string]bool{"A": false}, ""},
		{"no value", "A", nil, `feature gate "A": want Name=true or Name=false`},
		{"no name", "=true", nil, `feature gate "=true": want Name=true or Name=false`},
		{"not a bool", "A=yes", nil, `feature gate "A=yes": "yes" is not a boolean`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFeatureGates(tc.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			wantEq(t, "error", tc.wantErr, gotErr)
			wantEq(t, "gates", tc.want, got)
		})
	}
}

// TestLoadSourcesNodeE2EDropIns: the two drop-in files of the node e2e
// suite's "Kubelet Config ... should merge kubelet configs correctly" test
// (test/e2e_node/kubelet_config_dir_test.go, which needs systemd to restart
// the kubelet), merged over the harness's configuration, give what that test
// expects of /configz: the base configuration with exactly these changes.
func TestLoadSourcesNodeE2EDropIns(t *testing.T) {
	t.Parallel()
	const file = "testdata/e2e-node-kubelet-config.yaml"
	dir := writeTree(t, t.TempDir(), map[string]string{
		"10-kubelet.conf": header + `port: 10255
readOnlyPort: 10257
clusterDNS: [192.168.1.10]
systemReserved: {memory: 1Gi}
authorization: {mode: Webhook, webhook: {cacheAuthorizedTTL: 5m, cacheUnauthorizedTTL: 30s}}
staticPodURLHeader:
  kubelet-api-support: ["Authorization: 234APSDFA", "X-Custom-Header: 123"]
  custom-static-pod: ["Authorization: 223EWRWER", "X-Custom-Header: 456"]
shutdownGracePeriodByPodPriority:
- {priority: 1, shutdownGracePeriodSeconds: 60}
- {priority: 2, shutdownGracePeriodSeconds: 45}
- {priority: 3, shutdownGracePeriodSeconds: 30}
featureGates: {PodAndContainerStatsFromCRI: true}
`,
		"20-kubelet.conf": header + `clusterDNS: [192.168.1.1, 192.168.1.5, 192.168.1.8]
port: 8080
cpuManagerReconcilePeriod: 1s
systemReserved: {memory: 2Gi}
authorization: {mode: Webhook, webhook: {cacheAuthorizedTTL: 6m, cacheUnauthorizedTTL: 40s}}
staticPodURLHeader:
  kubelet-api-support: ["Authorization: 8945AFSG1", "X-Custom-Header: 987"]
  custom-static-pod: ["Authorization: 223EWRWER", "X-Custom-Header: 345"]
shutdownGracePeriodByPodPriority:
- {priority: 1, shutdownGracePeriodSeconds: 19}
- {priority: 2, shutdownGracePeriodSeconds: 41}
- {priority: 6, shutdownGracePeriodSeconds: 30}
featureGates: {KubeletServiceAccountTokenForCredentialProviders: true, PodAndContainerStatsFromCRI: false, DynamicResourceAllocation: true}
`,
	})
	base, err := load(file)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := LoadSources(t.Context(), Sources{File: file, DropInDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := base.Kubelet
	want.Port = 8080
	want.ReadOnlyPort = 10257
	want.SystemReserved = map[string]string{"memory": "2Gi"}
	want.ClusterDNS = []string{"192.168.1.1", "192.168.1.5", "192.168.1.8"}
	want.CPUManagerReconcilePeriod.Duration = time.Second
	want.StaticPodURLHeader = map[string][]string{
		"kubelet-api-support": {"Authorization: 8945AFSG1", "X-Custom-Header: 987"},
		"custom-static-pod":   {"Authorization: 223EWRWER", "X-Custom-Header: 345"},
	}
	want.ShutdownGracePeriodByPodPriority = []kubeletv1beta1.ShutdownGracePeriodByPodPriority{
		{Priority: 1, ShutdownGracePeriodSeconds: 19}, {Priority: 2, ShutdownGracePeriodSeconds: 41}, {Priority: 6, ShutdownGracePeriodSeconds: 30},
	}
	want.Authorization.Mode = "Webhook"
	want.Authorization.Webhook.CacheAuthorizedTTL.Duration = 6 * time.Minute
	want.Authorization.Webhook.CacheUnauthorizedTTL.Duration = 40 * time.Second
	want.FeatureGates = map[string]bool{
		"PodAndContainerStatsFromCRI": false, "DynamicResourceAllocation": true, "KubeletServiceAccountTokenForCredentialProviders": true,
	}
	wantEq(t, "merged KubeletConfiguration", want, merged.Kubelet)
	wantEq(t, "Agent.ReadOnlyPort", int32(10257), merged.Agent.ReadOnlyPort)
	wantEq(t, "Cluster.Port", int32(8080), merged.Cluster.Port)
	wantEq(t, "SystemReserved memory", "2Gi", merged.SystemReserved.Memory().String())
}
