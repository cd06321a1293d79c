package podsource

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what a watch reports: names made, written and closed, moved
// in or out, removed or with changed attributes (chmod), and the watched
// directory itself going away. Writes without a close (IN_MODIFY), and the
// making of a regular file (its close follows), are left to the periodic
// rescan, so that a half-written file is not read on every write(2). A hard
// link made into the directory is therefore seen at the next period.
const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// watcher is an inotify instance whose events about names that matter poke a
// rescan. Watches are added by the scanning goroutine while run reads events
// in another.
type watcher struct {
	f *os.File // the inotify descriptor, non-blocking, read through the runtime poller

	mu sync.Mutex
	// filters maps a watch descriptor to its directory and the one name its
	// events matter for ("" for every name that does not start with ".").
	// Guarded by mu.
	filters map[int32]filter
	// removed holds the paths deleted or moved away since takeRemoved last
	// ran. Guarded by mu.
	removed map[string]bool
}

type filter struct{ dir, name string }

func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return &watcher{f: os.NewFile(uintptr(fd), "inotify"), filters: map[int32]filter{}, removed: map[string]bool{}}, nil
}

// add watches dir; only events about name matter ("" for every name not
// starting with "."). Watching a directory already watched returns its
// descriptor and replaces its filter.
func (w *watcher) add(dir, name string) (int32, error) {
	var wd int
	var err error
	ctlErr := w.control(func(fd uintptr) {
		wd, err = unix.InotifyAddWatch(int(fd), dir, watchMask)
	})
	if ctlErr != nil {
		return -1, ctlErr
	}
	if err != nil {
		return -1, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	w.mu.Lock()
	w.filters[int32(wd)] = filter{dir, name}
	w.mu.Unlock()
	return int32(wd), nil
}

// remove drops the watch wd; it may already be gone with its directory.
func (w *watcher) remove(wd int32) {
	w.mu.Lock()
	delete(w.filters, wd)
	w.mu.Unlock()
	_ = w.control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
}

func (w *watcher) control(f func(fd uintptr)) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(f)
}

// run reads events until close, calling poke after each read that holds an
// event that matters (several events read at once poke once). It returns nil
// once the watcher is closed.
func (w *watcher) run(poke func()) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read inotify events: %w", err)
		}
		if w.matters(buf[:n]) {
			poke()
		}
	}
}

// matters reports whether the events in buf include one that should cause a
// rescan.
func (w *watcher) matters(buf []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := false
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			break
		}
		name := strings.TrimRight(string(buf[unix.SizeofInotifyEvent:end]), "\x00")
		buf = buf[end:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			found = true // events were lost
		case ev.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			// The watched directory went away: rescan, which watches it anew.
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(w.filters, ev.Wd)
			}
			found = true
		default:
			f, ok := w.filters[ev.Wd]
			if !ok || f.name == "" && strings.HasPrefix(name, ".") || f.name != "" && name != f.name {
				continue
			}
			if ev.Mask&(unix.IN_CREATE|unix.IN_ISDIR) == unix.IN_CREATE {
				// A regular file just made is still empty or being written: its
				// IN_CLOSE_WRITE follows. Other names (symbolic links) are complete.
				if fi, err := os.Lstat(filepath.Join(f.dir, name)); err == nil && fi.Mode().IsRegular() {
					continue
				}
			}
			if ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 && ev.Mask&unix.IN_ISDIR == 0 {
				w.removed[filepath.Join(f.dir, name)] = true
			}
			found = true
		}
	}
	return found
}

// takeRemoved returns the paths deleted or moved away since its last call.
func (w *watcher) takeRemoved() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.removed) == 0 {
		return nil
	}
	out := slices.Sorted(maps.Keys(w.removed))
	clear(w.removed)
	return out
}

// close stops run and releases the descriptor.
func (w *watcher) close() error { return w.f.Close() }
