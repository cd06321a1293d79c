package containerdtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// builtBinaries are the programs BuildContainerd builds, by package.
var builtBinaries = map[string]string{
	"containerd":              "github.com/containerd/containerd/cmd/containerd",
	"containerd-shim-runc-v2": "github.com/containerd/containerd/cmd/containerd-shim-runc-v2",
	"ctr":                     "github.com/containerd/containerd/cmd/ctr",
}

// buildTags leave out the plugins that need C headers or kernel features a
// test does not use; the config disables the same plugins.
const buildTags = "no_btrfs no_devmapper no_zfs no_aufs no_tracing"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// BuildContainerd builds containerd, containerd-shim-runc-v2 and ctr from the
// separate module in hack/containerd (containerd 1.7, whose CRI plugin reports
// pinned images) and returns the directory holding them, for Options.BinDir.
//
// The binaries are cached under os.UserCacheDir() keyed by that module's
// go.mod and go.sum, the build tags and the Go version; concurrent test
// processes wait on a file lock, so only one builds. Without root (needed to
// run it), or in -short mode, it skips t; under CI=true it fails t instead,
// and a failed build always fails t.
func BuildContainerd(t testing.TB) string {
	t.Helper()
	ci := os.Getenv("CI") == "true"
	if os.Geteuid() != 0 {
		if ci {
			t.Fatal("CI=true but the containerd integration test cannot run: it needs root")
		}
		t.Skip("skipping containerd integration test: it needs root")
	}
	if testing.Short() && !ci {
		t.Skip("skipping the containerd 1.7 build in -short mode")
	}
	buildOnce.Do(func() {
		start := time.Now()
		var built bool
		buildDir, built, buildErr = buildContainerd()
		if built {
			t.Logf("built containerd from hack/containerd into %s in %v", buildDir, time.Since(start).Round(time.Second))
		}
	})
	if buildErr != nil {
		t.Fatalf("build hack/containerd: %v", buildErr)
	}
	return buildDir
}

// buildContainerd returns the cache directory with the binaries, building
// them if needed; built reports whether this call built them.
func buildContainerd() (dir string, built bool, err error) {
	src, err := moduleDir("hack/containerd")
	if err != nil {
		return "", false, err
	}
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), buildTags)
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", false, err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "nodekeeper", "containerd")
	dir = filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	if complete(dir) {
		return dir, false, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", false, err
	}
	// Test binaries of several packages run at once; one builds, the others
	// wait here and then find the result.
	lock, err := os.OpenFile(filepath.Join(root, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", false, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", false, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if complete(dir) {
		return dir, false, nil
	}
	tmp, err := os.MkdirTemp(root, ".build-*")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-tags", buildTags, "-o", tmp + string(os.PathSeparator)}
	for _, p := range builtBinaries {
		args = append(args, p)
	}
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if err := os.RemoveAll(dir); err != nil { // an incomplete earlier attempt
		return "", false, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", false, err
	}
	return dir, true, nil
}

// complete reports whether dir holds every built binary.
func complete(dir string) bool {
	for name := range builtBinaries {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// moduleDir returns rel under the nodekeeper module's root: the first
// directory with a go.mod above the test's working directory (its package
// directory).
func moduleDir(rel string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) {
			return filepath.Join(d, filepath.FromSlash(rel)), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// goTool returns the go command of the toolchain running the tests.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
