package podruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// mountTmpfs mounts a tmpfs (an emptyDir with medium Memory) on dir unless one
// is there already, of size bytes (0: the kernel's default).
func mountTmpfs(dir string, size int64) error {
	mounted, err := isMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	opts := "mode=0777"
	if size > 0 {
		opts += fmt.Sprintf(",size=%d", size)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is on another device than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := syscall.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// removePodDir unmounts the pod's memory-backed emptyDirs and removes
// PodsDir/<uid>.
func removePodDir(podsDir, uid string) error {
	dir := filepath.Join(podsDir, uid)
	vols, err := os.ReadDir(filepath.Join(dir, "volumes", "kubernetes.io~empty-dir"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, v := range vols {
		if err := unmountIfMounted(emptyDirPath(podsDir, uid, v.Name())); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// unmountIfMounted unmounts dir if something is mounted on it.
func unmountIfMounted(dir string) error {
	if m, err := isMountPoint(dir); err != nil || !m {
		return nil
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}
