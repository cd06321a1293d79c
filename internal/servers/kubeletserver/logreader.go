package kubeletserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/clock"
)

// errLimit ends a copy that reached limitBytes.
var errLimit = errors.New("limitBytes reached")

// logReader copies a CRI log file to a client.
type logReader struct {
	opts logOptions
	// path is the log file's path: a follow reopens it when the runtime
	// rotated it.
	path string
	// flush pushes what was written to the client.
	flush func()
	// running reports whether the container still runs; a follow ends once
	// it does not and the file is read to its end.
	running func(ctx context.Context) bool
	// poll makes the follow's ticker.
	poll func(time.Duration) clock.Ticker
	log  *slog.Logger
}

// criLine is one parsed line of a CRI log file.
type criLine struct {
	ts      time.Time
	stream  string
	partial bool
	// msg is the content; a full line's ends with its newline.
	msg []byte
}

// parseCRILine parses "<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <msg>\n".
func parseCRILine(line []byte) (criLine, error) {
	var l criLine
	field := func(what string) ([]byte, error) {
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("no %s", what)
		}
		f := line[:i]
		line = line[i+1:]
		return f, nil
	}
	ts, err := field("timestamp")
	if err != nil {
		return l, err
	}
	if l.ts, err = time.Parse(time.RFC3339Nano, string(ts)); err != nil {
		return l, fmt.Errorf("timestamp %q: %w", ts, err)
	}
	stream, err := field("stream")
	if err != nil {
		return l, err
	}
	if l.stream = string(stream); l.stream != "stdout" && l.stream != "stderr" {
		return l, fmt.Errorf("stream %q: want stdout or stderr", stream)
	}
	tags, err := field("tag")
	if err != nil {
		return l, err
	}
	tag, _, _ := bytes.Cut(tags, []byte(":"))
	switch string(tag) {
	case "P":
		l.partial = true
		line = bytes.TrimSuffix(line, []byte("\n"))
	case "F":
	default:
		return l, fmt.Errorf("tag %q: want P or F", tags)
	}
	l.msg = line
	return l, nil
}

// tailStart returns the offset of the first of the last n lines of f, whose
// size is size. A last line without its newline counts as a line.
func tailStart(f io.ReaderAt, size, n int64) (int64, error) {
	if n == 0 {
		return size, nil
	}
	const block = 32 << 10
	buf := make([]byte, block)
	end := size
	count := int64(0)
	first := true
	for end > 0 {
		start := max(end-block, 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				continue
			}
			if first && start+int64(i) == size-1 {
				continue // the last line's own newline
			}
			if count++; count == n {
				return start + int64(i) + 1, nil
			}
		}
		first = false
		end = start
	}
	return 0, nil
}

// limitWriter writes up to n bytes, then fails with errLimit.
type limitWriter struct {
	w io.Writer
	n int64 // < 0: no limit
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n < 0 {
		return l.w.Write(p)
	}
	if int64(len(p)) > l.n {
		k, err := l.w.Write(p[:l.n])
		l.n -= int64(k)
		if err == nil {
			err = errLimit
		}
		return k, err
	}
	k, err := l.w.Write(p)
	l.n -= int64(k)
	return k, err
}

// copy writes the lines of f (at path) the options select to w. With follow
// it then waits for new lines until ctx ends or the container stopped and
// the file is read to its end. A line that does not parse is logged and
// skipped; an unterminated last line is left for a follow to complete.
func (lr *logReader) copy(ctx context.Context, f *os.File, w io.Writer) error {
	if lr.opts.tail >= 0 {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		off, err := tailStart(f, fi.Size(), lr.opts.tail)
		if err != nil {
			return err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
	}
	out := &limitWriter{w: w, n: lr.opts.limit}
	r := bufio.NewReader(f)
	var pending []byte // an unterminated line read so far
	var ticker clock.Ticker
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	polls := 0
	stopping := false // the container stopped: read to EOF, then end
	draining := false // the file was rotated: read to EOF, then switch
	for {
		chunk, err := r.ReadBytes('\n')
		if len(chunk) > 0 {
			pending = append(pending, chunk...)
		}
		if err == nil {
			line := pending
			pending = pending[:0]
			if werr := lr.write(out, line); werr != nil {
				lr.flush()
				if errors.Is(werr, errLimit) {
					return nil
				}
				return werr
			}
			if r.Buffered() == 0 {
				lr.flush()
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		lr.flush()
		if !lr.opts.follow || stopping {
			return nil
		}
		// A rotated file (renamed to 0.log.TIMESTAMP, a new 0.log made): the
		// runtime may have written to the old one until it reopened, so read
		// it to its end once more after seeing the rename, then go on in the
		// new one from its start.
		if rotated(f, lr.path) {
			if !draining {
				draining = true
				continue
			}
			if nf, err := os.Open(lr.path); err == nil {
				_ = f.Close()
				f = nf
				r.Reset(f)
				pending = pending[:0]
				draining = false
				continue
			}
		}
		// At the first end of file, and every followStateEvery polls after:
		// a container that no longer runs writes no more.
		if polls%followStateEvery == 0 && !lr.running(ctx) {
			stopping = true // one more read to the end
			continue
		}
		if ticker == nil {
			ticker = lr.poll(followPoll)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
		polls++
	}
}

// write writes one line as the options ask: skipped before since, prefixed
// with its timestamp with timestamps.
func (lr *logReader) write(w io.Writer, line []byte) error {
	l, err := parseCRILine(line)
	if err != nil {
		lr.log.Warn("Skipping a malformed line of a container log", "path", lr.path, "line", string(bytes.TrimSpace(line)), "err", err)
		return nil
	}
	if !lr.opts.since.IsZero() && l.ts.Before(lr.opts.since) {
		return nil
	}
	if lr.opts.timestamps {
		if _, err := io.WriteString(w, l.ts.Format(time.RFC3339Nano)+" "); err != nil {
			return err
		}
	}
	_, err = w.Write(l.msg)
	return err
}

// rotated reports whether path is no longer the file f.
func rotated(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && !os.SameFile(a, b)
}
