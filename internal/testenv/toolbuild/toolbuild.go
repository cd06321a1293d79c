// Package toolbuild builds programs from the separate Go modules under hack/
// (third-party device plugins, containerd 1.7) for integration tests, once per
// machine: the binaries are cached under os.UserCacheDir() keyed by the
// module's go.mod and go.sum, any other files named, the build tags and the Go
// version. Test processes of several packages that need the same build wait on
// a file lock, so only one of them builds.
package toolbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Spec is one build.
type Spec struct {
	// Module is the module's directory relative to nodekeeper's root, such
	// as "hack/tools".
	Module string
	// Binaries maps each output name to its package path (a module path, or
	// a path relative to the module such as "./kubeletcheckpoint").
	Binaries map[string]string
	// Tests maps each output name to a package whose test binary is built
	// (go test -c), such as the node e2e suite.
	Tests map[string]string
	// Tags are the build tags, space-separated.
	Tags string
	// KeyFiles are further files of the module, beside go.mod and go.sum,
	// whose content must rebuild the binaries when it changes.
	KeyFiles []string
	// CacheName names the cache directory under nodekeeper's user cache.
	CacheName string
	// LDFlags is the -ldflags value, such as "-X pkg.name=value" settings
	// (empty: none).
	LDFlags string
	// DefaultCgo leaves CGO_ENABLED to the go command's default (1 where a
	// C compiler is found) instead of 0, so the build shares the Go build
	// cache with a plain `go build` in the module; the effective value is
	// part of the cache key.
	DefaultCgo bool
}

// Build returns the directory holding the spec's binaries, building them if
// the cache lacks them. The build runs with GOWORK=off, -mod=readonly and
// CGO_ENABLED=0 (unless Spec.DefaultCgo).
func Build(s Spec) (string, error) {
	src, err := ModuleDir(s.Module)
	if err != nil {
		return "", err
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "CGO_ENABLED=0")
	cgo := "0"
	if s.DefaultCgo {
		env = env[:len(env)-1]
		cmd := exec.Command(GoTool(), "env", "CGO_ENABLED")
		cmd.Dir, cmd.Env = src, env
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("in %s: go env CGO_ENABLED: %w", s.Module, err)
		}
		cgo = strings.TrimSpace(string(out))
	}
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), s.Tags)
	if cgo != "0" { // keys of the CGO_ENABLED=0 builds stay as they were
		fmt.Fprintln(h, "CGO_ENABLED="+cgo)
	}
	if s.LDFlags != "" {
		fmt.Fprintln(h, "ldflags", s.LDFlags)
	}
	for _, f := range append([]string{"go.mod", "go.sum"}, s.KeyFiles...) {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "nodekeeper", s.CacheName)
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	if s.complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if s.complete(dir) { // built by another process while this one waited
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, ".build-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var flags []string
	if s.Tags != "" {
		flags = append(flags, "-tags", s.Tags)
	}
	if s.LDFlags != "" {
		flags = append(flags, "-ldflags", s.LDFlags)
	}
	var builds [][]string
	if len(s.Binaries) > 0 {
		args := append([]string{"build", "-o", tmp + string(os.PathSeparator)}, flags...)
		for _, p := range s.Binaries {
			args = append(args, p)
		}
		builds = append(builds, args)
	}
	for name, p := range s.Tests {
		builds = append(builds, append(append([]string{"test", "-c", "-o", filepath.Join(tmp, name)}, flags...), p))
	}
	for _, args := range builds {
		cmd := exec.Command(GoTool(), args...)
		cmd.Dir = src
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("in %s: go %s: %w\n%s", s.Module, strings.Join(args, " "), err, out)
		}
	}
	if err := os.RemoveAll(dir); err != nil { // an incomplete earlier attempt
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// complete reports whether dir holds every binary and test binary of s.
func (s Spec) complete(dir string) bool {
	for name := range s.outputs() {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// outputs yields the names of every binary s builds.
func (s Spec) outputs() func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, m := range []map[string]string{s.Binaries, s.Tests} {
			for name := range m {
				if !yield(name) {
					return
				}
			}
		}
	}
}

// ModuleDir returns rel under nodekeeper's root: the first directory with a
// go.mod above the working directory (a test's package directory).
func ModuleDir(rel string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, filepath.FromSlash(rel)), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// GoTool returns the go command of the toolchain running the tests.
func GoTool() string {
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "go"
}
