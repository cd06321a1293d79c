package config

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekeeper/nodekeeper/eviction"
)

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func hardQ(s eviction.Signal, q string) eviction.Threshold {
	return eviction.Threshold{Signal: s, Operator: eviction.OpLessThan, Value: eviction.Value{Quantity: qty(q)}}
}

func hardP(s eviction.Signal, p float32) eviction.Threshold {
	return eviction.Threshold{Signal: s, Operator: eviction.OpLessThan, Value: eviction.Value{Percentage: p}}
}

func withGrace(t eviction.Threshold, d time.Duration) eviction.Threshold {
	t.GracePeriod = d
	return t
}

func withMin(t eviction.Threshold, v eviction.Value) eviction.Threshold {
	t.MinReclaim = &v
	return t
}

// defaultHardThresholds are the thresholds of the kubelet's default evictionHard
// with the default enforceNodeAllocatable [pods], which adds the allocatable twin.
func defaultHardThresholds() []eviction.Threshold {
	return []eviction.Threshold{
		hardQ(eviction.SignalMemoryAvailable, "100Mi"),
		hardQ(eviction.SignalAllocatableMemoryAvailable, "100Mi"),
		hardP(eviction.SignalNodeFsAvailable, 0.10),
		hardP(eviction.SignalNodeFsInodesFree, 0.05),
		hardP(eviction.SignalImageFsAvailable, 0.15),
		hardP(eviction.SignalImageFsInodesFree, 0.05),
	}
}

