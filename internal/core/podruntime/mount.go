package podruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/moby/sys/mountinfo"

	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
)

// setUpEmptyDir makes an emptyDir volume's directory as the kubelet does:
// mode 0777, so that a container of any user can write in it; for the
// Memory medium (memory true) a tmpfs of size bytes on it, whose root has
// the kernel's default mode 1777. When the volume is new (the directory
// made, or the tmpfs mounted, now) and the pod has an fsGroup, the volume
// gets that group and the set-group-ID bit, so that what containers create
// in it belongs to the group. A volume set up before is left alone, as
// the kubelet changes ownership only when it sets a volume up. With shared,
// the volume is made a shared mount (see makeShared).
func setUpEmptyDir(dir string, memory bool, size int64, fsGroup *int64, shared bool) error {
	fresh := false
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		fresh = true
	} else if err != nil {
		return err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if info.Mode().Perm() != 0o777 {
		// MkdirAll's mode passed the umask.
		if err := os.Chmod(dir, info.Mode()&^os.ModePerm|0o777); err != nil {
			return err
		}
	}
	if memory {
		mounted, err := mountTmpfs(dir, size)
		if err != nil {
			return err
		}
		fresh = fresh || mounted
	}
	if shared {
		if err := makeShared(dir); err != nil {
			return err
		}
	}
	if fresh && fsGroup != nil {
		return volumes.SetOwnership(dir, *fsGroup, false)
	}
	return nil
}

// makeShared makes dir a shared mount, bind-mounting it on itself first
// unless something is mounted there already. The runtime refuses a
// Bidirectional (or HostToContainer) mount of a directory on a private
// mount, as this machine's root is; the kubelet avoids it by making its
// whole root directory shared, nodekeeper by sharing just the emptyDir
// volumes that a container mounts that way. Mounts a container makes in
// the volume then reach the host and the pod's other containers.
func makeShared(dir string) error {
	mounted, err := mountinfo.Mounted(dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mount %s on itself: %w", dir, err)
		}
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

// mountTmpfs mounts a tmpfs on dir unless one is there already, of size
// bytes (0: the kernel's default), with the kernel's default root mode, as
// the kubelet mounts one. It reports whether it mounted.
func mountTmpfs(dir string, size int64) (bool, error) {
	mounted, err := mountinfo.Mounted(dir)
	if err != nil || mounted {
		return false, err
	}
	opts := ""
	if size > 0 {
		opts = fmt.Sprintf("size=%d", size)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return false, fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return true, nil
}

// DataDirMode is the mode of the agent's root directory, PodsDir,
// PodsDir/<uid> and its volumes directory, as the kubelet's (setupDataDirs,
// makePodDataDirs): only root and its group may list or traverse them, so
// the volumes below (an emptyDir is 0777, for containers of any user), hosts
// file and termination-message files are out of other local users' reach.
const DataDirMode fs.FileMode = 0o750

// RestrictDirs makes each of dirs (with its parents) mode DataDirMode; one
// that exists with more permissions (an older nodekeeper made them 0755)
// loses the others, so that an upgrade closes what that mode left open. It
// never adds a permission and is idempotent.
func RestrictDirs(dirs ...string) error {
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, DataDirMode); err != nil {
			return err
		}
		info, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if extra := info.Mode().Perm() &^ DataDirMode; extra != 0 {
			if err := os.Chmod(dir, info.Mode()&^extra); err != nil {
				return fmt.Errorf("restrict %s to mode %v: %w", dir, DataDirMode, err)
			}
		}
	}
	return nil
}

// makePodDirs makes PodsDir/<uid> and PodsDir/<uid>/volumes, and PodsDir if
// missing, with RestrictDirs.
func makePodDirs(podsDir, uid string) error {
	return RestrictDirs(podsDir, filepath.Join(podsDir, uid), filepath.Join(podsDir, uid, "volumes"))
}

// removePodDir unmounts the pod's memory-backed emptyDirs and subPath binds
// and removes PodsDir/<uid>, unless something stays mounted in it (removing
// files through a bind would remove the files of the volume or host
// directory it shows).
func removePodDir(podsDir, uid string) error {
	if err := removeVolumes(podsDir, uid); err != nil {
		return err
	}
	dir := filepath.Join(podsDir, uid)
	if err := unmountIfMounted(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// removeVolumes unmounts the pod's subPath binds and memory-backed
// emptyDirs (and any other mount left there: the volumes package unmounts
// its own in volumes.Manager.TearDown) and removes their directories;
// nothing is removed while anything stays mounted.
func removeVolumes(podsDir, uid string) error {
	for _, dir := range []string{subPathDir(podsDir, uid), filepath.Join(podsDir, uid, "volumes")} {
		if err := unmountIfMounted(dir); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

// unmountIfMounted unmounts what is mounted on dir and below it, the
// deepest first (a container's mount in a shared volume lands under it).
func unmountIfMounted(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	for _, m := range mounts {
		if err := syscall.Unmount(m.Mountpoint, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", m.Mountpoint, err)
		}
	}
	if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); err != nil || len(left) > 0 {
		return errors.Join(err, fmt.Errorf("%s: still mounted after unmounting", dir))
	}
	return nil
}
