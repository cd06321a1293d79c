package volumes

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Names inside a volume directory that the writer owns. Every name it keeps
// to itself starts with "..", so payload paths may not.
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
	// tsLayout names a payload directory by the UTC time it was written
	// (a random suffix follows).
	tsLayout = "..2006_01_02_15_04_05."
)

// Limits of a payload path, those of Linux file names and paths.
const (
	maxNameLen = 255
	maxPathLen = 4096
)

// File is one file of a volume's payload.
type File struct {
	// Data is the file's content.
	Data []byte
	// Mode is its permission bits.
	Mode os.FileMode
	// UID, when set, owns the file (a projected token read by a container
	// running as that user).
	UID *int64
}

// Payload is a volume's whole content: files by path relative to the volume.
type Payload map[string]File

// checkPath reports why p cannot be a payload path: empty, absolute, leaving
// the volume, too long, or starting with the writer's reserved "..".
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("path %q is absolute", p)
	case len(p) > maxPathLen:
		return fmt.Errorf("path %q is longer than %d bytes", p, maxPathLen)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("path %q starts with '..'", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("path %q contains '..'", p)
		}
		if len(part) > maxNameLen {
			return fmt.Errorf("path %q has a name longer than %d bytes", p, maxNameLen)
		}
	}
	return nil
}

// topName is the first element of a payload path: what the volume shows as a
// symbolic link into ..data.
func topName(p string) string {
	first, _, _ := strings.Cut(filepath.Clean(p), "/")
	return first
}

// writeAtomic makes dir show exactly payload, so that a reader never sees a
// mix of two versions: the files go into a new directory named by the time,
// the ..data link is pointed at it with one rename, and each top-level name
// of the payload is a link through ..data. Names the payload dropped are
// removed, and so is the previous directory. gid, when set, is the pod's
// fsGroup: files and directories get that group, readable by it. It reports
// whether anything changed (an unchanged payload is not rewritten). One
// writer per dir at a time: the caller serialises calls for a volume.
func writeAtomic(dir string, payload Payload, gid *int64, now time.Time) (changed bool, err error) {
	for p := range payload {
		if err := checkPath(p); err != nil {
			return false, err
		}
	}
	old, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", dataLink, err)
	}
	if old != "" {
		same, err := samePayload(filepath.Join(dir, old), payload, gid)
		if err != nil {
			return false, err
		}
		if same {
			return false, nil
		}
	}
	ts, err := os.MkdirTemp(dir, now.UTC().Format(tsLayout))
	if err != nil {
		return false, fmt.Errorf("make payload directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(ts)
		}
	}()
	if err := os.Chmod(ts, 0o755); err != nil {
		return false, err
	}
	for p, f := range payload {
		if err := writeFile(ts, p, f); err != nil {
			return false, err
		}
	}
	if gid != nil {
		if err := setGroup(ts, *gid); err != nil {
			return false, err
		}
	}
	tmp := filepath.Join(dir, dataLinkTmp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return false, fmt.Errorf("link %s: %w", dataLinkTmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return false, fmt.Errorf("swap %s: %w", dataLink, err)
	}
	// From here on the new content is what readers see; what follows only
	// adds the new names and tidies up.
	want := map[string]bool{}
	for p := range payload {
		want[topName(p)] = true
	}
	for name := range want {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return true, fmt.Errorf("link %s: %w", name, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == dataLink || name == filepath.Base(ts):
		case strings.HasPrefix(name, ".."):
			// An earlier payload directory (or one a crash left behind).
			if e.IsDir() {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
			}
		case !want[name] && e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(dir, name))
			if err == nil && strings.HasPrefix(target, dataLink+"/") {
				errs = append(errs, os.Remove(filepath.Join(dir, name)))
			}
		}
	}
	return true, errors.Join(errs...)
}

// writeFile writes one payload file under root with its mode and owner.
func writeFile(root, p string, f File) error {
	path := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, f.Data, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(path, f.Mode.Perm()); err != nil { // WriteFile's mode passes the umask
		return err
	}
	if f.UID != nil {
		if err := os.Lchown(path, int(*f.UID), -1); err != nil {
			return fmt.Errorf("chown %s: %w", p, err)
		}
	}
	return nil
}

// setGroup gives a read-only payload directory the fsGroup (see
// SetOwnership).
func setGroup(root string, gid int64) error { return SetOwnership(root, gid, true) }

// SetOwnership gives everything under root (root included, symbolic links
// not followed) the pod's fsGroup gid, as the kubelet's volume ownership
// management does: read and write for the group (read only when readOnly),
// and directories also search and the set-group-ID bit, so that what is
// made in them later gets the group too. Existing bits are kept.
func SetOwnership(root string, gid int64, readOnly bool) error {
	mask := fs.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(gid)); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode() | mask
		if d.IsDir() {
			mode |= 0o110 | fs.ModeSetgid
		}
		return os.Chmod(path, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	})
}

// samePayload reports whether the written directory dir holds exactly
// payload: the same paths, contents and modes (with the fsGroup's bits).
func samePayload(dir string, payload Payload, gid *int64) (bool, error) {
	var have []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, path)
			have = append(have, rel)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	want := make([]string, 0, len(payload))
	for p := range payload {
		want = append(want, filepath.Clean(p))
	}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		return false, nil
	}
	for p, f := range payload {
		path := filepath.Join(dir, p)
		info, err := os.Stat(path)
		if err != nil {
			return false, nil
		}
		mode := f.Mode.Perm()
		if gid != nil {
			mode |= 0o440
		}
		if info.Mode().Perm() != mode {
			return false, nil
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, f.Data) {
			return false, nil
		}
	}
	return true, nil
}
