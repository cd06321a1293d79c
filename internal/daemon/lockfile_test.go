package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// lineHandler signals each record's message on ch.
type lineHandler struct{ ch chan string }

func (h lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	h.ch <- r.Message
	return nil
}
func (h lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineHandler) WithGroup(string) slog.Handler      { return h }

// holdLock flocks path through a file description of the test's own.
func holdLock(t *testing.T, path string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }
}

// TestAcquireLockFile: held elsewhere, the lock is waited for (said once),
// taken once released, and the wait ends with ctx.
func TestAcquireLockFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kubelet.lock")
	unlock := holdLock(t, path)
	logs := make(chan string, 10)
	log := slog.New(lineHandler{logs})

	type result struct {
		release func()
		err     error
	}
	got := make(chan result, 1)
	go func() {
		release, err := AcquireLockFile(t.Context(), path, log)
		got <- result{release, err}
	}()
	if msg := <-logs; !strings.Contains(msg, "waiting for the lock file") {
		t.Fatalf("first log %q, want the wait", msg)
	}
	unlock()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v, %v; want mode 0600", fi, err)
	}
	// Now ours: another taker waits until ctx ends, and gets ctx's error.
	ctx, cancel := context.WithCancel(t.Context())
	waits := make(chan error, 1)
	go func() {
		_, err := AcquireLockFile(ctx, path, slog.New(lineHandler{logs}))
		waits <- err
	}()
	<-logs // it waits
	cancel()
	if err := <-waits; !errors.Is(err, context.Canceled) {
		t.Errorf("wait ended by ctx: %v, want context.Canceled", err)
	}
	r.release()
	if err := unix.Flock(int(openOrFail(t, path).Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("the lock is held after release: %v", err)
	}
}

func openOrFail(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestWatchLockContention: another open of the file closes the channel; a
// file that is not there is an error naming it. (Removing the file does not
// close it while the agent holds the file open: the kernel reports
// IN_DELETE_SELF when the inode goes, after the last close.)
func TestWatchLockContention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		contend func(path string) error
	}{
		{"open", func(path string) error {
			f, err := os.Open(path)
			if err == nil {
				f.Close()
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "kubelet.lock")
			release, err := AcquireLockFile(t.Context(), path, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			contended, err := WatchLockContention(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-contended:
				t.Fatal("contention before anyone opened the file")
			default:
			}
			if err := tc.contend(path); err != nil {
				t.Fatal(err)
			}
			<-contended
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		if _, err := WatchLockContention(t.Context(), filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("err %v, want one naming the file", err)
		}
	})
}
