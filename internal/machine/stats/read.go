package stats

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// readUint reads a file holding one unsigned number ("max" reads as
// unlimited, the largest uint64).
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return ^uint64(0), nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: value %q is not a number", path, s)
	}
	return v, nil
}

// readKeyed reads a "key value" file (memory.stat, cpu.stat) and returns the
// values of keys; a key absent from the file is absent from the map.
func readKeyed(path string, keys ...string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(keys))
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k != want {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: field %s: value %q is not a number", path, k, v)
			}
			out[k] = n
		}
	}
	return out, nil
}

// meminfo is what the provider reads from /proc/meminfo, in bytes.
type meminfo struct {
	total, swapTotal, swapFree uint64
	hasSwap                    bool
}

// readMeminfo reads MemTotal, SwapTotal and SwapFree from a /proc/meminfo.
func readMeminfo(path string) (meminfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return meminfo{}, err
	}
	var m meminfo
	found := false
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch k {
		case "MemTotal":
			dst, found = &m.total, true
		case "SwapTotal":
			dst, m.hasSwap = &m.swapTotal, true
		case "SwapFree":
			dst = &m.swapFree
		default:
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return meminfo{}, fmt.Errorf("%s: field %s: no value", path, k)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("%s: field %s: value %q is not a number", path, k, f[0])
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		*dst = n
	}
	if !found {
		return meminfo{}, fmt.Errorf("%s: no MemTotal field", path)
	}
	return m, nil
}

// MemoryCapacity returns the machine's memory (MemTotal of
// procRoot/meminfo, "" being /proc), in bytes: the node's memory capacity,
// the same figure the Summary's availableBytes is computed from.
func MemoryCapacity(procRoot string) (int64, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	m, err := readMeminfo(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, fmt.Errorf("memory capacity: %w", err)
	}
	if m.total == 0 || m.total > math.MaxInt64 {
		return 0, fmt.Errorf("memory capacity: MemTotal %d bytes is out of range", m.total)
	}
	return int64(m.total), nil
}

// SwapCapacity returns the machine's swap (SwapTotal of procRoot/meminfo,
// "" being /proc), in bytes; 0 when it has none or the kernel reports none.
func SwapCapacity(procRoot string) (int64, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	m, err := readMeminfo(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, fmt.Errorf("swap capacity: %w", err)
	}
	if m.swapTotal > math.MaxInt64 {
		return 0, fmt.Errorf("swap capacity: SwapTotal %d bytes is out of range", m.swapTotal)
	}
	return int64(m.swapTotal), nil
}

// readThreads returns the number of scheduling entities (processes and
// threads) on the machine: the denominator of /proc/loadavg's fourth field.
func readThreads(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, fmt.Errorf("%s: want 5 fields, got %q", path, strings.TrimSpace(string(b)))
	}
	_, total, ok := strings.Cut(f[3], "/")
	n, err := strconv.ParseInt(total, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("%s: field 4: value %q is not running/total", path, f[3])
	}
	return n, nil
}

// readBootTime returns the btime of a /proc/stat, in seconds since the epoch.
func readBootTime(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: field btime: value %q is not a number", path, strings.TrimSpace(v))
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no btime field", path)
}

// readPSI reads a pressure file (/proc/pressure/memory, a cgroup's
// memory.pressure): "some avg10=.. avg60=.. avg300=.. total=.." and the same
// for "full" (absent for cpu on older kernels: zero then).
func readPSI(path string) (*statsapi.PSIStats, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p statsapi.PSIStats
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var d *statsapi.PSIData
		switch f[0] {
		case "some":
			d = &p.Some
		case "full":
			d = &p.Full
		default:
			return nil, fmt.Errorf("%s: unknown line %q", path, strings.TrimSpace(line))
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "avg10":
				d.Avg10, err = strconv.ParseFloat(v, 64)
			case "avg60":
				d.Avg60, err = strconv.ParseFloat(v, 64)
			case "avg300":
				d.Avg300, err = strconv.ParseFloat(v, 64)
			case "total":
				d.Total, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: field %s %s: value %q is not a number", path, f[0], k, v)
			}
		}
	}
	return &p, nil
}

// readPIDMax returns the machine's pid limit: the smaller of
// kernel/pid_max and kernel/threads-max under procRoot/sys (threads-max is
// optional).
func readPIDMax(procRoot string) (int64, error) {
	pidMax, err := readUint(filepath.Join(procRoot, "sys/kernel/pid_max"))
	if err != nil {
		return 0, err
	}
	if t, err := readUint(filepath.Join(procRoot, "sys/kernel/threads-max")); err == nil && t < pidMax {
		pidMax = t
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	return int64(min(pidMax, 1<<62)), nil
}
