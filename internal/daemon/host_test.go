package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
)

// fakeRecorder records the reasons of the events it gets.
type fakeRecorder struct{ reasons []string }

func (f *fakeRecorder) Event(_ runtime.Object, _, reason, _ string) {
	f.reasons = append(f.reasons, reason)
}
func (f *fakeRecorder) Eventf(o runtime.Object, t, reason, _ string, _ ...any) {
	f.Event(o, t, reason, "")
}
func (f *fakeRecorder) AnnotatedEventf(o runtime.Object, _ map[string]string, t, reason, _ string, _ ...any) {
	f.Event(o, t, reason, "")
}

// TestWarnCgroupV1: one CgroupV1 event on v1, none on v2.
func TestWarnCgroupV1(t *testing.T) {
	t.Parallel()
	for v, want := range map[cgroups.Version]int{cgroups.V1: 1, cgroups.V2: 0} {
		var rec fakeRecorder
		warnCgroupV1(&rec, "n", v)
		if len(rec.reasons) != want || (want == 1 && rec.reasons[0] != ReasonCgroupV1) {
			t.Errorf("v%d: events %q, want %d CgroupV1", v, rec.reasons, want)
		}
	}
}

// TestReadHostAndSwapSettings reads fixture cgroup trees: v2 with and
// without memory.swap.max on kubepods, v1 with memory.memsw, and a
// /proc/swaps fixture.
func TestReadHostAndSwapSettings(t *testing.T) {
	t.Parallel()
	touch := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	touch(filepath.Join(v2, "cgroup.controllers"))
	touch(filepath.Join(v2, "nk", "kubepods", "memory.swap.max"))
	v1 := t.TempDir()
	touch(filepath.Join(v1, "cpu", "cgroup.procs"))
	touch(filepath.Join(v1, "memory", "cgroup.procs"))
	touch(filepath.Join(v1, "memory", "memory.memsw.limit_in_bytes"))
	swaps := filepath.Join(t.TempDir(), "swaps")
	if err := os.WriteFile(swaps, []byte("Filename Type Size Used Priority\n/dev/zram0 partition 65532 0 -2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, l, err := readHost(v2, swaps)
	if err != nil || !h.CgroupV2 || l.Version != cgroups.V2 {
		t.Fatalf("readHost(v2) = %+v, %v, %v", h, l.Version, err)
	}
	if on, dev := h.SwapOn(); !on || dev != "/dev/zram0" {
		t.Errorf("SwapOn = %v, %q; want true, /dev/zram0", on, dev)
	}
	if s := swapSettings(l, "/nk", "LimitedSwap", 1<<20); !s.Controller || !s.CgroupV2 || !s.Limited || s.Capacity != 1<<20 {
		t.Errorf("v2 swapSettings = %+v", s)
	}
	if s := swapSettings(l, "/other", "NoSwap", 0); s.Controller || s.Limited {
		t.Errorf("v2 without memory.swap.max: swapSettings = %+v, want no controller", s)
	}
	h, l, err = readHost(v1, filepath.Join(t.TempDir(), "none"))
	if err != nil || h.CgroupV2 || h.Swaps != "" {
		t.Fatalf("readHost(v1, no swaps file) = %+v, %v", h, err)
	}
	if s := swapSettings(l, "/", "NoSwap", 0); !s.Controller || s.CgroupV2 {
		t.Errorf("v1 swapSettings = %+v, want the memsw controller", s)
	}
}
