package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// lockRoot takes an exclusive lock on rootDir/nodekeeper.lock, so two agents
// never share a root directory (and its containerd, pods and state). The lock
// goes with the process, also when it is killed.
func lockRoot(rootDir string) (unlock func(), err error) {
	path := filepath.Join(rootDir, "nodekeeper.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the root directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, ConfigError{fmt.Errorf("--root-dir %s: %w (%s is locked)", rootDir, ErrAgentRunning, path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	return func() { _ = f.Close() }, nil
}

// BridgeName names the managed containerd's CNI bridge after the root
// directory: the bridge is a host-wide object, and two agents (with two root
// directories) on one machine must not share one. The name fits the kernel's
// 15 bytes.
func BridgeName(rootDir string) string {
	if rootDir == DefaultRootDir {
		return "nk0"
	}
	sum := sha256.Sum256([]byte(rootDir))
	return "nk" + hex.EncodeToString(sum[:])[:8]
}

// capacity is the node's capacity: the CPUs this process may use, the memory,
// the root directory's filesystem as ephemeral storage and the pre-allocated
// huge pages of each size (hugepages-2Mi, hugepages-1Gi, ..., 0 when none).
// Pods come from maxPods (admission adds it).
func capacity(rootDir string, memory int64) (v1.ResourceList, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(rootDir, &st); err != nil {
		return nil, fmt.Errorf("ephemeral-storage capacity of %s: %w", rootDir, err)
	}
	c := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(memory, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI),
	}
	huge, err := hugePages(hugePagesDir)
	if err != nil {
		return nil, err
	}
	maps.Copy(c, huge)
	return c, nil
}

// hugePagesDir holds one directory per huge page size.
const hugePagesDir = "/sys/kernel/mm/hugepages"

// hugePages returns the pre-allocated huge pages under dir (hugepages-<N>kB/
// nr_hugepages) as the resources hugepages-<size>, in bytes; none when dir
// does not exist.
func hugePages(dir string) (v1.ResourceList, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := v1.ResourceList{}
	for _, e := range entries {
		kb, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "hugepages-"), "kB")
		size, err := strconv.ParseInt(kb, 10, 64)
		if !ok || err != nil || size <= 0 {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name(), "nr_hugepages"), err)
		}
		pageSize := resource.NewQuantity(size<<10, resource.BinarySI)
		out[v1.ResourceName(v1.ResourceHugePagesPrefix+pageSize.String())] = *resource.NewQuantity(n*size<<10, resource.BinarySI)
	}
	return out, nil
}

// hostIPv4 is the node's IP as the kubelet picks it without a cloud provider:
// the first IPv4 address of an interface that is up and not loopback, else
// 127.0.0.1.
func hostIPv4() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || strings.HasPrefix(ifc.Name, "nk") || strings.HasPrefix(ifc.Name, "veth") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
