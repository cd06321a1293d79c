package cgroups

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// unitCall is one call a fakeSystemd received: "start", "set" or "stop", the
// unit, and the properties as name → value.
type unitCall struct {
	Op, Unit string
	Props    map[string]any
}

// fakeSystemd is systemd's D-Bus API over a fixture cgroup tree: a started
// slice's directory is made in the hierarchies of managed (as systemd makes
// it where it manages the controllers), a stopped one's removed from them.
// Units it started are known; starting a known one is UnitExists, stopping an
// unknown one NoSuchUnit. result is the job result it reports ("" is done).
type fakeSystemd struct {
	managed []string
	units   map[string]bool
	calls   []unitCall
	result  string
}

func newFakeSystemd(managed ...string) *fakeSystemd {
	return &fakeSystemd{managed: managed, units: map[string]bool{}}
}

func propMap(props []sddbus.Property) map[string]any {
	m := map[string]any{}
	for _, p := range props {
		m[p.Name] = p.Value.Value()
	}
	return m
}

func (f *fakeSystemd) job(ch chan<- string) {
	res := f.result
	if res == "" {
		res = "done"
	}
	ch <- res
}

func (f *fakeSystemd) StartTransientUnit(name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.calls = append(f.calls, unitCall{"start", name, propMap(props)})
	if f.units[name] {
		return 0, godbus.Error{Name: "org.freedesktop.systemd1.UnitExists", Body: []any{"Unit " + name + " already exists."}}
	}
	f.units[name] = true
	for _, h := range f.managed {
		if err := os.MkdirAll(filepath.Join(h, expandSlice(name)), 0o755); err != nil {
			return 0, err
		}
	}
	f.job(ch)
	return 1, nil
}

func (f *fakeSystemd) SetUnitProperties(name string, runtime bool, props ...sddbus.Property) error {
	f.calls = append(f.calls, unitCall{"set", name, propMap(props)})
	return nil
}

func (f *fakeSystemd) StopUnit(name, mode string, ch chan<- string) (int, error) {
	f.calls = append(f.calls, unitCall{"stop", name, nil})
	if !f.units[name] {
		return 0, godbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " not loaded."}}
	}
	delete(f.units, name)
	for _, h := range f.managed {
		if err := os.RemoveAll(filepath.Join(h, expandSlice(name))); err != nil {
			return 0, err
		}
	}
	f.job(ch)
	return 1, nil
}

// systemdManager is a Manager with the systemd driver over the fixture
// cgroup tree fsRoot and f.
func systemdManager(t *testing.T, cfg Config, f *fakeSystemd) *Manager {
	t.Helper()
	cfg.Driver = "systemd"
	cfg.systemdBooted = t.TempDir()
	cfg.dialSystemd = func() (systemdConn, error) { return f, nil }
	return fixtureManager(t, cfg)
}

