package containerd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// mountFunc and unmountFunc have syscall.Mount's and syscall.Unmount's shapes.
type (
	mountFunc   func(source, target, fstype string, flags uintptr, data string) error
	unmountFunc func(target string, flags int) error
)

// detectSnapshotter returns Overlayfs when an overlay mount with its upper and
// work dirs in dir works (dir is containerd's root: the overlayfs snapshotter
// keeps its layers there), else Native and the reason overlay failed. The
// trial mount is undone and its directories removed.
func detectSnapshotter(dir string, mount mountFunc, unmount unmountFunc) (string, error) {
	if err := overlayWorks(dir, mount, unmount); err != nil {
		return Native, err
	}
	return Overlayfs, nil
}

func overlayWorks(dir string, mount mountFunc, unmount unmountFunc) (err error) {
	tmp, err := os.MkdirTemp(dir, "overlay-check-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	lower, upper, work, merged := filepath.Join(tmp, "l"), filepath.Join(tmp, "u"), filepath.Join(tmp, "w"), filepath.Join(tmp, "m")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay mount in %s: %w", dir, err)
	}
	if err := unmount(merged, 0); err != nil {
		return fmt.Errorf("unmount trial overlay %s: %w", merged, err)
	}
	return nil
}
