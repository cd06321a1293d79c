package containerdtest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// Image describes an image to build.
type Image struct {
	// Ref is the image's full reference, e.g. "docker.io/nodekeeper/app:1".
	Ref string
	// Runnable installs the helper binary as /pause, the image's entrypoint:
	// with no arguments it sleeps until SIGTERM or SIGINT; with the arguments
	// "exit", "N" it exits with status N at once.
	Runnable bool
	// Pad adds a file of this many bytes, to give images distinct sizes and IDs.
	Pad int
	// DockerArchive writes the tarball in docker save's format (manifest.json,
	// the config and layer.tar files) instead of an OCI image layout. The image
	// ID is the same.
	DockerArchive bool
}

// Built is an image written as an OCI image layout tarball.
type Built struct {
	Ref        string
	Path       string // the tarball
	ID         string // the image ID: the config digest, "sha256:..."
	Size       int64  // sum of the manifest, config and layer blob sizes
	Entrypoint []string
}

// helperSource is the pause/sleep helper: a static binary that sleeps until
// SIGTERM or SIGINT, or exits at once with "exit N".
const helperSource = `package main

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "exit" {
		n, _ := strconv.Atoi(os.Args[2])
		os.Exit(n)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`

var (
	helperOnce sync.Once
	helperDir  string
	helperBin  []byte
	helperErr  error
)

// helper builds the helper binary once per test process.
func helper() ([]byte, error) {
	helperOnce.Do(func() {
		helperDir, helperErr = os.MkdirTemp("", "nk-helper-")
		if helperErr != nil {
			return
		}
		defer os.RemoveAll(helperDir)
		src := filepath.Join(helperDir, "main.go")
		if helperErr = os.WriteFile(src, []byte(helperSource), 0o644); helperErr != nil {
			return
		}
		if helperErr = os.WriteFile(filepath.Join(helperDir, "go.mod"), []byte("module nkpause\n\ngo 1.21\n"), 0o644); helperErr != nil {
			return
		}
		out := filepath.Join(helperDir, "pause")
		cmd := exec.Command(toolbuild.GoTool(), "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
		cmd.Dir = helperDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("build helper: %v: %s", err, b)
			return
		}
		helperBin, helperErr = os.ReadFile(out)
	})
	return helperBin, helperErr
}

// pauseBin is the project's pause program (images/pause), built once per
// test process as images/mkimage builds it.
var pauseBin = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "nk-pause-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "pause")
	// The test runs inside the nodekeeper module, so the package resolves.
	cmd := exec.Command(toolbuild.GoTool(), "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out,
		"github.com/nodekeeper/nodekeeper/images/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build images/pause: %v: %s", err, b)
	}
	return os.ReadFile(out)
})

// BuildPause writes the project's pause image (ocibuild.PauseImage: the
// sandbox program of images/pause as /pause) under ref into dir, for a
// sandbox image that behaves as nodekeeper's own. Unlike a Runnable image's
// helper, it takes no arguments.
func BuildPause(t testing.TB, dir, ref string) Built {
	t.Helper()
	bin, err := pauseBin()
	if err != nil {
		t.Fatal(err)
	}
	img := ocibuild.PauseImage(bin)
	img.Ref = ref
	b, err := writeImage(dir, img, false)
	if err != nil {
		t.Fatalf("build image %s: %v", ref, err)
	}
	return b
}

// BuildImage writes img as an OCI image layout tarball into dir (with
// ocibuild: the same img gives the same image ID).
func BuildImage(t testing.TB, dir string, img Image) Built {
	t.Helper()
	b, err := buildImage(dir, img)
	if err != nil {
		t.Fatalf("build image %s: %v", img.Ref, err)
	}
	return b
}

func buildImage(dir string, img Image) (Built, error) {
	oi := ocibuild.Image{Ref: img.Ref, Env: []string{"PATH=/"}}
	if img.Runnable {
		bin, err := helper()
		if err != nil {
			return Built{}, err
		}
		oi.Files = append(oi.Files, ocibuild.File{Path: "pause", Mode: 0o755, Data: bin})
		oi.Entrypoint = []string{"/pause"}
	}
	// Every image gets a file naming it, so equal pads still give distinct layers.
	oi.Files = append(oi.Files, ocibuild.File{Path: "image-ref", Data: []byte(img.Ref)})
	if img.Pad > 0 {
		oi.Files = append(oi.Files, ocibuild.File{Path: "pad", Data: bytes.Repeat([]byte{'x'}, img.Pad)})
	}
	return writeImage(dir, oi, img.DockerArchive)
}

// writeImage writes img into dir, as a tarball named by its manifest digest:
// an OCI image layout, or docker save's format with dockerArchive.
func writeImage(dir string, img ocibuild.Image, dockerArchive bool) (Built, error) {
	var out bytes.Buffer
	b, err := ocibuild.Write(&out, img)
	if err != nil {
		return Built{}, err
	}
	if dockerArchive {
		d, err := toDockerArchive(out.Bytes(), img.Ref)
		if err != nil {
			return Built{}, err
		}
		out.Reset()
		out.Write(d)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s.tar", strings.TrimPrefix(b.Manifest, "sha256:")[:16]))
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return Built{}, err
	}
	return Built{Ref: b.Ref, Path: path, ID: b.ID, Size: b.Size, Entrypoint: b.Entrypoint}, nil
}

// toDockerArchive rewrites an OCI image-layout tarball of one image as docker
// save's format: manifest.json naming the config and the layer tarballs.
func toDockerArchive(oci []byte, ref string) ([]byte, error) {
	blobs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(oci))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		blobs[h.Name] = data
	}
	var index struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		return nil, fmt.Errorf("OCI layout: want an index of one manifest (%v)", err)
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(blobs[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		return nil, fmt.Errorf("OCI layout: manifest: %v", err)
	}
	hexOf := func(d string) string { return strings.TrimPrefix(d, "sha256:") }
	configFile := hexOf(manifest.Config.Digest) + ".json"
	files := []struct {
		name string
		data []byte
	}{{configFile, blobs[blobPath(manifest.Config.Digest)]}}
	var layers []string
	for _, l := range manifest.Layers {
		name := hexOf(l.Digest) + "/layer.tar"
		layers = append(layers, name)
		files = append(files, struct {
			name string
			data []byte
		}{name, blobs[blobPath(l.Digest)]})
	}
	dm, err := json.Marshal([]any{map[string]any{"Config": configFile, "RepoTags": []string{ref}, "Layers": layers}})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range append([]struct {
		name string
		data []byte
	}{{"manifest.json", dm}}, files...) {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string { return "blobs/sha256/" + d[len("sha256:"):] }