func TestSystemdNames(t *testing.T) {
	t.Parallel()
	uid := types.UID("0a1b2c3d-0000-4000-8000-123456789abc")
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"kubepods", SystemdKubepodsPath("/"), "/kubepods.slice"},
		{"kubepods under a root", SystemdKubepodsPath("/nk"), "/nk.slice/nk-kubepods.slice"},
		{"kubepods under a root with dashes", SystemdKubepodsPath("/nk-test/a"), "/nk_test.slice/nk_test-a.slice/nk_test-a-kubepods.slice"},
		{"guaranteed", SystemdPodPath("/", v1.PodQOSGuaranteed, uid),
			"/kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_123456789abc.slice"},
		{"burstable", SystemdPodPath("/", v1.PodQOSBurstable, uid),
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_0000_4000_8000_123456789abc.slice"},
		{"besteffort", SystemdPodPath("/", v1.PodQOSBestEffort, uid),
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_0000_4000_8000_123456789abc.slice"},
		{"burstable under a root", SystemdPodPath("/nk", v1.PodQOSBurstable, "u-1"),
			"/nk.slice/nk-kubepods.slice/nk-kubepods-burstable.slice/nk-kubepods-burstable-podu_1.slice"},
		{"tier", systemdTierPath("/", v1.PodQOSBestEffort), "/kubepods.slice/kubepods-besteffort.slice"},
		{"root slice", expandSlice("-.slice"), "/"},
		{"slice of", sliceOf("/kubepods.slice/kubepods-burstable.slice"), "kubepods-burstable.slice"},
		{"parent slice", parentSlice("/kubepods.slice/kubepods-burstable.slice"), "kubepods.slice"},
		{"parent of the top", parentSlice("/kubepods.slice"), "-.slice"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestQuotaPerSec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		quota int64
		want  uint64
	}{
		{100000, 1000000}, // 1 cpu
		{50000, 500000},
		{1000, 10000},   // the minimum quota: 1 %
		{25100, 260000}, // 251 ms/s rounds up to 26 %
		{150000, 1500000},
	} {
		if got := quotaPerSec(tc.quota, quotaPeriod); got != tc.want {
			t.Errorf("quotaPerSec(%d) = %d, want %d", tc.quota, got, tc.want)
		}
	}
}

func TestSystemdNewRejects(t *testing.T) {
	t.Parallel()
	v2root := v2Tree(t)
	booted := t.TempDir()
	f := newFakeSystemd()
	ok := func() (systemdConn, error) { return f, nil }
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"not booted with systemd", Config{FSRoot: v2root, Driver: "systemd", systemdBooted: filepath.Join(booted, "none"), dialSystemd: ok},
			`cgroupDriver "systemd": systemd is not the init system of this host (no ` + filepath.Join(booted, "none") + `); use "cgroupfs"`},
		{"no D-Bus", Config{FSRoot: v2root, Driver: "systemd", systemdBooted: booted,
			dialSystemd: func() (systemdConn, error) {
				return nil, errors.New("dial unix /run/systemd/private: connect: no such file or directory")
			}},
			`cgroupDriver "systemd": connect to systemd over D-Bus: dial unix /run/systemd/private`},
		{"slice as root", Config{FSRoot: v2root, Driver: "systemd", CgroupRoot: "/nk.slice", systemdBooted: booted, dialSystemd: ok},
			`cgroupRoot "/nk.slice": with cgroupDriver "systemd" name the cgroup without .slice, as the kubelet does (/nk is the slice nk.slice)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := newManager(tc.cfg, fixtureFS())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if len(f.calls) != 0 {
		t.Errorf("New called systemd: %v", f.calls)
	}
}

// base is the properties every slice starts with.
func base(desc, parent string, res map[string]any) map[string]any {
	m := map[string]any{
		"Description": desc, "Wants": []string{parent},
		"MemoryAccounting": true, "CPUAccounting": true, "IOAccounting": true, "TasksAccounting": true,
		"DefaultDependencies": false,
	}
	for k, v := range res {
		m[k] = v
	}
	return m
}

func TestSystemdEnsureV2(t *testing.T) {
	t.Parallel()
	root := v2Tree(t)
	f := newFakeSystemd(root)
	m := systemdManager(t, Config{FSRoot: root, PodPidsLimit: 64}, f)
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	guaranteed := pod("g-1", ctr(nil, rl("500m", "128Mi")))
	burst := pod("b-2", ctr(rl("250m", "64Mi"), rl("1", "")))
	var parents []string
	for _, p := range []*v1.Pod{guaranteed, burst} {
		cg, err := m.EnsurePod(p)
		if err != nil {
			t.Fatal(err)
		}
		parents = append(parents, cg)
	}
	if err := m.UpdateQoS([]*v1.Pod{guaranteed, burst}); err != nil {
		t.Fatal(err)
	}
	wantParents := []string{"/kubepods.slice/kubepods-podg_1.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_2.slice"}
	if diff := cmp.Diff(wantParents, parents); diff != "" {
		t.Errorf("cgroupParents (-want +got):\n%s", diff)
	}
	inf := uint64(math.MaxUint64)
	want := []unitCall{
		{"start", "kubepods.slice", base("nodekeeper pods", "-.slice", nil)},
		{"start", "kubepods-burstable.slice", base("nodekeeper burstable pods", "kubepods.slice", nil)},
		{"start", "kubepods-besteffort.slice", base("nodekeeper besteffort pods", "kubepods.slice",
			map[string]any{"CPUWeight": uint64(1), "TasksMax": inf})},
		{"start", "kubepods-podg_1.slice", base("nodekeeper pod g-1", "kubepods.slice", map[string]any{
			"CPUWeight": uint64(59), "CPUQuotaPerSecUSec": uint64(500000), "CPUQuotaPeriodUSec": uint64(100000),
			"MemoryMax": uint64(128 << 20), "TasksMax": uint64(64)})},
		{"start", "kubepods-burstable-podb_2.slice", base("nodekeeper pod b-2", "kubepods-burstable.slice", map[string]any{
			"CPUWeight": uint64(35), "CPUQuotaPerSecUSec": uint64(1000000), "CPUQuotaPeriodUSec": uint64(100000), "TasksMax": uint64(64)})},
		{"set", "kubepods-burstable.slice", map[string]any{"CPUWeight": uint64(35)}},
		{"set", "kubepods-besteffort.slice", map[string]any{"CPUWeight": uint64(1)}},
	}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("systemd calls (-want +got):\n%s", diff)
	}
	// The files are the cgroupfs driver's, at the slices' paths.
	all := files(t, root)
	for file, v := range map[string]string{
		"kubepods.slice/kubepods-podg_1.slice/cpu.max":                                       "50000 100000",
		"kubepods.slice/kubepods-podg_1.slice/memory.max":                                    "134217728",
		"kubepods.slice/kubepods-podg_1.slice/pids.max":                                      "64",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_2.slice/cpu.max":    "100000 100000",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_2.slice/memory.max": "max",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_2.slice/cpu.weight": "35",
		"kubepods.slice/kubepods-burstable.slice/cpu.weight":                                 "35",
		"kubepods.slice/kubepods-besteffort.slice/cpu.weight":                                "1",
	} {
		if all[file] != v {
			t.Errorf("%s = %q, want %q", file, all[file], v)
		}
	}
	// systemd owns the slices' cgroup.subtree_control on v2.
	for file := range all {
		if strings.HasSuffix(file, "cgroup.subtree_control") && file != "cgroup.subtree_control" {
			t.Errorf("the driver wrote %s", file)
		}
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{"b-2", "g-1"}, uids); diff != "" {
		t.Errorf("Pods (-want +got):\n%s", diff)
	}
}

func TestSystemdEnsureV1(t *testing.T) {
	t.Parallel()
	root := v1Tree(t, true)
	// systemd manages cpu,cpuacct, memory and pids on v1, not cpuset.
	f := newFakeSystemd(filepath.Join(root, "cpu,cpuacct"), filepath.Join(root, "memory"), filepath.Join(root, "pids"))
	m := systemdManager(t, Config{FSRoot: root, CgroupRoot: "/nk", KubepodsLimits: rl("1500m", "1Gi")}, f)
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	cg, err := m.EnsurePod(pod("g-1", ctr(nil, rl("500m", "128Mi"))))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/nk.slice/nk-kubepods.slice/nk-kubepods-podg_1.slice"; cg != want {
		t.Errorf("cgroupParent %q, want %q", cg, want)
	}
	inf := uint64(math.MaxUint64)
	want := []unitCall{
		{"start", "nk-kubepods.slice", base("nodekeeper pods", "nk.slice", map[string]any{
			"CPUShares": uint64(1536), "MemoryLimit": uint64(1 << 30), "TasksMax": inf})},
		{"start", "nk-kubepods-burstable.slice", base("nodekeeper burstable pods", "nk-kubepods.slice", nil)},
		{"start", "nk-kubepods-besteffort.slice", base("nodekeeper besteffort pods", "nk-kubepods.slice",
			map[string]any{"CPUShares": uint64(2), "TasksMax": inf})},
		{"start", "nk-kubepods-podg_1.slice", base("nodekeeper pod g-1", "nk-kubepods.slice", map[string]any{
			"CPUShares": uint64(512), "CPUQuotaPerSecUSec": uint64(500000), "CPUQuotaPeriodUSec": uint64(100000),
			"MemoryLimit": uint64(128 << 20), "TasksMax": inf})},
	}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("systemd calls (-want +got):\n%s", diff)
	}
	all := files(t, root)
	pod := "nk.slice/nk-kubepods.slice/nk-kubepods-podg_1.slice/"
	for file, v := range map[string]string{
		"cpu,cpuacct/" + pod + "cpu.shares":                 "512",
		"cpu,cpuacct/" + pod + "cpu.cfs_quota_us":           "50000",
		"memory/" + pod + "memory.limit_in_bytes":           "134217728",
		"cpuset/" + pod + "cpuset.cpus":                     "0-1", // made by the driver: systemd does not manage cpuset
		"freezer/" + pod + "cpu.shares":                     "",
		"cpu,cpuacct/nk.slice/nk-kubepods.slice/cpu.shares": "1536",
	} {
		if all[file] != v {
			t.Errorf("%s = %q, want %q", file, all[file], v)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "freezer", pod)); err != nil {
		t.Errorf("pod cgroup missing in a hierarchy without limits: %v", err)
	}
}

func TestSystemdExistingSlice(t *testing.T) {
	t.Parallel()
	root := v2Tree(t)
	f := newFakeSystemd(root)
	m := systemdManager(t, Config{FSRoot: root}, f)
	p := pod("g-1", ctr(nil, rl("500m", "128Mi")))
	if _, err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	f.calls = nil
	// An agent restarted with the pod running: the slice exists, its
	// resource properties are set again.
	if _, err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	want := []unitCall{
		{"start", "kubepods-podg_1.slice", base("nodekeeper pod g-1", "kubepods.slice", map[string]any{
			"CPUWeight": uint64(59), "CPUQuotaPerSecUSec": uint64(500000), "CPUQuotaPeriodUSec": uint64(100000),
			"MemoryMax": uint64(128 << 20), "TasksMax": uint64(math.MaxUint64)})},
		{"set", "kubepods-podg_1.slice", map[string]any{
			"CPUWeight": uint64(59), "CPUQuotaPerSecUSec": uint64(500000), "CPUQuotaPeriodUSec": uint64(100000),
			"MemoryMax": uint64(128 << 20), "TasksMax": uint64(math.MaxUint64)}},
	}
	if diff := cmp.Diff(want, f.calls); diff != "" {
		t.Errorf("systemd calls (-want +got):\n%s", diff)
	}
}

func TestSystemdJobFails(t *testing.T) {
	t.Parallel()
	root := v2Tree(t)
	f := newFakeSystemd(root)
	f.result = "failed"
	m := systemdManager(t, Config{FSRoot: root}, f)
	_, err := m.EnsurePod(pod("g-1", ctr(nil, rl("500m", "128Mi"))))
	if want := "start slice kubepods-podg_1.slice: systemd job failed"; err == nil || err.Error() != want {
		t.Fatalf("EnsurePod: %v, want %q", err, want)
	}
}

func TestSystemdRemovePod(t *testing.T) {
	t.Parallel()
	root := v1Tree(t, true)
	f := newFakeSystemd(filepath.Join(root, "cpu,cpuacct"), filepath.Join(root, "memory"), filepath.Join(root, "pids"))
	m := systemdManager(t, Config{FSRoot: root}, f)
	if _, err := m.EnsurePod(pod("b-1", ctr(rl("100m", ""), nil))); err != nil {
		t.Fatal(err)
	}
	podPath := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_1.slice"
	// A container's cgroup with a process, in a hierarchy systemd does not
	// manage: RemovePod refuses and stops nothing (stopping the slice would
	// kill it).
	ctrDir := filepath.Join(root, "cpuset", podPath, "cri-containerd-abc.scope")
	mkfile(t, filepath.Join(ctrDir, "cgroup.procs"), "4242\n")
	f.calls = nil
	err := m.RemovePod("b-1")
	if !errors.Is(err, ErrLiveProcesses) || !strings.Contains(err.Error(), "pids 4242") {
		t.Fatalf("RemovePod with a live process: %v, want ErrLiveProcesses naming pid 4242", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("RemovePod with a live process called systemd: %v", f.calls)
	}
	mkfile(t, filepath.Join(ctrDir, "cgroup.procs"), "")
	if err := m.RemovePod("b-1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]unitCall{{"stop", "kubepods-burstable-podb_1.slice", nil}}, f.calls); diff != "" {
		t.Errorf("systemd calls (-want +got):\n%s", diff)
	}
	for _, h := range m.layout.Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, podPath)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", filepath.Join(h, podPath), err)
		}
	}
	// Removing it again, or a pod systemd never had, does nothing.
	f.calls = nil
	if err := m.RemovePod("b-1"); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 0 {
		t.Errorf("RemovePod of an absent pod called systemd: %v", f.calls)
	}
}

// TestSystemdRemoveUnknownSlice: a pod cgroup left by an earlier boot (or
// made outside systemd) is removed although systemd knows no such unit.
func TestSystemdRemoveUnknownSlice(t *testing.T) {
	t.Parallel()
	root := v2Tree(t)
	f := newFakeSystemd(root)
	m := systemdManager(t, Config{FSRoot: root}, f)
	dir := filepath.Join(root, SystemdPodPath("/", v1.PodQOSBestEffort, "e-1"))
	mkfile(t, filepath.Join(dir, "cgroup.procs"), "")
	if err := m.RemovePod("e-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v, want it removed", dir, err)
	}
	if want := fmt.Sprint([]unitCall{{"stop", "kubepods-besteffort-pode_1.slice", nil}}); fmt.Sprint(f.calls) != want {
		t.Errorf("systemd calls %v, want %v", f.calls, want)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	sd, fs := Names{Driver: "systemd", Root: "/nk"}, Names{Driver: "cgroupfs", Root: "/nk"}
	tests := []struct {
		name      string
		got, want any
	}{
		{"systemd kubepods", sd.Kubepods(), "/nk.slice/nk-kubepods.slice"},
		{"cgroupfs kubepods", fs.Kubepods(), "/nk/kubepods"},
		{"default driver kubepods", Names{}.Kubepods(), "/kubepods"},
		{"systemd pods", sd.PodPaths("u-1"), []string{"/nk.slice/nk-kubepods.slice/nk-kubepods-podu_1.slice",
			"/nk.slice/nk-kubepods.slice/nk-kubepods-burstable.slice/nk-kubepods-burstable-podu_1.slice",
			"/nk.slice/nk-kubepods.slice/nk-kubepods-besteffort.slice/nk-kubepods-besteffort-podu_1.slice"}},
		{"cgroupfs pods", fs.PodPaths("u-1"), []string{"/nk/kubepods/podu-1", "/nk/kubepods/burstable/podu-1", "/nk/kubepods/besteffort/podu-1"}},
		{"systemd container", sd.Container("/kubepods.slice/kubepods-podu_1.slice", "abc"), "/kubepods.slice/kubepods-podu_1.slice/cri-containerd-abc.scope"},
		{"cgroupfs container", fs.Container("/kubepods/podu-1", "abc"), "/kubepods/podu-1/abc"},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// closedConn is a connection to systemd that has closed.
type closedConn struct{}

func (closedConn) StartTransientUnit(string, string, []sddbus.Property, chan<- string) (int, error) {
	return 0, godbus.ErrClosed
}
func (closedConn) SetUnitProperties(string, bool, ...sddbus.Property) error { return godbus.ErrClosed }
func (closedConn) StopUnit(string, string, chan<- string) (int, error) {
	return 0, godbus.ErrClosed
}

// TestSystemdRedial: a connection that closed (systemd re-executed, the bus
// restarted) is dialled again and the call made on the new one; a dial that
// fails is the call's error.
func TestSystemdRedial(t *testing.T) {
	t.Parallel()
	root := v2Tree(t)
	f := newFakeSystemd(root)
	conns := []systemdConn{closedConn{}, f}
	dials := 0
	var dialErr error
	cfg := Config{FSRoot: root, Driver: "systemd", systemdBooted: t.TempDir(), dialSystemd: func() (systemdConn, error) {
		if dialErr != nil {
			return nil, dialErr
		}
		c := conns[min(dials, len(conns)-1)]
		dials++
		return c, nil
	}}
	m := fixtureManager(t, cfg)
	if _, err := m.EnsurePod(pod("g-1", ctr(nil, rl("500m", "128Mi")))); err != nil {
		t.Fatal(err)
	}
	if dials != 2 || len(f.calls) != 1 || f.calls[0].Op != "start" {
		t.Errorf("%d dials, calls on the new connection %v; want 2 dials and the start there", dials, f.calls)
	}
	// The connection closes again, and systemd cannot be reached.
	m.sd.conn = closedConn{}
	dialErr = errors.New("dial unix /run/systemd/private: connect: connection refused")
	err := m.RemovePod("g-1")
	if err == nil || !strings.Contains(err.Error(), "connect to systemd over D-Bus: dial unix /run/systemd/private") {
		t.Errorf("RemovePod without systemd: %v, want the dial error", err)
	}
}
