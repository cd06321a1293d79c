package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// v1Tree makes a cgroup v1 fixture mount in a temp dir: one hierarchy per
// controller, or cpu and cpuacct co-mounted as "cpu,cpuacct" with symlinks.
func v1Tree(t *testing.T, comount bool) string {
	t.Helper()
	root := t.TempDir()
	ctrls := []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "unified"}
	if comount {
		ctrls = []string{"cpu,cpuacct", "cpuset", "memory", "pids", "freezer", "unified"}
	}
	if err := os.Mkdir(filepath.Join(root, "not-mounted"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range ctrls {
		mkfile(t, filepath.Join(root, c, "cgroup.procs"), "")
	}
	mkfile(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "0-1\n")
	mkfile(t, filepath.Join(root, "cpuset", "cpuset.mems"), "0\n")
	if comount {
		for _, l := range []string{"cpu", "cpuacct"} {
			if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// v2Tree makes a cgroup v2 fixture mount in a temp dir.
func v2Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	mkfile(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory pids rdma\n")
	mkfile(t, filepath.Join(root, "cgroup.subtree_control"), "cpu memory\n")
	mkfile(t, filepath.Join(root, "cgroup.procs"), "1\n")
	return root
}

func mkfile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// files returns every regular file under dir (relative to dir) with its
// content.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func pod(uid string, ctrs ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid)}, Spec: v1.PodSpec{Containers: ctrs}}
}

func ctr(req, lim v1.ResourceList) v1.Container {
	return v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
}

func rl(cpu, mem string) v1.ResourceList {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// hp adds a hugepages-<size> quantity to l.
func hp(l v1.ResourceList, size, q string) v1.ResourceList {
	l[v1.ResourceName(v1.ResourceHugePagesPrefix+size)] = resource.MustParse(q)
	return l
}

func TestPodResources(t *testing.T) {
	t.Parallel()
	init := func(p *v1.Pod, c v1.Container) *v1.Pod {
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		pids int64
		want resources
	}{
		{"besteffort", pod("u", ctr(nil, nil)), -1, resources{shares: 2, quota: -1, memory: -1, pids: -1}},
		{"besteffort with pids limit", pod("u", ctr(nil, nil)), 100, resources{shares: 2, quota: -1, memory: -1, pids: 100}},
		{"guaranteed", pod("u", ctr(rl("500m", "64Mi"), rl("500m", "64Mi"))), 0,
			resources{shares: 512, quota: 50000, memory: 64 << 20, pids: -1}},
		{"limits only default the requests (guaranteed)", pod("u", ctr(nil, rl("250m", "32Mi"))), 0,
			resources{shares: 256, quota: 25000, memory: 32 << 20, pids: -1}},
		{"burstable, every container limited", pod("u", ctr(rl("100m", "10Mi"), rl("200m", "20Mi")), ctr(rl("100m", ""), rl("1", "30Mi"))), 0,
			resources{shares: 204, quota: 120000, memory: 50 << 20, pids: -1}},
		{"burstable, one container without limits", pod("u", ctr(rl("100m", "10Mi"), rl("200m", "20Mi")), ctr(rl("300m", ""), nil)), 0,
			resources{shares: 409, quota: -1, memory: -1, pids: -1}},
		{"burstable, cpu limits only", pod("u", ctr(rl("100m", "10Mi"), rl("200m", "")), ctr(nil, rl("300m", ""))), 0,
			resources{shares: 409, quota: 50000, memory: -1, pids: -1}},
		{"tiny request: at least 2 shares and 1000 µs", pod("u", ctr(rl("1m", ""), rl("1m", ""))), 0,
			resources{shares: 2, quota: 1000, memory: -1, pids: -1}},
		{"huge request: at most 262144 shares", pod("u", ctr(rl("1000", ""), nil)), 0,
			resources{shares: 262144, quota: -1, memory: -1, pids: -1}},
		{"init container larger than the app containers", init(pod("u", ctr(rl("100m", ""), nil)), ctr(rl("2", ""), nil)), 0,
			resources{shares: 2048, quota: -1, memory: -1, pids: -1}},
		{"hugepages", pod("u", ctr(hp(rl("1", "1Gi"), "2Mi", "8Mi"), hp(rl("1", "1Gi"), "2Mi", "8Mi")), ctr(hp(rl("1", "1Gi"), "1Gi", "2Gi"), hp(rl("1", "1Gi"), "1Gi", "2Gi"))), 0,
			resources{shares: 2048, quota: 200000, memory: 2 << 30, pids: -1, hugepages: map[int64]int64{2 << 20: 8 << 20, 1 << 30: 2 << 30}}},
		{"init container without limits: no quota", init(pod("u", ctr(rl("100m", "1Mi"), rl("100m", "1Mi"))), ctr(rl("100m", ""), nil)), 0,
			resources{shares: 102, quota: -1, memory: -1, pids: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, podResources(tc.pod, tc.pids), cmp.AllowUnexported(resources{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("podResources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSharesToWeight(t *testing.T) {
	t.Parallel()
	for shares, want := range map[uint64]uint64{0: 1, 2: 1, 3: 2, 102: 17, 512: 59, 1024: 100, 2048: 174, 22000: 1204, 262143: 10000, 262144: 10000} {
		if got := sharesToWeight(shares); got != want {
			t.Errorf("sharesToWeight(%d) = %d, want %d", shares, got, want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	v1root := v1Tree(t, false)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"systemd not running", Config{FSRoot: v1root, Driver: "systemd", systemdBooted: filepath.Join(v1root, "not-mounted", "none")}, `cgroupDriver "systemd": systemd is not the init system of this host`},
		{"unknown driver", Config{FSRoot: v1root, Driver: "cgroupsfs"}, `cgroupDriver "cgroupsfs": want "cgroupfs" or "systemd"`},
		{"relative root", Config{FSRoot: v1root, CgroupRoot: "nk"}, `cgroupRoot "nk": want an absolute cgroup path such as /`},
		{"dotdot root", Config{FSRoot: v1root, CgroupRoot: "/a/../b"}, `cgroupRoot "/a/../b": must not contain ..`},
		{"no memory hierarchy", Config{FSRoot: t.TempDir()}, "the cpu hierarchy is not mounted"},
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
}

// TestNewChecksMachine: a cgroupRoot the machine cannot hold pod cgroups
// under is refused by New, naming cgroupRoot, the file or directory at fault
// and what the machine has; one it can is accepted.
func TestNewChecksMachine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tree  func(t *testing.T, root string) // adds to a v2 (or v1) fixture tree
		v1    bool
		croot string
		other []string // paths, relative to the tree, on tmpfs
		want  string   // "" accepts; else a substring of the error, {root} the tree
	}{
		{name: "v2, cgroupRoot made later", croot: "/nk/sub"},
		{name: "v2, cgroupRoot of the machine", croot: "/nk", tree: func(t *testing.T, root string) {
			mkfile(t, filepath.Join(root, "nk", "cgroup.type"), "domain\n")
			mkfile(t, filepath.Join(root, "nk", "cgroup.procs"), "")
		}},
		{name: "v2 root is not a cgroup2 mount", croot: "/nk", other: []string{""},
			want: `cgroupRoot "/nk": {root} holds cgroup.controllers but is not a cgroup2 mount (its filesystem is tmpfs)`},
		{name: "v2 cgroupRoot on another filesystem", croot: "/nk/pods", other: []string{"nk"},
			tree: func(t *testing.T, root string) { mkfile(t, filepath.Join(root, "nk", "cgroup.procs"), "") },
			want: `cgroupRoot "/nk/pods": {root}/nk is not in the cgroup2 mount at {root}: it is on another filesystem (tmpfs) mounted there`},
		{name: "v2 root without memory and pids", croot: "/",
			tree: func(t *testing.T, root string) {
				mkfile(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io\n")
			},
			want: `cgroupRoot "/": pod cgroups need the cpu, memory, pids controllers; {root}/cgroup.controllers offers no memory, pids (it has "cpuset cpu io")`},
		{name: "v2 parent holds processes and lacks controllers", croot: "/nk/pods", tree: func(t *testing.T, root string) {
			mkfile(t, filepath.Join(root, "nk", "cgroup.type"), "domain\n")
			mkfile(t, filepath.Join(root, "nk", "cgroup.subtree_control"), "cpu\n")
			mkfile(t, filepath.Join(root, "nk", "cgroup.procs"), "41\n42\n")
		}, want: `cgroupRoot "/nk/pods": {root}/nk/cgroup.subtree_control does not enable memory, pids for its children (it has "cpu"), and nodekeeper cannot enable them: it holds processes (41,42)`},
		{name: "v2 parent holds processes and enables the controllers", croot: "/nk/pods", tree: func(t *testing.T, root string) {
			// (the kernel forbids it for a domain cgroup; a threaded one may)
			mkfile(t, filepath.Join(root, "nk", "cgroup.type"), "domain threaded\n")
			mkfile(t, filepath.Join(root, "nk", "cgroup.subtree_control"), "cpu memory pids\n")
			mkfile(t, filepath.Join(root, "nk", "cgroup.procs"), "41\n")
		}},
		{name: "v2 machine root holds processes", croot: "/", tree: func(t *testing.T, root string) {
			mkfile(t, filepath.Join(root, "cgroup.subtree_control"), "")
		}},
		{name: "v1", v1: true, croot: "/nk"},
		{name: "v1 without pids", v1: true, croot: "/",
			tree: func(t *testing.T, root string) { os.RemoveAll(filepath.Join(root, "pids")) },
			want: `cgroupRoot "/": pod cgroups need the cpu, memory, pids hierarchies of cgroup v1; {root} has no pids mounted (mounted: cpu cpuacct cpuset freezer memory unified)`},
		{name: "v1 memory is not a cgroup hierarchy", v1: true, croot: "/", other: []string{"memory"},
			want: `cgroupRoot "/": {root}/memory is not a cgroup v1 hierarchy (its filesystem is tmpfs)`},
		{name: "v1 cgroupRoot on another filesystem", v1: true, croot: "/nk", other: []string{"memory/nk"},
			tree: func(t *testing.T, root string) { mkfile(t, filepath.Join(root, "memory", "nk", "cgroup.procs"), "") },
			want: `cgroupRoot "/nk": {root}/memory/nk is not in the cgroup v1 hierarchy at {root}/memory: it is on another filesystem (tmpfs)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := v2Tree(t)
			if tc.v1 {
				root = v1Tree(t, false)
			}
			if tc.tree != nil {
				tc.tree(t, root)
			}
			var other []string
			for _, o := range tc.other {
				other = append(other, filepath.Join(root, o))
			}
			_, err := newManager(Config{FSRoot: root, CgroupRoot: tc.croot}, fixtureFS(other...))
			want := strings.ReplaceAll(tc.want, "{root}", root)
			switch {
			case want == "" && err != nil:
				t.Fatalf("New: %v, want it accepted", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Fatalf("New: %v\nwant an error containing %q", err, want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	sep := v1Tree(t, false)
	co := v1Tree(t, true)
	v2 := v2Tree(t)
	tests := []struct {
		name string
		root string
		want Layout
	}{
		{"v1 separate", sep, Layout{Version: V1, Root: sep, Dirs: map[string]string{
			"cpu": sep + "/cpu", "cpuacct": sep + "/cpuacct", "cpuset": sep + "/cpuset", "memory": sep + "/memory", "pids": sep + "/pids"},
			Others: []string{sep + "/freezer", sep + "/unified"}}},
		{"v1 co-mounted", co, Layout{Version: V1, Root: co, Dirs: map[string]string{
			"cpu": co + "/cpu,cpuacct", "cpuacct": co + "/cpu,cpuacct", "cpuset": co + "/cpuset", "memory": co + "/memory", "pids": co + "/pids"},
			Others: []string{co + "/freezer", co + "/unified"}}},
		{"v2", v2, Layout{Version: V2, Root: v2, Controllers: []string{"cpuset", "cpu", "io", "memory", "pids", "rdma"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Detect(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Detect (-want +got):\n%s", diff)
			}
		})
	}
}

// fixtureFS is the fsTypeFunc of a fixture tree: a path that exists is on
// cgroup2 when it is in a v2 tree or a v1 tree's unified hierarchy, else on
// cgroup v1; other lists paths on another filesystem (tmpfs).
func fixtureFS(other ...string) fsTypeFunc {
	return func(p string) (int64, error) {
		if _, err := os.Stat(p); err != nil {
			return 0, err
		}
		if slices.Contains(other, p) {
			return unix.TMPFS_MAGIC, nil
		}
		for d := p; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil || filepath.Base(d) == "unified" {
				return unix.CGROUP2_SUPER_MAGIC, nil
			}
		}
		return unix.CGROUP_SUPER_MAGIC, nil
	}
}

// fixtureManager is New over a fixture tree, with rmdir removing the plain
// fixture directories.
func fixtureManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := newManager(cfg, fixtureFS())
	if err != nil {
		t.Fatal(err)
	}
	m.rmdir = os.RemoveAll
	return m
}

func TestEnsureV1(t *testing.T) {
	t.Parallel()
	root := v1Tree(t, true)
	m := fixtureManager(t, Config{FSRoot: root, CgroupRoot: "/nk", PodPidsLimit: 64, KubepodsLimits: rl("1500m", "1Gi")})
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	parents := map[string]string{}
	for _, p := range []*v1.Pod{
		pod("g", ctr(rl("500m", "64Mi"), rl("500m", "64Mi"))),
		pod("b", ctr(rl("100m", ""), nil)),
		pod("e", ctr(nil, nil)),
	} {
		parent, err := m.EnsurePod(p)
		if err != nil {
			t.Fatal(err)
		}
		parents[string(p.UID)] = parent
	}
	if diff := cmp.Diff(map[string]string{"g": "/nk/kubepods/podg", "b": "/nk/kubepods/burstable/podb", "e": "/nk/kubepods/besteffort/pode"}, parents); diff != "" {
		t.Errorf("cgroup parents (-want +got):\n%s", diff)
	}
	cpuset := func(dir string) map[string]string {
		return map[string]string{"cpuset/" + dir + "/cpuset.cpus": "0-1", "cpuset/" + dir + "/cpuset.mems": "0"}
	}
	want := map[string]string{
		"cpu,cpuacct/nk/kubepods/cpu.shares":                       "1536",
		"cpu,cpuacct/nk/kubepods/cpu.cfs_quota_us":                 "-1",
		"memory/nk/kubepods/memory.limit_in_bytes":                 "1073741824",
		"pids/nk/kubepods/pids.max":                                "max",
		"cpu,cpuacct/nk/kubepods/besteffort/cpu.shares":            "2",
		"cpu,cpuacct/nk/kubepods/besteffort/cpu.cfs_quota_us":      "-1",
		"memory/nk/kubepods/besteffort/memory.limit_in_bytes":      "-1",
		"pids/nk/kubepods/besteffort/pids.max":                     "max",
		"cpu,cpuacct/nk/kubepods/podg/cpu.shares":                  "512",
		"cpu,cpuacct/nk/kubepods/podg/cpu.cfs_period_us":           "100000",
		"cpu,cpuacct/nk/kubepods/podg/cpu.cfs_quota_us":            "50000",
		"memory/nk/kubepods/podg/memory.limit_in_bytes":            "67108864",
		"pids/nk/kubepods/podg/pids.max":                           "64",
		"cpu,cpuacct/nk/kubepods/burstable/podb/cpu.shares":        "102",
		"cpu,cpuacct/nk/kubepods/burstable/podb/cpu.cfs_quota_us":  "-1",
		"memory/nk/kubepods/burstable/podb/memory.limit_in_bytes":  "-1",
		"pids/nk/kubepods/burstable/podb/pids.max":                 "64",
		"cpu,cpuacct/nk/kubepods/besteffort/pode/cpu.shares":       "2",
		"cpu,cpuacct/nk/kubepods/besteffort/pode/cpu.cfs_quota_us": "-1",
		"memory/nk/kubepods/besteffort/pode/memory.limit_in_bytes": "-1",
		"pids/nk/kubepods/besteffort/pode/pids.max":                "64",
		"cpu,cpuacct/cgroup.procs":                                 "",
		"memory/cgroup.procs":                                      "",
		"pids/cgroup.procs":                                        "",
		"freezer/cgroup.procs":                                     "",
		"unified/cgroup.procs":                                     "",
		"cpuset/cgroup.procs":                                      "",
		"cpuset/cpuset.cpus":                                       "0-1\n",
		"cpuset/cpuset.mems":                                       "0\n",
	}
	for _, d := range []string{"nk", "nk/kubepods", "nk/kubepods/burstable", "nk/kubepods/besteffort", "nk/kubepods/podg", "nk/kubepods/burstable/podb", "nk/kubepods/besteffort/pode"} {
		for k, v := range cpuset(d) {
			want[k] = v
		}
	}
	if diff := cmp.Diff(want, files(t, root)); diff != "" {
		t.Errorf("cgroup files (-want +got):\n%s", diff)
	}

	// The pod cgroups exist in the hierarchies without limits too.
	for _, d := range []string{"freezer", "unified"} {
		for _, p := range []string{"nk/kubepods/podg", "nk/kubepods/burstable/podb", "nk/kubepods/besteffort/pode"} {
			if _, err := os.Stat(filepath.Join(root, d, p)); err != nil {
				t.Errorf("pod cgroup missing from the %s hierarchy: %v", d, err)
			}
		}
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{"b", "e", "g"}, uids); diff != "" {
		t.Errorf("Pods (-want +got):\n%s", diff)
	}

	// A process in a child (container) cgroup of podb keeps it.
	mkfile(t, filepath.Join(root, "memory/nk/kubepods/burstable/podb/ctr1/cgroup.procs"), "4242\n4243\n")
	err = m.RemovePod("b")
	if !errors.Is(err, ErrLiveProcesses) || !strings.Contains(err.Error(), "podb/ctr1 holds pids 4242,4243") {
		t.Fatalf("RemovePod with live processes: %v, want ErrLiveProcesses naming the cgroup and pids", err)
	}
	if _, err := os.Stat(filepath.Join(root, "cpu,cpuacct/nk/kubepods/burstable/podb")); err != nil {
		t.Errorf("RemovePod with live processes removed something: %v", err)
	}
	mkfile(t, filepath.Join(root, "memory/nk/kubepods/burstable/podb/ctr1/cgroup.procs"), "")
	for _, uid := range []types.UID{"b", "g", "absent"} {
		if err := m.RemovePod(uid); err != nil {
			t.Fatalf("RemovePod(%s): %v", uid, err)
		}
	}
	for _, d := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "freezer", "unified"} {
		for _, p := range []string{"nk/kubepods/podg", "nk/kubepods/burstable/podb"} {
			if _, err := os.Stat(filepath.Join(root, d, p)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s/%s still there after RemovePod: %v", d, p, err)
			}
		}
	}
	uids, err = m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{"e"}, uids); diff != "" {
		t.Errorf("Pods after RemovePod (-want +got):\n%s", diff)
	}
}

func TestEnsureV2(t *testing.T) {
	t.Parallel()
	root := v2Tree(t)
	m := fixtureManager(t, Config{FSRoot: root, PodPidsLimit: -1})
	parent, err := m.EnsurePod(pod("g", ctr(rl("1", "1Gi"), rl("1", "1Gi"))))
	if err != nil {
		t.Fatal(err)
	}
	if parent != "/kubepods/podg" {
		t.Errorf("cgroup parent %q, want /kubepods/podg", parent)
	}
	if _, err := m.EnsurePod(pod("b", ctr(rl("100m", "1Mi"), rl("", "2Mi")))); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"cgroup.controllers":                             "cpuset cpu io memory pids rdma\n",
		"cgroup.procs":                                   "1\n",
		"cgroup.subtree_control":                         "+cpuset +cpu +io +memory +pids",
		"kubepods/cgroup.subtree_control":                "+cpuset +cpu +io +memory +pids",
		"kubepods/podg/cgroup.subtree_control":           "+cpuset +cpu +io +memory +pids",
		"kubepods/podg/cpu.weight":                       "100",
		"kubepods/podg/cpu.max":                          "100000 100000",
		"kubepods/podg/memory.max":                       "1073741824",
		"kubepods/podg/pids.max":                         "max",
		"kubepods/burstable/cgroup.subtree_control":      "+cpuset +cpu +io +memory +pids",
		"kubepods/burstable/podb/cgroup.subtree_control": "+cpuset +cpu +io +memory +pids",
		"kubepods/burstable/podb/cpu.weight":             "17",
		"kubepods/burstable/podb/cpu.max":                "max 100000",
		"kubepods/burstable/podb/memory.max":             "2097152",
		"kubepods/burstable/podb/pids.max":               "max",
	}
	if diff := cmp.Diff(want, files(t, root)); diff != "" {
		t.Errorf("cgroup files (-want +got):\n%s", diff)
	}
	if err := m.RemovePod("g"); err != nil {
		t.Fatal(err)
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{"b"}, uids); diff != "" {
		t.Errorf("Pods after RemovePod (-want +got):\n%s", diff)
	}
}

func TestUpdateQoS(t *testing.T) {
	t.Parallel()
	pods := []*v1.Pod{
		pod("b1", ctr(rl("100m", ""), nil)),
		pod("b2", ctr(rl("300m", "1Mi"), rl("", "2Mi"))),
		pod("g", ctr(rl("1", "1Mi"), rl("1", "1Mi"))),
		pod("e", ctr(nil, nil)),
	}
	tests := []struct {
		name  string
		root  func(t *testing.T) string
		pods  []*v1.Pod
		files map[string]string
	}{
		{"v1 burstable pods", func(t *testing.T) string { return v1Tree(t, false) }, pods,
			map[string]string{"cpu/kubepods/burstable/cpu.shares": "409", "cpu/kubepods/besteffort/cpu.shares": "2"}},
		{"v1 no burstable pods", func(t *testing.T) string { return v1Tree(t, false) }, pods[2:],
			map[string]string{"cpu/kubepods/burstable/cpu.shares": "2", "cpu/kubepods/besteffort/cpu.shares": "2"}},
		{"v2 burstable pods", v2Tree, pods,
			map[string]string{"kubepods/burstable/cpu.weight": "49", "kubepods/besteffort/cpu.weight": "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := tc.root(t)
			m := fixtureManager(t, Config{FSRoot: root})
			if err := m.EnsureQoS(); err != nil {
				t.Fatal(err)
			}
			if err := m.UpdateQoS(tc.pods); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for f := range tc.files {
				b, err := os.ReadFile(filepath.Join(root, f))
				if err != nil {
					t.Fatal(err)
				}
				got[f] = string(b)
			}
			if diff := cmp.Diff(tc.files, got); diff != "" {
				t.Errorf("QoS shares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHugepages checks that a pod cgroup gets a hugetlb limit for every page
// size the machine has: the pod's own, 0 for the sizes it did not request.
func TestHugepages(t *testing.T) {
	t.Parallel()
	p := pod("h", ctr(hp(rl("1", "1Gi"), "2Mi", "8Mi"), hp(rl("1", "1Gi"), "2Mi", "8Mi")))
	tests := []struct {
		name string
		tree func(t *testing.T) string
		want map[string]string
	}{
		{"v1", func(t *testing.T) string {
			root := v1Tree(t, false)
			for _, f := range []string{"cgroup.procs", "hugetlb.2MB.limit_in_bytes", "hugetlb.1GB.limit_in_bytes", "hugetlb.2MB.rsvd.limit_in_bytes", "hugetlb.2MB.usage_in_bytes"} {
				mkfile(t, filepath.Join(root, "hugetlb", f), "")
			}
			return root
		}, map[string]string{"hugetlb/kubepods/podh/hugetlb.2MB.limit_in_bytes": "8388608", "hugetlb/kubepods/podh/hugetlb.1GB.limit_in_bytes": "0"}},
		{"v2", func(t *testing.T) string {
			root := v2Tree(t)
			mkfile(t, filepath.Join(root, "cgroup.controllers"), "cpu memory hugetlb pids\n")
			for _, f := range []string{"hugetlb.2MB.max", "hugetlb.1GB.max", "hugetlb.2MB.rsvd.max", "hugetlb.2MB.current"} {
				mkfile(t, filepath.Join(root, "kubepods", f), "max\n")
			}
			return root
		}, map[string]string{"kubepods/podh/hugetlb.2MB.max": "8388608", "kubepods/podh/hugetlb.1GB.max": "0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := tc.tree(t)
			m := fixtureManager(t, Config{FSRoot: root})
			if _, err := m.EnsurePod(p); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range files(t, root) {
				if strings.Contains(k, "podh/hugetlb.") {
					got[k] = v
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hugetlb files (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlace: the runtime's cgroup is made in every hierarchy with the pid in
// its cgroup.procs; on v2 its ancestors enable the controllers and it does
// not (a cgroup that enables them for children may hold no process). / and
// the pods' tree are refused.
func TestPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tree func(*testing.T) string
		want map[string]string // files under the fixture root that Place writes
	}{
		{"v1", func(t *testing.T) string { return v1Tree(t, true) }, map[string]string{
			"cpu,cpuacct/nk/rt/cgroup.procs": "42", "cpuset/nk/rt/cgroup.procs": "42", "cpuset/nk/rt/cpuset.cpus": "0-1",
			"cpuset/nk/rt/cpuset.mems": "0", "cpuset/nk/cpuset.cpus": "0-1", "cpuset/nk/cpuset.mems": "0",
			"memory/nk/rt/cgroup.procs": "42", "pids/nk/rt/cgroup.procs": "42", "freezer/nk/rt/cgroup.procs": "42",
			"unified/nk/rt/cgroup.procs": "42",
		}},
		{"v2", v2Tree, map[string]string{
			"cgroup.subtree_control":    "+cpuset +cpu +io +memory +pids",
			"nk/cgroup.subtree_control": "+cpuset +cpu +io +memory +pids",
			"nk/rt/cgroup.procs":        "42",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := tc.tree(t)
			before := files(t, root)
			m := fixtureManager(t, Config{FSRoot: root, CgroupRoot: "/nk"})
			if err := m.Place("/nk/rt", 42); err != nil {
				t.Fatal(err)
			}
			got := files(t, root)
			for k, v := range before {
				if got[k] == v {
					delete(got, k)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("files written (-want +got):\n%s", diff)
			}
			if tc.name == "v2" {
				// A cgroup with controllers on for children may hold no process.
				mkfile(t, filepath.Join(root, "nk", "inner", "cgroup.subtree_control"), "cpu memory")
				err := m.Place("/nk/inner", 42)
				if want := `cgroup "/nk/inner": it enables cpu memory for child cgroups`; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Place in a cgroup with controllers enabled: %v, want an error containing %q", err, want)
				}
				if _, err := os.Stat(filepath.Join(root, "nk", "inner", "cgroup.procs")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("Place wrote cgroup.procs of a cgroup with controllers enabled: %v", err)
				}
			}
			for _, bad := range []string{"/", "/nk/kubepods", "/nk/kubepods/x", "rel", "/a/../b"} {
				if err := m.Place(bad, 42); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
					t.Errorf("Place(%q): %v, want an error naming it", bad, err)
				}
			}
		})
	}
}

// TestEmptyTreeSkipsWhatVanished: a cgroup that is gone when the walk reaches
// it is no error (systemd removes an empty scope on its own, and the lane's
// TestRealSystemd failed with "open .../ctr.scope: no such file or
// directory" when it went between the pod slice's listing and its walk); the
// rest of the tree is still listed, parents first.
func TestEmptyTreeSkipsWhatVanished(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	gone := filepath.Join(root, "gone.scope")
	if tree, err := emptyTree(gone); err != nil || len(tree) != 0 {
		t.Errorf("emptyTree(gone) = %v, %v; want nothing and no error", tree, err)
	}
	kept := filepath.Join(root, "pod", "ctr.scope")
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	tree, err := emptyTree(filepath.Join(root, "pod"))
	if want := []string{filepath.Join(root, "pod"), kept}; err != nil || !slices.Equal(tree, want) {
		t.Errorf("emptyTree(pod) = %v, %v; want %v", tree, err, want)
	}
}
