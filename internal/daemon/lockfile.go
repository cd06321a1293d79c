package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The kubelet's --lock-file and --exit-on-lock-contention: the agent takes an
// exclusive flock on the file before it starts anything, waiting while
// another process holds it; with exit-on-contention it then watches the file
// and stops as soon as any other process opens it, the way
// a self-hosted kubelet hands the node over to the next one.

// lockFileRetry is how often AcquireLockFile tries again while the lock is
// held elsewhere.
const lockFileRetry = 200 * time.Millisecond

// AcquireLockFile takes an exclusive flock on path (created 0600 if missing),
// waiting until the holder releases it or ctx ends; log hears once that it
// waits. release closes the file, which drops the lock; the lock also goes
// with the process.
func AcquireLockFile(ctx context.Context, path string, log *slog.Logger) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--lock-file %s: %w", path, err)
	}
	t := time.NewTicker(lockFileRetry)
	defer t.Stop()
	for said := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("--lock-file %s: lock: %w", path, err)
		}
		if !said {
			log.Info("waiting for the lock file: another process holds it", "path", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// WatchLockContention returns a channel closed when another process opens
// path or path is deleted (inotify IN_OPEN, IN_DELETE_SELF), or when the
// watch fails; the watch ends with ctx. Call it after AcquireLockFile: the
// agent's own open is not seen.
func WatchLockContention(ctx context.Context, path string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("--exit-on-lock-contention: inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_DELETE_SELF); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("--exit-on-lock-contention: watch %s: %w", path, err)
	}
	// A non-blocking fd in an os.File reads through the runtime's poller, so
	// Close ends a pending Read.
	f := os.NewFile(uintptr(fd), "inotify")
	contended := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { f.Close() })
	go func() {
		defer stop()
		buf := make([]byte, unix.SizeofInotifyEvent+unix.NAME_MAX+1)
		_, err := f.Read(buf)
		f.Close()
		if err == nil || ctx.Err() == nil {
			close(contended) // an event, or a failed watch: stop as the kubelet does
		}
	}()
	return contended, nil
}
