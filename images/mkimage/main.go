// Command mkimage builds nodekeeper's own images: it compiles images/pause
// and images/testbox as static binaries (CGO_ENABLED=0, -trimpath,
// -ldflags "-s -w") and packs each with ocibuild into an OCI image-layout
// tarball:
//
//	DIR/pause.tar    localhost/nodekeeper/pause:1    (ocibuild.PauseRef)
//	DIR/testbox.tar  localhost/nodekeeper/testbox:1  (ocibuild.TestboxRef)
//
// Run it from inside the nodekeeper module: go run ./images/mkimage -o DIR.
// The same sources and Go toolchain give the same image IDs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// module is the import path prefix of the programs built.
const module = "github.com/nodekeeper/nodekeeper/images/"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fl.SetOutput(stderr)
	out := fl.String("o", "bin/images", "directory to write pause.tar and testbox.tar to")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() != 0 {
		fmt.Fprintf(stderr, "mkimage: unexpected arguments %q\n", fl.Args())
		return 2
	}
	built, err := build(ctx, *out)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	for _, b := range built {
		fmt.Fprintf(stdout, "%s %s %s\n", b.Path, b.Ref, b.ID)
	}
	return 0
}

// image is one tarball written by build.
type image struct {
	ocibuild.Built
	Path string
	bin  []byte // the program
}

// build compiles pause and testbox and writes dir/pause.tar and
// dir/testbox.tar, creating dir. It must run inside the nodekeeper module.
func build(ctx context.Context, dir string) ([]image, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "nk-mkimage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var out []image
	for _, name := range []string{"pause", "testbox"} {
		bin, err := compile(ctx, name, tmp)
		if err != nil {
			return nil, err
		}
		img := spec(name, bin)
		path := filepath.Join(dir, name+".tar")
		b, err := ocibuild.WriteFile(path, img)
		if err != nil {
			return nil, err
		}
		out = append(out, image{Built: b, Path: path, bin: bin})
	}
	return out, nil
}

// spec is the image of the program name ("pause" or "testbox") whose
// binary is bin.
func spec(name string, bin []byte) ocibuild.Image {
	if name == "pause" {
		return ocibuild.PauseImage(bin)
	}
	return ocibuild.TestboxImage(bin)
}

// compile builds images/name into tmp and returns the binary.
func compile(ctx context.Context, name, tmp string) ([]byte, error) {
	bin := filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, toolbuild.GoTool(), "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin, module+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %v\n%s", name, err, out)
	}
	return os.ReadFile(bin)
}
