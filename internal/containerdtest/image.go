package containerdtest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/toolbuild"
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

// BuildImage writes img as an OCI image layout tarball into dir.
func BuildImage(t testing.TB, dir string, img Image) Built {
	t.Helper()
	b, err := buildImage(dir, img)
	if err != nil {
		t.Fatalf("build image %s: %v", img.Ref, err)
	}
	return b
}

func buildImage(dir string, img Image) (Built, error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	add := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if img.Runnable {
		bin, err := helper()
		if err != nil {
			return Built{}, err
		}
		if err := add("pause", 0o755, bin); err != nil {
			return Built{}, err
		}
	}
	// Every image gets a file naming it, so equal pads still give distinct layers.
	if err := add("image-ref", 0o644, []byte(img.Ref)); err != nil {
		return Built{}, err
	}
	if img.Pad > 0 {
		if err := add("pad", 0o644, bytes.Repeat([]byte{'x'}, img.Pad)); err != nil {
			return Built{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Built{}, err
	}
	layerDigest := digest(layer.Bytes())
	var cmd []string
	if img.Runnable {
		cmd = []string{"/pause"}
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": cmd, "Env": []string{"PATH=/"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return Built{}, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layer.Len(),
		}},
	})
	if err != nil {
		return Built{}, err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
			"annotations": map[string]string{
				"io.containerd.image.name":          img.Ref,
				"org.opencontainers.image.ref.name": img.Ref,
			},
		}},
	})
	if err != nil {
		return Built{}, err
	}
	type file struct {
		name string
		data []byte
	}
	files := []file{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(digest(manifest)), manifest},
		{blobPath(digest(config)), config},
		{blobPath(layerDigest), layer.Bytes()},
	}
	if img.DockerArchive {
		configFile := digest(config)[len("sha256:"):] + ".json"
		layerFile := layerDigest[len("sha256:"):] + "/layer.tar"
		dm, err := json.Marshal([]any{map[string]any{"Config": configFile, "RepoTags": []string{img.Ref}, "Layers": []string{layerFile}}})
		if err != nil {
			return Built{}, err
		}
		files = []file{{"manifest.json", dm}, {configFile, config}, {layerFile, layer.Bytes()}}
	}
	var out bytes.Buffer
	ow := tar.NewWriter(&out)
	for _, f := range files {
		if err := ow.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return Built{}, err
		}
		if _, err := ow.Write(f.data); err != nil {
			return Built{}, err
		}
	}
	if err := ow.Close(); err != nil {
		return Built{}, err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s.tar", digest(manifest)[len("sha256:"):][:16]))
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return Built{}, err
	}
	return Built{
		Ref: img.Ref, Path: path, ID: digest(config),
		Size:       int64(len(manifest) + len(config) + layer.Len()),
		Entrypoint: cmd,
	}, nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string { return "blobs/sha256/" + d[len("sha256:"):] }
