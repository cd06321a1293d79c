package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

const mib = 1 << 20

// alloc allocates n MiB, one slice per MiB, writing every page so the memory
// is resident (and counted in the container's cgroup).
func alloc(n int) [][]byte {
	held := make([][]byte, 0, n)
	for range n {
		b := make([]byte, mib)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
	}
	return held
}

// parseSize parses a byte count, optionally with a binary suffix (Ki, Mi, Gi).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	num := s
	for i, suf := range []string{"Ki", "Mi", "Gi"} {
		if v, ok := strings.CutSuffix(s, suf); ok {
			num, mult = v, 1<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a byte count such as 1048576 or 64Mi", s)
	}
	return n * mult, nil
}

// fill writes size bytes (not zeros, so nothing is sparse) to path and
// syncs it.
func fill(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := bytes.Repeat([]byte{'x'}, mib)
	for left := size; left > 0; {
		n := min(left, int64(len(chunk)))
		if _, err := f.Write(chunk[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	return errors.Join(f.Sync(), f.Close())
}

// spawn starts n processes running argv, reports them, and waits until ctx
// ends; then it kills them and waits for each.
func spawn(ctx context.Context, n int, argv []string, stdout io.Writer) error {
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()
		}
	}()
	for range n {
		c := exec.Command(argv[0], argv[1:]...)
		if err := c.Start(); err != nil {
			return fmt.Errorf("spawn: %w", err)
		}
		cmds = append(cmds, c)
	}
	pids := make([]string, len(cmds))
	for i, c := range cmds {
		pids[i] = strconv.Itoa(c.Process.Pid)
	}
	fmt.Fprintf(stdout, "spawned %d processes: %s\n", n, strings.Join(pids, " "))
	<-ctx.Done()
	return nil
}
