package cgroups

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestRealSystemd makes the pod cgroups with the systemd driver on a machine
// whose init is systemd, under a cgroupRoot slice of its own: systemd knows
// the slices, with the limits as unit properties and in the cgroup files; a
// process put in a scope of the pod's slice (as runc puts a container) is
// held to the pod's memory limit; RemovePod refuses while it lives and stops
// the slice after.
func TestRealSystemd(t *testing.T) {
	integration.OnSystemd(t)
	if os.Geteuid() != 0 {
		integration.Require(t, "cgroup tests need root")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	id := "nktest" + hex.EncodeToString(rnd[:])
	root := "/" + id
	m, err := New(Config{Driver: "systemd", CgroupRoot: root, PodPidsLimit: 128, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sddbus.NewWithContext(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Cleanup(func() { // the test's slice and what it holds
		if err := m.sd.stopSlice("/" + id + ".slice"); err != nil {
			t.Errorf("stop the test's slice: %v", err)
		}
	})
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	p := pod("nk-real-1", ctr(rl("200m", "64Mi"), rl("200m", "64Mi")))
	parent, err := m.EnsurePod(p)
	if err != nil {
		t.Fatal(err)
	}
	slice := id + "-kubepods-podnk_real_1.slice"
	if want := "/" + id + ".slice/" + id + "-kubepods.slice/" + slice; parent != want {
		t.Fatalf("cgroup parent %q, want %q", parent, want)
	}
	if err := m.UpdateQoS([]*v1.Pod{p}); err != nil {
		t.Fatal(err)
	}

	// systemd has the slices, active, with the limits.
	unitProp := func(unit, iface, name string) any {
		t.Helper()
		var pr *sddbus.Property
		var err error
		if iface == "" {
			pr, err = conn.GetUnitPropertyContext(t.Context(), unit, name)
		} else {
			pr, err = conn.GetUnitTypePropertyContext(t.Context(), unit, iface, name)
		}
		if err != nil {
			t.Fatalf("%s of %s: %v", name, unit, err)
		}
		return pr.Value.Value()
	}
	for _, u := range []string{id + "-kubepods.slice", id + "-kubepods-burstable.slice", id + "-kubepods-besteffort.slice", slice} {
		if got := unitProp(u, "", "ActiveState"); got != "active" {
			t.Errorf("%s is %v, want active", u, got)
		}
	}
	if got := unitProp(slice, "Slice", "ControlGroup"); got != parent {
		t.Errorf("ControlGroup of %s is %v, want %s", slice, got, parent)
	}
	mem, tasks, weight := "MemoryMax", "TasksMax", "CPUWeight"
	wantWeight := uint64(29) // 204 shares, the kubelet's conversion since 1.35
	if m.Layout().Version == V1 {
		mem, weight, wantWeight = "MemoryLimit", "CPUShares", 204
	}
	for name, want := range map[string]uint64{mem: 64 << 20, tasks: 128, weight: wantWeight, "CPUQuotaPerSecUSec": 200000} {
		if got := unitProp(slice, "Slice", name); got != want {
			t.Errorf("%s of %s is %v, want %d", name, slice, got, want)
		}
	}

	// A process in a scope of the pod's slice, as runc's systemd driver
	// puts a container.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := bufio.NewReader(out)
	if l, err := lines.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("child said %q, %v; want ready", l, err)
	}
	scope := id + "-ctr.scope"
	ch := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(t.Context(), scope, "replace", []sddbus.Property{
		sddbus.PropSlice(slice), sddbus.PropPids(uint32(cmd.Process.Pid)),
		{Name: "Delegate", Value: godbus.MakeVariant(true)},
	}, ch); err != nil {
		t.Fatal(err)
	}
	if res := <-ch; res != "done" {
		t.Fatalf("start %s: %s", scope, res)
	}
	if got := cgroupOf(t, cmd.Process.Pid); got["memory"] != parent+"/"+scope && got["unified"] != parent+"/"+scope {
		t.Fatalf("child's cgroups %v, want %s", got, parent+"/"+scope)
	}
	files := map[string]string{"memory.max": "67108864", "cpu.max": "20000 100000", "pids.max": "128", "cpu.weight": "29"}
	if m.Layout().Version == V1 {
		files = map[string]string{"memory.limit_in_bytes": "67108864", "cpu.cfs_quota_us": "20000", "cpu.shares": "204"}
	}
	for f, want := range files {
		ctrl, _, _ := strings.Cut(f, ".")
		b, err := os.ReadFile(filepath.Join(m.Layout().Dir(ctrl, parent), f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(b)) != want {
			t.Errorf("%s of %s is %q, want %s", f, parent, strings.TrimSpace(string(b)), want)
		}
	}

	pid := strconv.Itoa(cmd.Process.Pid)
	if err := m.RemovePod(p.UID); !errors.Is(err, ErrLiveProcesses) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("RemovePod while the child lives: %v, want ErrLiveProcesses naming pid %s", err, pid)
	}
	if got := unitProp(slice, "", "ActiveState"); got != "active" {
		t.Fatalf("%s is %v after a refused RemovePod, want active", slice, got)
	}

	// Past its memory limit the kernel kills it.
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	rest, _ := lines.ReadString('\n')
	err = cmd.Wait()
	waited = true
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v after saying %q; want it killed (SIGKILL) by the memory limit", err, rest)
	}

	// An empty scope is systemd's to remove; the pod's slice is then empty.
	if err := m.RemovePod(p.UID); err != nil {
		t.Fatal(err)
	}
	if got := unitProp(slice, "", "ActiveState"); got != "inactive" {
		t.Errorf("%s is %v after RemovePod, want inactive", slice, got)
	}
	for _, h := range m.Layout().Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, parent)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after RemovePod: %v", filepath.Join(h, parent), err)
		}
	}
	uids, err := m.Pods()
	if err != nil || len(uids) != 0 {
		t.Errorf("Pods after RemovePod: %v, %v; want none", uids, err)
	}
}