// TestDefault spells out every default, independently of the code under test.
func TestDefault(t *testing.T) {
	t.Parallel()
	want := &Config{
		Kubelet: kubeletv1beta1.KubeletConfiguration{
			TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
			EvictionHard: map[string]string{
				"memory.available":   "100Mi",
				"nodefs.available":   "10%",
				"nodefs.inodesFree":  "5%",
				"imagefs.available":  "15%",
				"imagefs.inodesFree": "5%",
			},
			MergeDefaultEvictionSettings:     new(false),
			EvictionPressureTransitionPeriod: metav1.Duration{Duration: 5 * time.Minute},
			EnforceNodeAllocatable:           []string{"pods"},
			LocalStorageCapacityIsolation:    new(true),
			MaxPods:                          110,
			PodPidsLimit:                     new(int64(-1)),
			ImageGCHighThresholdPercent:      new(int32(85)),
			ImageGCLowThresholdPercent:       new(int32(80)),
			ImageMinimumGCAge:                metav1.Duration{Duration: 2 * time.Minute},
			PodLogsDir:                       "/var/log/pods",
			CgroupDriver:                     "cgroupfs",
			CgroupRoot:                       "/",
			CgroupsPerQOS:                    new(true),
			Address:                          "127.0.0.1",
			ReadOnlyPort:                     0, // the kubelet's: off
			EnableProfilingHandler:           new(true),
			SyncFrequency:                    metav1.Duration{Duration: time.Minute},
			FileCheckFrequency:               metav1.Duration{Duration: 20 * time.Second},
			RuntimeRequestTimeout:            metav1.Duration{Duration: 2 * time.Minute},
			FailCgroupV1:                     new(true),
			FailSwapOn:                       new(true),
			MemorySwap:                       kubeletv1beta1.MemorySwapConfiguration{SwapBehavior: "NoSwap"},
			EnableServer:                     new(true),
			Port:                             10250,
			Authentication: kubeletv1beta1.KubeletAuthentication{
				Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: new(true), CacheTTL: metav1.Duration{Duration: 2 * time.Minute}},
				Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: new(false)},
			},
			Authorization: kubeletv1beta1.KubeletAuthorization{Mode: "Webhook", Webhook: kubeletv1beta1.KubeletWebhookAuthorization{
				CacheAuthorizedTTL: metav1.Duration{Duration: 5 * time.Minute}, CacheUnauthorizedTTL: metav1.Duration{Duration: 30 * time.Second},
			}},
			EnableDebuggingHandlers:   new(true),
			HealthzBindAddress:        "127.0.0.1",
			HealthzPort:               new(int32(10248)),
			CrashLoopBackOff:          kubeletv1beta1.CrashLoopBackOffConfig{MaxContainerRestartPeriod: &metav1.Duration{Duration: 5 * time.Minute}},
			NodeStatusUpdateFrequency: metav1.Duration{Duration: 10 * time.Second},
			NodeStatusReportFrequency: metav1.Duration{Duration: 5 * time.Minute},
			NodeLeaseDurationSeconds:  40,
			RegisterNode:              new(true),
			KubeAPIQPS:                new(int32(50)),
			KubeAPIBurst:              100,
			EventRecordQPS:            new(int32(50)),
			EventBurst:                100,
			SerializeImagePulls:       new(true),
		},
		Cluster: Cluster{
			EnableServer: true, Address: "0.0.0.0", Port: 10250,
			Authentication: kubeletv1beta1.KubeletAuthentication{
				Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: new(true), CacheTTL: metav1.Duration{Duration: 2 * time.Minute}},
				Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: new(false)},
			},
			Authorization: kubeletv1beta1.KubeletAuthorization{Mode: "Webhook", Webhook: kubeletv1beta1.KubeletWebhookAuthorization{
				CacheAuthorizedTTL: metav1.Duration{Duration: 5 * time.Minute}, CacheUnauthorizedTTL: metav1.Duration{Duration: 30 * time.Second},
			}},
			EnableDebuggingHandlers:   true,
			NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
			NodeLeaseDurationSeconds: 40, RegisterNode: true,
			KubeAPIQPS: 50, KubeAPIBurst: 100, EventRecordQPS: 50, EventBurst: 100,
		},
		Agent: Agent{
			PodLogsDir: "/var/log/pods", Address: "127.0.0.1", ReadOnlyPort: 0, EnableProfilingHandler: true,
			CgroupDriver: "cgroupfs", CgroupRoot: "/", CgroupsPerQOS: true,
			SyncFrequency: time.Minute, FileCheckFrequency: 20 * time.Second, RuntimeRequestTimeout: 2 * time.Minute,
			HealthzBindAddress: "127.0.0.1", HealthzPort: 10248,
			FailCgroupV1: true, FailSwapOn: true, SwapBehavior: SwapNo, MaxContainerRestartPeriod: 5 * time.Minute, MaxParallelImagePulls: 1,
		},
		Eviction: eviction.Config{
			Thresholds:                    defaultHardThresholds(),
			PressureTransitionPeriod:      5 * time.Minute,
			MonitoringInterval:            10 * time.Second,
			LocalStorageCapacityIsolation: true,
			PodCleanupTimeout:             30 * time.Second,
		},
		MaxPods: 110,
	}
	if diff := cmp.Diff(want, Default()); diff != "" {
		t.Errorf("Default() (-want +got):\n%s", diff)
	}
	if got := len(Default().Kubelet.EvictionHard); got != 5 {
		t.Errorf("Default() has %d hard eviction signals, want 5", got)
	}
}

// defaultsFor returns Default() as loaded from file, changed by edit.
func defaultsFor(file string, edit func(c *Config)) *Config {
	c := Default()
	c.File = file
	if edit != nil {
		edit(c)
	}
	return c
}

