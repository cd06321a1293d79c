package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// requiredControllers are the controllers pod cgroups cannot do without, on
// either version: cpu (weight and quota), memory (limit, OOM, stats) and pids
// (podPidsLimit). The kubelet refuses a cgroupRoot that lacks them too.
var requiredControllers = []string{"cpu", "memory", "pids"}

// fsTypeFunc returns the filesystem type (statfs f_type) of the file at path.
type fsTypeFunc func(path string) (int64, error)

// statfsType is the fsTypeFunc of the running machine.
func statfsType(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Type, nil
}

// fsName names a filesystem type for an error message.
func fsName(t int64) string {
	switch t {
	case unix.CGROUP2_SUPER_MAGIC:
		return "cgroup2"
	case unix.CGROUP_SUPER_MAGIC:
		return "cgroup (v1)"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.SYSFS_MAGIC:
		return "sysfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	}
	return fmt.Sprintf("type 0x%x", t)
}

// checkMachine checks that the machine can hold the pod cgroups under
// cgroupRoot (clean, absolute) with layout l: every hierarchy is a cgroup
// mount of its version, the part of cgroupRoot that exists is in it (not a
// directory of another filesystem mounted there), the controllers pods need
// are there, and on v2 can be enabled down to cgroupRoot. Its errors name
// cgroupRoot and what the machine has; the daemon reports them as bad
// settings. It reads only.
func checkMachine(l Layout, cgroupRoot string, fsType fsTypeFunc) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("cgroupRoot %q: %s", cgroupRoot, fmt.Sprintf(format, args...))
	}
	if l.Version == V1 {
		var missing []string
		for _, c := range requiredControllers {
			if l.Dirs[c] == "" {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return bad("pod cgroups need the %s hierarchies of cgroup v1; %s has no %s mounted (mounted: %s)",
				strings.Join(requiredControllers, ", "), l.Root, strings.Join(missing, ", "), strings.Join(l.mounted(), " "))
		}
	}
	elems := strings.Split(strings.Trim(cgroupRoot, "/"), "/")
	if cgroupRoot == "/" {
		elems = nil
	}
	for _, h := range l.hierarchies() {
		want, err := fsType(h.dir)
		if err != nil {
			return bad("%v", err)
		}
		switch {
		case l.Version == V2 && want != unix.CGROUP2_SUPER_MAGIC:
			return bad("%s holds cgroup.controllers but is not a cgroup2 mount (its filesystem is %s)", h.dir, fsName(want))
		case l.Version == V1 && len(h.controllers) > 0 && want != unix.CGROUP_SUPER_MAGIC:
			return bad("%s is not a cgroup v1 hierarchy (its filesystem is %s)", h.dir, fsName(want))
		case want != unix.CGROUP_SUPER_MAGIC && want != unix.CGROUP2_SUPER_MAGIC:
			return bad("%s is not a cgroup mount (its filesystem is %s)", h.dir, fsName(want))
		}
		dir := h.dir
		for _, e := range elems {
			dir = filepath.Join(dir, e)
			got, err := fsType(dir)
			if errors.Is(err, os.ErrNotExist) {
				break // made by EnsureQoS, in the hierarchy
			}
			if err != nil {
				return bad("%v", err)
			}
			if got != want {
				what := "the cgroup v1 hierarchy at " + h.dir
				if want == unix.CGROUP2_SUPER_MAGIC {
					what = "the cgroup2 mount at " + h.dir
				}
				return bad("%s is not in %s: it is on another filesystem (%s) mounted there; want a cgroup path of this machine's cgroup %s",
					dir, what, fsName(got), versionName(l.Version))
			}
		}
	}
	if l.Version == V2 {
		return checkV2Controllers(l, elems, bad)
	}
	return nil
}

// checkV2Controllers checks, on v2, that the required controllers reach the
// kubepods cgroup: the root offers them, and each existing cgroup on the way
// down to cgroupRoot (elems) either enables them for its children already or
// may (holds no process: v2's no-internal-process rule).
func checkV2Controllers(l Layout, elems []string, bad func(string, ...any) error) error {
	var missing []string
	for _, c := range requiredControllers {
		if !slices.Contains(l.Controllers, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return bad("pod cgroups need the %s controllers; %s offers no %s (it has %q)",
			strings.Join(requiredControllers, ", "), filepath.Join(l.Root, "cgroup.controllers"), strings.Join(missing, ", "), strings.Join(l.Controllers, " "))
	}
	dir := l.Root
	for i := 0; ; i++ {
		enabled, err := readFields(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return bad("%v", err)
		}
		var off []string
		for _, c := range requiredControllers {
			if !slices.Contains(enabled, c) {
				off = append(off, c)
			}
		}
		// The machine's root cgroup (no cgroup.type) may hold processes and
		// enable controllers; any other may not do both.
		_, typeErr := os.Stat(filepath.Join(dir, "cgroup.type"))
		if len(off) > 0 && typeErr == nil {
			pids, err := procs(dir)
			if err != nil {
				return bad("%v", err)
			}
			if len(pids) > 0 {
				return bad("%s does not enable %s for its children (it has %q), and nodekeeper cannot enable them: it holds processes (%s), and cgroup v2 lets a cgroup that enables controllers hold none; move them to a child cgroup or choose another cgroupRoot",
					filepath.Join(dir, "cgroup.subtree_control"), strings.Join(off, ", "), strings.Join(enabled, " "), strings.Join(pids, ","))
			}
		}
		if i == len(elems) {
			return nil
		}
		dir = filepath.Join(dir, elems[i])
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
}

// readFields returns the whitespace-separated words of the file at p; a
// missing file has none.
func readFields(p string) ([]string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// versionName is "v1" or "v2".
func versionName(v Version) string { return fmt.Sprintf("v%d", v) }

// mounted lists the names of the v1 hierarchies found, sorted.
func (l Layout) mounted() []string {
	var out []string
	for c := range l.Dirs {
		out = append(out, c)
	}
	for _, d := range l.Others {
		out = append(out, filepath.Base(d))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
