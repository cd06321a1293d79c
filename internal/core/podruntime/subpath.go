package podruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A volume's content is the pod's: a container may have put a symbolic
// link where a subPath points, aimed anywhere on the host. The runtime
// would follow it when it mounts the subPath, so the subPath is resolved
// here, checked to stay in the volume, opened one component at a time
// without following links (a link swapped in meanwhile fails the open) and
// bind-mounted from that open descriptor under the pod's directory; the
// runtime gets the bind, which nothing in the volume can redirect. This is
// the kubelet's answer to the same attack (CVE-2017-1002101), under the
// same path: PodsDir/UID/volume-subpaths/VOLUME/CONTAINER/INDEX.

// subPathDir is the directory of the pod's subPath binds.
func subPathDir(podsDir, uid string) string {
	return filepath.Join(podsDir, uid, "volume-subpaths")
}

// prepareSubPath binds subPath sub of the volume at root to the pod's
// place for volume mount index of container, and returns that place.
// root itself is the node's (an emptyDir's directory, a hostPath's path)
// and may hold links; below it nothing may lead out of it.
func prepareSubPath(podsDir, uid, volume, container string, index int, root, sub string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(filepath.Join(realRoot, sub))
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(realRoot, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("subPath %q resolves to %s, outside the volume", sub, resolved)
	}
	fd, err := openBeneath(realRoot, rel, unix.O_PATH)
	if err != nil {
		return "", fmt.Errorf("subPath %q: %w", sub, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	target := filepath.Join(subPathDir(podsDir, uid), volume, container, strconv.Itoa(index))
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	// A bind from an earlier start of the container goes: the volume may
	// have changed since.
	if err := unmountIfMounted(target); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	} else {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o640)
		if err != nil {
			return "", err
		}
		f.Close()
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind subPath %q to %s: %w", sub, target, err)
	}
	return target, nil
}

// openBeneath opens rel (clean, relative, "." for root itself) under the
// directory root, following no symbolic link below root, with flags (and
// O_NOFOLLOW, O_CLOEXEC) for the last component.
func openBeneath(root, rel string, flags int) (int, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	parts := strings.Split(rel, "/")
	for i, name := range parts {
		fl := unix.O_PATH | unix.O_DIRECTORY
		if i == len(parts)-1 {
			fl = flags
		}
		next, err := unix.Openat(fd, name, fl|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return -1, fmt.Errorf("%s is a symbolic link or not a directory", filepath.Join(parts[:i+1]...))
			}
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK { // O_PATH|O_NOFOLLOW opens a link itself
			unix.Close(next)
			return -1, fmt.Errorf("%s is a symbolic link", filepath.Join(parts[:i+1]...))
		}
		fd = next
	}
	return fd, nil
}

// makeSubPath makes the missing directories of sub under the volume
// directory root with root's mode (its set-user-ID, set-group-ID and sticky
// bits included), as the kubelet makes a subPath that does not exist: a
// subPath of a volume open to all (an emptyDir) is too, and keeps an
// fsGroup's group. No symbolic link below root is followed.
func makeSubPath(root, sub string) error {
	var rootSt unix.Stat_t
	if err := unix.Stat(root, &rootSt); err != nil {
		return err
	}
	mode := rootSt.Mode & (0o777 | unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX)
	dir := "."
	for _, name := range strings.Split(sub, "/") {
		parent, err := openBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("subPath %q: %w", sub, err)
		}
		err = unix.Mkdirat(parent, name, 0o700)
		made := err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(parent)
			return fmt.Errorf("subPath %q: %w", sub, err)
		}
		if made {
			// Mkdirat's mode passed the umask; the directory is
			// opened without following a link swapped in for it.
			d, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				err = unix.Fchmod(d, mode)
				unix.Close(d)
			}
			if err != nil {
				unix.Close(parent)
				return fmt.Errorf("subPath %q: %w", sub, err)
			}
		}
		unix.Close(parent)
		dir = filepath.Join(dir, name)
	}
	return nil
}
