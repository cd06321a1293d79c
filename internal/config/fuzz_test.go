package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, that every error it returns is of
// class ErrInvalid and one line, that what it accepts is defaulted and valid, and that it is
// deterministic.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.*")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	data, err := os.ReadFile("../../examples/imagegc/kubelet-config.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 1e400\nfailSwapOn: yes\n"))
	f.Add([]byte(`{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 1e400, "kubeReserved": {"memory": 1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q is not ErrInvalid", err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error %q is not one line", err)
			}
			if c != nil {
				t.Fatalf("config %+v returned with error %v", c, err)
			}
			return
		}
		k := c.Kubelet
		switch {
		case c.File != "fuzz.yaml":
			t.Errorf("File = %q", c.File)
		case c.MaxPods <= 0 || c.MaxPods != k.MaxPods:
			t.Errorf("MaxPods = %d, Kubelet.MaxPods = %d", c.MaxPods, k.MaxPods)
		case k.EvictionHard == nil || k.EnforceNodeAllocatable == nil || k.MergeDefaultEvictionSettings == nil ||
			k.LocalStorageCapacityIsolation == nil || k.PodPidsLimit == nil:
			t.Errorf("defaults not applied: %+v", k)
		case c.Eviction.PressureTransitionPeriod <= 0 || c.Eviction.MaxPodGracePeriod < 0:
			t.Errorf("eviction durations %v, %v", c.Eviction.PressureTransitionPeriod, c.Eviction.MaxPodGracePeriod)
		case *k.ImageGCLowThresholdPercent < 0 || *k.ImageGCLowThresholdPercent > *k.ImageGCHighThresholdPercent ||
			*k.ImageGCHighThresholdPercent > 100:
			t.Errorf("image GC thresholds low %d, high %d", *k.ImageGCLowThresholdPercent, *k.ImageGCHighThresholdPercent)
		case k.ImageMinimumGCAge.Duration <= 0 ||
			k.ImageMaximumGCAge.Duration != 0 && k.ImageMaximumGCAge.Duration <= k.ImageMinimumGCAge.Duration:
			t.Errorf("image GC ages min %v, max %v", k.ImageMinimumGCAge.Duration, k.ImageMaximumGCAge.Duration)
		case len(c.Warnings) > 4:
			// One per kind: ignored fields, containerfs thresholds, cgroups, feature gates.
			t.Errorf("%d warnings, want at most four: %q", len(c.Warnings), c.Warnings)
		}
		for _, th := range c.Eviction.Thresholds {
			if _, ok := th.Signal.Resource(); !ok {
				t.Errorf("threshold with unknown signal %q", th.Signal)
			}
		}
		for name, q := range c.KubeReserved {
			if q.Sign() < 0 {
				t.Errorf("negative kubeReserved[%s] %v", name, q.String())
			}
		}
		for name, q := range c.SystemReserved {
			if q.Sign() < 0 {
				t.Errorf("negative systemReserved[%s] %v", name, q.String())
			}
		}
		again, err := Parse("fuzz.yaml", data)
		if err != nil {
			t.Fatalf("second Parse failed: %v", err)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Errorf("Parse is not deterministic (-first +second):\n%s", diff)
		}
	})
}
