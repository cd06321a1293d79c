package decode

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFileLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "pods.json")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(t.Context(), path, 10); err != nil || string(got) != "0123456789" {
		t.Errorf("ReadFile(limit = size) = %q, %v; want the file", got, err)
	}
	_, err := ReadFile(t.Context(), path, 9)
	want := path + ": larger than the input size limit of 9 (9 bytes; see --max-input-size)"
	if err == nil || err.Error() != want || !errors.Is(err, ErrBadInput) {
		t.Errorf("ReadFile(limit = size-1) = %v, want bad input %q", err, want)
	}
	if _, err := ReadFile(t.Context(), filepath.Join(dir, "none"), 9); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}

// TestReadFileDevice reads a device without end: the limit stops it.
func TestReadFileDevice(t *testing.T) {
	t.Parallel()
	_, err := ReadFile(t.Context(), "/dev/zero", 1<<20)
	want := "/dev/zero: larger than the input size limit of 1Mi (1048576 bytes; see --max-input-size)"
	if err == nil || err.Error() != want {
		t.Errorf("ReadFile(/dev/zero) = %v, want %q", err, want)
	}
}

func mkfifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	return path
}

// TestReadFileFIFO reads a FIFO: within the limit it is read to its end, past
// the limit it fails as a regular file does.
func TestReadFileFIFO(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		content string
		wantErr string
	}{
		{"within the limit", "0123456789", ""},
		{"past the limit", "0123456789x", "larger than the input size limit of 10 (10 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := mkfifo(t)
			go func() {
				w, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					return
				}
				w.WriteString(tc.content)
				w.Close()
			}()
			got, err := ReadFile(t.Context(), path, 10)
			switch {
			case tc.wantErr == "" && (err != nil || string(got) != tc.content):
				t.Errorf("ReadFile = %q, %v; want %q", got, err, tc.content)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("ReadFile = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// TestReadFileCancel gives up on a FIFO that blocks, in the open (no writer)
// and in a read (a writer that sends nothing), when ctx is cancelled.
func TestReadFileCancel(t *testing.T) {
	t.Parallel()
	t.Run("blocked in open", func(t *testing.T) {
		t.Parallel()
		path := mkfifo(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := ReadFile(ctx, path, 10); !errors.Is(err, context.Canceled) {
			t.Errorf("ReadFile = %v, want context.Canceled", err)
		}
		// Let the goroutine blocked in open end: open the writer end.
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
	})
	t.Run("blocked in read", func(t *testing.T) {
		t.Parallel()
		path := mkfifo(t)
		ctx, cancel := context.WithCancel(t.Context())
		res := make(chan error, 1)
		go func() {
			_, err := ReadFile(ctx, path, 10)
			res <- err
		}()
		// Opening the writer returns once ReadFile has the FIFO open.
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Errorf("ReadFile = %v, want context.Canceled", err)
		}
	})
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"256Mi": 256 << 20, "1": 1, "1k": 1000, "1Gi": 1 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "abc", "0.5", "8Ei", "1e9999"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestReadFileDirectory: a directory is bad input naming it, not a read error.
func TestReadFileDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := ReadFile(t.Context(), dir, 10)
	if want := dir + ": is a directory, want a file"; err == nil || err.Error() != want || !errors.Is(err, ErrBadInput) {
		t.Errorf("ReadFile(directory) = %v, want bad input %q", err, want)
	}
}

// endless is a reader that never ends and counts the bytes it gave.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	e.n += int64(len(p))
	return len(p), nil
}

// TestReadAtMostStopsPastLimit: a reader without end is read up to one byte
// past the limit, not further.
func TestReadAtMostStopsPastLimit(t *testing.T) {
	t.Parallel()
	r := &endless{}
	_, err := readAtMost(r, -1, "x", 1000)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Path != "x" || tl.Limit != 1000 {
		t.Fatalf("readAtMost = %v, want too large", err)
	}
	if r.n != 1001 {
		t.Errorf("read %d bytes, want 1001 (the limit and one)", r.n)
	}
}

// TestReadRegularFile: a regular file within the limit is read; a FIFO
// without a writer and a device are refused at once; a larger file is too
// large.
func TestReadRegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadRegularFile(path, 10); err != nil || string(got) != "0123456789" {
		t.Errorf("ReadRegularFile = %q, %v; want the file", got, err)
	}
	var tl *TooLargeError
	if _, err := ReadRegularFile(path, 9); !errors.As(err, &tl) {
		t.Errorf("ReadRegularFile(limit 9) = %v, want too large", err)
	}
	fifo := mkfifo(t)
	for _, p := range []string{fifo, "/dev/zero"} {
		if _, err := ReadRegularFile(p, 10); err == nil || !strings.Contains(err.Error(), p+": not a regular file") {
			t.Errorf("ReadRegularFile(%s) = %v, want not a regular file", p, err)
		}
	}
}
