package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// SwapOn makes sure the machine has swap on for t: when /proc/swaps lists
// none, it adds a zram device of size bytes (the zram module's hot_add),
// makes it swap and turns it on, and at t's end turns it off and removes the
// device; swap the machine already has is used as it is, and left alone. A
// machine without root, zram or mkswap cannot run t (Require). Swap is
// machine-wide: call it only in tests gated to a throwaway machine, such as
// OnCgroup(t, 2) in the cgroup v2 VM lane.
func SwapOn(t testing.TB, size int64) {
	t.Helper()
	if b, err := os.ReadFile("/proc/swaps"); err == nil && len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1 {
		return
	}
	if os.Geteuid() != 0 {
		Require(t, "turning swap on needs root")
	}
	if _, err := exec.LookPath("mkswap"); err != nil {
		Require(t, "no mkswap to turn swap on")
	}
	const control = "/sys/class/zram-control"
	if _, err := os.Stat(control); err != nil {
		if out, err := exec.Command("modprobe", "zram", "num_devices=0").CombinedOutput(); err != nil {
			Require(t, fmt.Sprintf("no zram for a swap device: modprobe zram: %v: %s", err, out))
		}
	}
	b, err := os.ReadFile(filepath.Join(control, "hot_add"))
	if err != nil {
		Require(t, fmt.Sprintf("no zram device for swap: %v", err))
	}
	n := strings.TrimSpace(string(b))
	dev := "/dev/zram" + n
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(control, "hot_remove"), []byte(n), 0); err != nil {
			t.Errorf("remove %s: %v", dev, err)
		}
	})
	if err := os.WriteFile("/sys/block/zram"+n+"/disksize", []byte(strconv.FormatInt(size, 10)), 0); err != nil {
		t.Fatalf("size %s: %v", dev, err)
	}
	if out, err := exec.Command("mkswap", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkswap %s: %v: %s", dev, err, out)
	}
	if out, err := exec.Command("swapon", dev).CombinedOutput(); err != nil {
		t.Fatalf("swapon %s: %v: %s", dev, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("swapoff", dev).CombinedOutput(); err != nil {
			t.Errorf("swapoff %s: %v: %s", dev, err, out)
		}
	})
}
