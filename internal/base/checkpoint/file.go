// Package checkpoint writes state files atomically and moves unreadable ones
// aside. It knows nothing about what is inside a file: formats and checksums
// belong to the packages that own them.
package checkpoint

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// WriteFile replaces path with data atomically: it writes a temporary file
// named ".<base>.tmp-*" in the same directory, fsyncs it, renames it over path
// and fsyncs the directory. A crash leaves either the old or the new content,
// never a mix. The caller serialises writes to one path.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmpName, path, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		// A failed directory fsync leaves the rename possibly volatile; the
		// data itself is already durable, so this is not reported.
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// MoveAside renames path to "<path>.corrupt-<UTC timestamp>" so that a file
// that cannot be read is kept for inspection but not read again. It returns
// the new name. A missing path is an error wrapping fs.ErrNotExist.
func MoveAside(path string, now time.Time) (string, error) {
	aside := path + ".corrupt-" + now.UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("move aside %s: %w", path, err)
	}
	return aside, nil
}