func wantFull(file string) *Config {
	return defaultsFor(file, func(c *Config) {
		k := &c.Kubelet
		k.EvictionHard = map[string]string{"memory.available": "200Mi", "nodefs.available": "5%", "pid.available": "1000"}
		k.EvictionSoft = map[string]string{"memory.available": "1Gi", "imagefs.available": "20%"}
		k.EvictionSoftGracePeriod = map[string]string{"memory.available": "1m30s", "imagefs.available": "2m"}
		k.EvictionMinimumReclaim = map[string]string{"memory.available": "100Mi", "imagefs.available": "2Gi"}
		k.EvictionPressureTransitionPeriod.Duration = 30 * time.Second
		k.EvictionMaxPodGracePeriod = 60
		k.EnforceNodeAllocatable = []string{"pods", "kube-reserved"}
		k.LocalStorageCapacityIsolation = new(false)
		k.KubeReserved = map[string]string{"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "1Gi", "pid": "1000"}
		k.SystemReserved = map[string]string{"memory": "512Mi"}
		k.MaxPods = 50
		k.PodPidsLimit = new(int64(4096))
		k.ImageGCHighThresholdPercent = new(int32(90))
		k.ImageGCLowThresholdPercent = new(int32(70))
		k.ImageMinimumGCAge.Duration = 5 * time.Minute
		k.ImageMaximumGCAge.Duration = 168 * time.Hour
		k.StaticPodPath = "/etc/kubernetes/manifests"
		k.ContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
		k.ImageServiceEndpoint = "unix:///run/containerd/containerd.sock"
		c.Agent.StaticPodPath = k.StaticPodPath
		c.Agent.RuntimeEndpoint = k.ContainerRuntimeEndpoint
		c.Agent.ImageServiceEndpoint = k.ImageServiceEndpoint

		memMin := eviction.Value{Quantity: qty("100Mi")}
		c.Eviction = eviction.Config{
			Thresholds: []eviction.Threshold{
				withMin(hardQ(eviction.SignalMemoryAvailable, "200Mi"), memMin),
				withMin(withGrace(hardQ(eviction.SignalMemoryAvailable, "1Gi"), 90*time.Second), memMin),
				withMin(hardQ(eviction.SignalAllocatableMemoryAvailable, "200Mi"), memMin),
				hardP(eviction.SignalNodeFsAvailable, 0.05),
				withMin(withGrace(hardP(eviction.SignalImageFsAvailable, 0.20), 2*time.Minute), eviction.Value{Quantity: qty("2Gi")}),
				hardQ(eviction.SignalPIDAvailable, "1000"),
			},
			PressureTransitionPeriod:      30 * time.Second,
			MaxPodGracePeriod:             time.Minute,
			MonitoringInterval:            10 * time.Second,
			LocalStorageCapacityIsolation: false,
			PodCleanupTimeout:             30 * time.Second,
		}
		c.KubeReserved = v1.ResourceList{
			v1.ResourceCPU:              resource.MustParse("100m"),
			v1.ResourceMemory:           resource.MustParse("256Mi"),
			v1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
			"pid":                       resource.MustParse("1000"),
		}
		c.SystemReserved = v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")}
		c.MaxPods = 50
	})
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want *Config
	}{
		{
			name: "apiVersion and kind only give the defaults (YAML)",
			file: "testdata/minimal.yaml",
			want: defaultsFor("testdata/minimal.yaml", nil),
		},
		{
			name: "apiVersion and kind only give the defaults (JSON)",
			file: "testdata/minimal.json",
			want: defaultsFor("testdata/minimal.json", nil),
		},
		{
			name: "every supported field (YAML)",
			file: "testdata/full.yaml",
			want: wantFull("testdata/full.yaml"),
		},
		{
			name: "every supported field (JSON)",
			file: "testdata/full.json",
			want: wantFull("testdata/full.json"),
		},
		{
			name: "explicit evictionHard replaces the defaults",
			file: "testdata/explicit-hard.yaml",
			want: defaultsFor("testdata/explicit-hard.yaml", func(c *Config) {
				c.Kubelet.EvictionHard = map[string]string{"memory.available": "500Mi"}
				c.Eviction.Thresholds = []eviction.Threshold{
					hardQ(eviction.SignalMemoryAvailable, "500Mi"),
					hardQ(eviction.SignalAllocatableMemoryAvailable, "500Mi"),
				}
			}),
		},
		{
			name: "mergeDefaultEvictionSettings adds the missing default signals",
			file: "testdata/merge.yaml",
			want: defaultsFor("testdata/merge.yaml", func(c *Config) {
				c.Kubelet.MergeDefaultEvictionSettings = new(true)
				c.Kubelet.EvictionHard = map[string]string{
					"memory.available":   "1Gi",
					"nodefs.available":   "0%",
					"nodefs.inodesFree":  "5%",
					"imagefs.available":  "15%",
					"imagefs.inodesFree": "5%",
				}
				c.Eviction.Thresholds = []eviction.Threshold{
					hardQ(eviction.SignalMemoryAvailable, "1Gi"),
					hardQ(eviction.SignalAllocatableMemoryAvailable, "1Gi"),
					hardP(eviction.SignalNodeFsInodesFree, 0.05),
					hardP(eviction.SignalImageFsAvailable, 0.15),
					hardP(eviction.SignalImageFsInodesFree, 0.05),
				}
			}),
		},
		{
			name: "empty evictionHard means no hard thresholds",
			file: "testdata/empty-hard.yaml",
			want: defaultsFor("testdata/empty-hard.yaml", func(c *Config) {
				c.Kubelet.EvictionHard = map[string]string{}
				c.Eviction.Thresholds = nil
			}),
		},
		{
			name: "0% and 100% disable a signal",
			file: "testdata/disable.yaml",
			want: defaultsFor("testdata/disable.yaml", func(c *Config) {
				c.Kubelet.EvictionHard = map[string]string{
					"memory.available": "0%", "nodefs.available": "100%", "imagefs.available": "20%",
				}
				c.Eviction.Thresholds = []eviction.Threshold{hardP(eviction.SignalImageFsAvailable, 0.20)}
			}),
		},
		{
			name: "zero durations and maxPods take the defaults",
			file: "testdata/zero-durations.yaml",
			want: defaultsFor("testdata/zero-durations.yaml", nil),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := load(tc.file)
			if err != nil {
				t.Fatalf("load(%q): %v", tc.file, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("load(%q) (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

func TestLoadWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want []string
	}{
		{
			name: "supported fields only",
			file: "testdata/full.yaml",
			want: nil,
		},
		{
			name: "unsupported fields are listed once, sorted, null ones left out",
			file: "testdata/unsupported.yaml",
			want: []string{"testdata/unsupported.yaml: fields not supported by nodekeeper and ignored: shutdownGracePeriod"},
		},
		{
			name: "kubeadm's file",
			file: "testdata/kubeadm.yaml",
			want: []string{"testdata/kubeadm.yaml: fields not supported by nodekeeper and ignored: " +
				"clusterDNS, cpuManagerReconcilePeriod, " +
				"httpCheckFrequency, logging, rotateCertificates, " +
				"shutdownGracePeriod, shutdownGracePeriodCriticalPods, streamingConnectionIdleTimeout, " +
				"volumeStatsAggPeriod"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := load(tc.file)
			if err != nil {
				t.Fatalf("load(%q): %v", tc.file, err)
			}
			if diff := cmp.Diff(tc.want, got.Warnings); diff != "" {
				t.Errorf("Warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadUnsupportedKeepsDefaults checks that unsupported fields change nothing
// that nodekeeper resolves.
func TestLoadUnsupportedKeepsDefaults(t *testing.T) {
	t.Parallel()
	got, err := load("testdata/kubeadm.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	if diff := cmp.Diff(want.Eviction, got.Eviction); diff != "" {
		t.Errorf("Eviction (-want +got):\n%s", diff)
	}
	if got.MaxPods != 110 || got.KubeReserved != nil || got.SystemReserved != nil {
		t.Errorf("MaxPods, KubeReserved, SystemReserved = %d, %v, %v; want 110, nil, nil",
			got.MaxPods, got.KubeReserved, got.SystemReserved)
	}
	if got.Kubelet.CgroupDriver != "systemd" || got.Kubelet.StaticPodPath != "/etc/kubernetes/manifests" {
		t.Errorf("cgroupDriver, staticPodPath = %q, %q; want them decoded", got.Kubelet.CgroupDriver, got.Kubelet.StaticPodPath)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := load("testdata/no-such-file.yaml")
	var pe *os.PathError
	if !errors.As(err, &pe) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file: %v, want an *os.PathError for fs.ErrNotExist", err)
	}
	if errors.Is(err, ErrInvalid) {
		t.Errorf("Load of a missing file: %v is ErrInvalid, want it not to be", err)
	}
}

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		// want are the substrings the message must hold besides the file name:
		// the field and the value, where the error has them.
		want []string
	}{
		{
			name: "hard threshold not a quantity",
			data: header + "evictionHard:\n  memory.available: abc\n",
			want: []string{"evictionHard[memory.available]", `"abc"`},
		},
		{
			name: "hard threshold above 100%",
			data: header + "evictionHard:\n  nodefs.available: 120%\n",
			want: []string{"evictionHard[nodefs.available]", `"120%"`},
		},
		{
			name: "soft threshold without grace period",
			data: header + "evictionSoft:\n  memory.available: 1Gi\n",
			want: []string{"evictionSoft[memory.available]", `"1Gi"`, "grace period"},
		},
		{
			name: "kubeReserved memory beyond int64",
			data: header + "kubeReserved:\n  memory: \"1e400\"\n",
			want: []string{"kubeReserved[memory]", `"1e400"`, "too large"},
		},
		{
			name: "systemReserved cpu beyond int64 millicores",
			data: header + "systemReserved:\n  cpu: \"9223372036854776\"\n",
			want: []string{"systemReserved[cpu]", `"9223372036854776"`, "too large"},
		},
		{
			name: "hard threshold beyond int64",
			data: header + "evictionHard:\n  memory.available: 100Ei\n",
			want: []string{"evictionHard[memory.available]", `"100Ei"`, "too large"},
		},
		{
			name: "soft threshold beyond int64",
			data: header + "evictionSoft:\n  memory.available: 8Ei\nevictionSoftGracePeriod:\n  memory.available: 1m\n",
			want: []string{"evictionSoft[memory.available]", `"8Ei"`, "too large"},
		},
		{
			name: "minimum reclaim beyond int64",
			data: header + "evictionMinimumReclaim:\n  memory.available: 8Ei\n",
			want: []string{"evictionMinimumReclaim[memory.available]", `"8Ei"`, "too large"},
		},
		{
			name: "unknown signal",
			data: header + "evictionHard:\n  memory.free: 1Gi\n",
			want: []string{"evictionHard[memory.free]", `"1Gi"`},
		},
		{
			name: "unquoted number in a map of strings",
			data: header + "mergeDefaultEvictionSettings: true\nevictionHard:\n  imagefs.available: 15\n",
			want: []string{"evictionHard[imagefs.available]", `"15"`, "quote it"},
		},
		{
			name: "unquoted number in kubeReserved",
			data: header + "kubeReserved:\n  cpu: 100m\n  pid: 1000\n",
			want: []string{"kubeReserved[pid]", `"1000"`},
		},
		{
			name: "bad minimum reclaim",
			data: header + "evictionMinimumReclaim:\n  nodefs.available: 0%\n",
			want: []string{"evictionMinimumReclaim[nodefs.available]", `"0%"`},
		},
		{
			name: "bad grace period",
			data: header + "evictionSoftGracePeriod:\n  memory.available: soon\n",
			want: []string{"evictionSoftGracePeriod[memory.available]", `"soon"`},
		},
		{
			name: "kubeReserved not a quantity",
			data: header + "kubeReserved:\n  memory: lots\n",
			want: []string{"kubeReserved[memory]", `"lots"`},
		},
		{
			name: "negative systemReserved",
			data: header + "systemReserved:\n  cpu: -100m\n",
			want: []string{"systemReserved[cpu]", `"-100m"`, "negative"},
		},
		{
			name: "kubeReserved resource that cannot be reserved",
			data: header + "kubeReserved:\n  nvidia.com/gpu: \"1\"\n",
			want: []string{"kubeReserved[nvidia.com/gpu]", `"1"`},
		},
		{
			name: "maxParallelImagePulls 0",
			data: header + "serializeImagePulls: false\nmaxParallelImagePulls: 0\n",
			want: []string{"maxParallelImagePulls", `"0"`, "must be a positive number"},
		},
		{
			name: "negative maxParallelImagePulls, serializeImagePulls defaulted",
			data: header + "maxParallelImagePulls: -3\n",
			want: []string{"maxParallelImagePulls", `"-3"`, "must be a positive number"},
		},
		{
			name: "maxParallelImagePulls above 1 with serializeImagePulls",
			data: header + "serializeImagePulls: true\nmaxParallelImagePulls: 5\n",
			want: []string{"maxParallelImagePulls", `"5"`, "cannot be larger than 1 unless serializeImagePulls is set to false"},
		},
		{
			name: "image GC high threshold above 100",
			data: header + "imageGCHighThresholdPercent: 101\n",
			want: []string{"imageGCHighThresholdPercent", `"101"`},
		},
		{
			name: "image GC low threshold below 0",
			data: header + "imageGCLowThresholdPercent: -1\n",
			want: []string{"imageGCLowThresholdPercent", `"-1"`},
		},
		{
			name: "image GC low above high",
			data: header + "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 90\n",
			want: []string{"imageGCLowThresholdPercent", `"90"`, "imageGCHighThresholdPercent (80)"},
		},
		{
			name: "image GC high below the default low",
			data: header + "imageGCHighThresholdPercent: 70\n",
			want: []string{"imageGCLowThresholdPercent", `"80"`, "imageGCHighThresholdPercent (70)"},
		},
		{
			name: "imageMaximumGCAge not above imageMinimumGCAge",
			data: header + "imageMaximumGCAge: 1m\n",
			want: []string{"imageMaximumGCAge", `"1m"`, "imageMinimumGCAge (2m0s)"},
		},
		{
			name: "negative imageMaximumGCAge",
			data: header + "imageMaximumGCAge: -1h\n",
			want: []string{"imageMaximumGCAge", `"-1h"`},
		},
		{
			name: "negative imageMinimumGCAge",
			data: header + "imageMinimumGCAge: -90s\n",
			want: []string{"imageMinimumGCAge", `"-90s"`},
		},
		{
			name: "negative evictionPressureTransitionPeriod",
			data: header + "evictionPressureTransitionPeriod: -1s\n",
			want: []string{"evictionPressureTransitionPeriod", `"-1s"`},
		},
		{
			name: "negative evictionMaxPodGracePeriod",
			data: header + "evictionMaxPodGracePeriod: -5\n",
			want: []string{"evictionMaxPodGracePeriod", `"-5"`},
		},
		{
			name: "negative maxPods",
			data: header + "maxPods: -1\n",
			want: []string{"maxPods", `"-1"`},
		},
		{
			name: "maxPods of the wrong type",
			data: header + "maxPods: abc\n",
			want: []string{"maxPods", `"abc"`},
		},
		{
			name: "maxPods too large",
			data: header + "maxPods: 3000000000\n",
			want: []string{"maxPods", `"3000000000"`},
		},
		{
			name: "duration not a duration",
			data: header + "evictionPressureTransitionPeriod: soon\n",
			want: []string{"evictionPressureTransitionPeriod", `"soon"`},
		},
		{
			name: "map of the wrong type",
			data: header + "evictionHard: [memory.available]\n",
			want: []string{"evictionHard", `"[\"memory.available\"]"`},
		},
		{
			name: "unknown enforceNodeAllocatable value",
			data: header + "enforceNodeAllocatable: [pod]\n",
			want: []string{"enforceNodeAllocatable[0]", `"pod"`},
		},
		{
			name: "none combined with pods",
			data: header + "enforceNodeAllocatable: [pods, none]\n",
			want: []string{"enforceNodeAllocatable[1]", `"none"`},
		},
		{
			name: "wrong kind",
			data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n",
			want: []string{"kind", `"Pod"`},
		},
		{
			name: "wrong apiVersion",
			data: "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
			want: []string{"apiVersion", `"kubelet.config.k8s.io/v1alpha1"`},
		},
		{
			name: "no apiVersion and kind",
			data: "maxPods: 10\n",
			want: []string{"apiVersion missing", "kind missing"},
		},
		{
			name: "empty file",
			data: "",
			want: []string{"apiVersion missing", "kind missing"},
		},
		{
			name: "malformed YAML",
			data: header + "evictionHard:\n  memory.available: [100Mi\n",
			want: []string{"malformed YAML or JSON"},
		},
		{
			name: "malformed JSON",
			data: `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",`,
			want: []string{"malformed YAML or JSON"},
		},
		{
			name: "truncated JSON, with where",
			data: `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",`,
			want: []string{"malformed YAML or JSON: truncated: unexpected end of input at line 1, column 80 (byte 79)"},
		},
		{
			name: "YAML number beyond float64: the cause, not a wrong type",
			data: header + "maxPods: 1e400\n",
			want: []string{"config.yaml: invalid configuration: maxPods: 1e400 (line 3): number out of range"},
		},
		{
			name: "JSON number beyond int32",
			data: `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 1e400}`,
			want: []string{`config.yaml: invalid configuration: maxPods: "1e400": out of range for int32`},
		},
		{
			name: "YAML 1.1 boolean",
			data: header + "failSwapOn: yes\n",
			want: []string{`failSwapOn: yes (line 3) is read as the boolean true (YAML 1.1): quote it ("yes") for a string, or write true`},
		},
		{
			name: "YAML .nan",
			data: header + "imageGCHighThresholdPercent: .nan\n",
			want: []string{"imageGCHighThresholdPercent: .nan (line 3): not a finite number"},
		},
		{
			name: "not an object",
			data: "- apiVersion\n- kind\n",
			want: []string{"not a KubeletConfiguration object"},
		},
		{
			name: "unknown field",
			data: header + "evictionHrad:\n  memory.available: 1Gi\nmaxPod: 10\n",
			want: []string{`"evictionHrad"`, `"maxPod"`, "unknown fields"},
		},
		{
			name: "field names are case sensitive",
			data: header + "MaxPods: 10\n",
			want: []string{`"MaxPods"`, "unknown fields"},
		},
		{
			name: "unknown field inside an unsupported field",
			data: header + "logging:\n  formt: json\n",
			want: []string{"logging", "formt"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse("config.yaml", []byte(tc.data))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", got)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q is not ErrInvalid", err)
			}
			msg := err.Error()
			for _, s := range append([]string{"config.yaml: "}, tc.want...) {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not contain %q", msg, s)
				}
			}
		})
	}
}

// TestParseThresholdErrorKeepsFieldError checks that the eviction package's
// *FieldError stays reachable through the wrapping.
func TestParseThresholdErrorKeepsFieldError(t *testing.T) {
	t.Parallel()
	_, err := Parse("config.yaml", []byte(header+"evictionHard:\n  memory.available: abc\n"))
	var fe *eviction.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v does not wrap an *eviction.FieldError", err)
	}
	if diff := cmp.Diff([2]string{"evictionHard[memory.available]", "abc"}, [2]string{fe.Field, fe.Value}); diff != "" {
		t.Errorf("field and value (-want +got):\n%s", diff)
	}
}

// TestParseErrorMessage pins the form of one message.
func TestParseErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := Parse("/etc/kubelet/config.yaml", []byte(header+"kubeReserved:\n  memory: lots\n"))
	want := `/etc/kubelet/config.yaml: invalid configuration: kubeReserved[memory]: "lots": not a valid quantity`
	if err == nil || err.Error() != want {
		t.Errorf("Parse error = %v, want %s", err, want)
	}
}

func TestDefaultIsIndependent(t *testing.T) {
	t.Parallel()
	a := Default()
	a.Kubelet.EvictionHard["memory.available"] = "1Gi"
	*a.Kubelet.ImageGCHighThresholdPercent = 99
	a.Kubelet.EnforceNodeAllocatable[0] = "none"
	b := Default()
	if b.Kubelet.EvictionHard["memory.available"] != "100Mi" || *b.Kubelet.ImageGCHighThresholdPercent != 85 ||
		b.Kubelet.EnforceNodeAllocatable[0] != "pods" {
		t.Errorf("changing one Default() changed another: %+v", b.Kubelet)
	}
}

// containerfs thresholds load, as in the kubelet, with a warning that they are ignored.
func TestContainerFsThresholdWarning(t *testing.T) {
	t.Parallel()
	c, err := Parse("k.yaml", []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  containerfs.available: 10%\n  memory.available: 100Mi\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"k.yaml: evictionHard[containerfs.available]: containerfs thresholds are derived from nodefs or imagefs; the configured values are ignored, as in the kubelet"}
	if diff := cmp.Diff(want, c.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
