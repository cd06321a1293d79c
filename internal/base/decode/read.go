package decode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// DefaultMaxInputSize is the size limit of an input file when none is given:
// 256 MiB, far above any real pod list, Summary, configuration or scenario.
const DefaultMaxInputSize int64 = 256 << 20

// DefaultMaxConfigSize is the size limit of a file the agent reads to run:
// its configuration file and drop-ins, its kubeconfig and the files that
// names, its static pod manifests. 10 MiB, the kubelet's limit on a static
// pod manifest (maxConfigLength): far above any real one, far below what
// would make the agent's memory grow with a mistake.
const DefaultMaxConfigSize int64 = 10 << 20

// ReadFile reads the input file at path, of at most limit bytes (limit <= 0
// means DefaultMaxInputSize). A larger file is bad input, one line naming the
// file and the limit. A regular file is checked by its size before reading; a
// FIFO, a character device (/dev/zero) or any other file is read up to the
// limit, so it fails the same way once the limit is passed. A directory is
// bad input naming it.
//
// ReadFile gives up when ctx is done and returns ctx.Err(), even while the
// open blocks (a FIFO without a writer) or a read does (a FIFO or device that
// sends nothing): the file is closed as soon as it is open, and a goroutine
// still blocked in open ends when the open does.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultMaxInputSize
	}
	type result struct {
		data []byte
		err  error
	}
	opened := make(chan *os.File, 1)
	done := make(chan result, 1)
	go func() {
		f, err := os.Open(path)
		opened <- f // nil when the open failed
		if err != nil {
			done <- result{err: err}
			return
		}
		data, err := readLimited(f, path, limit)
		f.Close()
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		// Closing the file ends a read blocked on a pipe or device.
		go func() {
			if f := <-opened; f != nil {
				f.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// ReadRegularFile reads the regular file at path, of at most limit bytes
// (limit <= 0 means DefaultMaxConfigSize), for a file that a configuration
// names (a certificate, a key, a CA bundle) and that is read again while the
// agent runs, without a ctx. Anything but a regular file is refused without
// blocking (a FIFO is opened non-blocking, then refused): "PATH: not a regular
// file (mode ...)". A larger file is a *TooLargeError.
func ReadRegularFile(path string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultMaxConfigSize
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (mode %v)", path, st.Mode())
	}
	if st.Size() > limit {
		return nil, tooLarge(path, limit)
	}
	return readAtMost(f, st.Size(), path, limit)
}

// readLimited reads f, named path in errors, up to limit bytes.
func readLimited(f *os.File, path string, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		return nil, Badf(path, "is a directory, want a file")
	}
	size := int64(-1)
	if err == nil && st.Mode().IsRegular() {
		if st.Size() > limit {
			return nil, tooLarge(path, limit)
		}
		size = st.Size()
	}
	return readAtMost(f, size, path, limit)
}

// readAtMost reads r to its end, named path in errors, taking at most limit+1
// bytes from it: one byte past limit is enough to know it is too large. size,
// when not negative, is how much r is expected to hold.
func readAtMost(r io.Reader, size int64, path string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if size >= 0 {
		buf.Grow(int(size) + bytes.MinRead) // the file may grow; the limit still holds
	}
	if _, err := buf.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, tooLarge(path, limit)
	}
	return buf.Bytes(), nil
}

func tooLarge(path string, limit int64) error { return &TooLargeError{Path: path, Limit: limit} }

// TooLargeError is the error of ReadFile for a file larger than its limit. It
// is of class ErrBadInput.
type TooLargeError struct {
	Path  string
	Limit int64 // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than the input size limit of %s (%d bytes; see --max-input-size)",
		e.Path, resource.NewQuantity(e.Limit, resource.BinarySI), e.Limit)
}

// Is makes a TooLargeError match ErrBadInput.
func (e *TooLargeError) Is(target error) bool { return target == ErrBadInput }

// ParseSize parses a --max-input-size value: a positive byte count or quantity
// ("256Mi", "1G").
func ParseSize(s string) (int64, error) {
	q, err := quantity.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%q: not a byte count or quantity (e.g. 256Mi)", s)
	}
	v, ok := q.AsInt64()
	if !ok || v <= 0 {
		return 0, fmt.Errorf("%q: want a positive whole number of bytes below 8Ei", s)
	}
	return v, nil
}
