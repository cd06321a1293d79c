// Package ocibuild writes single-layer container images as OCI image-layout
// tarballs, the form `ctr images import` and nodekeeper's image directory
// take. The output is reproducible: every tar entry has a fixed owner and
// modification time and the entries are sorted, so the same Image always
// gives the same bytes and the same image ID.
package ocibuild

import (
	"archive/tar"
	"bytes"
	_ "crypto/sha256" // go-digest's SHA-256 is crypto's registered hash
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The references of the images the project builds (images/mkimage), shared by
// the agent, which imports them, and the tests.
const (
	// PauseRef is the sandbox image: images/pause as /pause.
	PauseRef = "localhost/nodekeeper/pause:1"
	// TestboxRef is the test workload: images/testbox as /testbox.
	TestboxRef = "localhost/nodekeeper/testbox:1"
)

// PauseImage is the pause image around bin, the images/pause program.
func PauseImage(bin []byte) Image {
	return Image{
		Ref:        PauseRef,
		Files:      []File{{Path: "/pause", Mode: 0o755, Data: bin}},
		Entrypoint: []string{"/pause"},
	}
}

// TestboxImage is the testbox image around bin, the images/testbox program:
// /testbox, a world-writable /tmp (for its fill and fail files), and the
// command "serve" (HTTP on port 8080).
func TestboxImage(bin []byte) Image {
	return Image{
		Ref: TestboxRef,
		Files: []File{
			{Path: "/testbox", Mode: 0o755, Data: bin},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		},
		Entrypoint: []string{"/testbox"},
		Cmd:        []string{"serve"},
		Env:        []string{"PATH=/"},
	}
}

// ContainerdNameAnnotation is the index annotation containerd's importer reads
// the image name from.
const ContainerdNameAnnotation = "io.containerd.image.name"

// epoch is the modification time of every tar entry.
var epoch = time.Unix(0, 0).UTC()

// File is one entry of the image's single layer.
type File struct {
	// Path is the file's path in the image, e.g. "/pause" or "etc/hosts";
	// a leading slash is optional. Parent directories are added as needed.
	Path string
	// Mode holds the permission bits (0 means 0o644 for a file, 0o755 for a
	// directory, 0o777 for a symlink), fs.ModeDir for a directory and
	// fs.ModeSymlink for a symbolic link.
	Mode fs.FileMode
	// Data is a regular file's content; a directory or symlink has none.
	Data []byte
	// Link is a symlink's target, absolute or relative to its directory, e.g.
	// "busybox" for /bin/sh; only a symlink has one.
	Link string
}

// Image is what Write builds.
type Image struct {
	// Ref is the image's full reference, e.g. "localhost/nodekeeper/pause:1".
	Ref string
	// Files are the layer's entries, in any order.
	Files []File
	// Entrypoint, Cmd, Env, WorkingDir, User and Labels go into the image
	// config as a container runtime reads them.
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
	Labels     map[string]string
	// Architecture defaults to runtime.GOARCH; the OS is always linux.
	Architecture string
}

// Built describes a written image.
type Built struct {
	Ref string
	// ID is the image ID: the config's digest, "sha256:...".
	ID string
	// Manifest is the manifest's digest.
	Manifest string
	// Size is the sum of the manifest, config and layer blob sizes.
	Size int64
	// Entrypoint and Cmd are the image config's.
	Entrypoint []string
	Cmd        []string
}

// Write writes img to w as an OCI image-layout tarball (oci-layout,
// index.json naming Ref, and the manifest, config and uncompressed layer
// blobs). It validates img first: Ref set, paths relative after the leading
// slash, without "..", each named once.
func Write(w io.Writer, img Image) (Built, error) {
	if img.Ref == "" {
		return Built{}, errors.New("image: Ref is empty")
	}
	layer, err := layerTar(img.Files)
	if err != nil {
		return Built{}, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	layerDesc := descriptor(ocispec.MediaTypeImageLayer, layer)
	arch := img.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}
	config, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{Architecture: arch, OS: "linux"},
		Config: ocispec.ImageConfig{
			Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env,
			WorkingDir: img.WorkingDir, User: img.User, Labels: img.Labels,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	if err != nil {
		return Built{}, err
	}
	configDesc := descriptor(ocispec.MediaTypeImageConfig, config)
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return Built{}, err
	}
	manifestDesc := descriptor(ocispec.MediaTypeImageManifest, manifest)
	manifestDesc.Annotations = map[string]string{
		ContainerdNameAnnotation:  img.Ref,
		ocispec.AnnotationRefName: img.Ref,
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifestDesc},
	})
	if err != nil {
		return Built{}, err
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return Built{}, err
	}
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layout},
		{"index.json", index},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
		{blobPath(manifestDesc.Digest), manifest},
		{blobPath(configDesc.Digest), config},
		{blobPath(layerDesc.Digest), layer},
	} {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if strings.HasSuffix(f.name, "/") {
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return Built{}, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return Built{}, fmt.Errorf("image %s: %w", img.Ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Built{}, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return Built{
		Ref: img.Ref, ID: configDesc.Digest.String(), Manifest: manifestDesc.Digest.String(),
		Size:       manifestDesc.Size + configDesc.Size + layerDesc.Size,
		Entrypoint: img.Entrypoint, Cmd: img.Cmd,
	}, nil
}

// WriteFile writes img (Write) to the file at path, replacing it atomically:
// a reader never sees a partly written tarball.
func WriteFile(path string, img Image) (Built, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return Built{}, err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	b, err := Write(tmp, img)
	if err != nil {
		tmp.Close()
		return Built{}, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return Built{}, err
	}
	if err := tmp.Close(); err != nil {
		return Built{}, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return Built{}, err
	}
	return b, nil
}

// layerTar returns the layer: files and their parent directories, sorted.
func layerTar(files []File) ([]byte, error) {
	entries := map[string]File{}
	for i, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		if name == "" || name != path.Clean(name) || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("Files[%d].Path %q: want a clean path inside the image", i, f.Path)
		}
		if prev, dup := entries[name]; dup && !(prev.Mode.IsDir() && f.Mode.IsDir() && prev.Path == "") {
			return nil, fmt.Errorf("Files[%d].Path %q: named twice", i, f.Path)
		}
		if f.Mode.IsDir() && len(f.Data) > 0 {
			return nil, fmt.Errorf("Files[%d].Path %q: a directory with data", i, f.Path)
		}
		if f.Mode&^(fs.ModeDir|fs.ModeSymlink|fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid) != 0 || f.Mode&fs.ModeDir != 0 && f.Mode&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("Files[%d].Mode %v: only regular files, directories and symlinks", i, f.Mode)
		}
		if symlink := f.Mode&fs.ModeSymlink != 0; symlink != (f.Link != "") {
			return nil, fmt.Errorf("Files[%d].Path %q: want Link set exactly for a symlink (mode %v, link %q)", i, f.Path, f.Mode, f.Link)
		}
		if f.Link != "" && len(f.Data) > 0 {
			return nil, fmt.Errorf("Files[%d].Path %q: a symlink with data", i, f.Path)
		}
		entries[name] = File{Path: f.Path, Mode: f.Mode, Data: f.Data, Link: f.Link}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if p, ok := entries[dir]; ok {
				if !p.Mode.IsDir() {
					return nil, fmt.Errorf("Files[%d].Path %q: its parent %q is not a directory", i, f.Path, dir)
				}
				continue
			}
			entries[dir] = File{Mode: fs.ModeDir} // implied: Path left empty
		}
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		f := entries[name]
		h := &tar.Header{Name: name, Size: int64(len(f.Data)), ModTime: epoch, Typeflag: tar.TypeReg, Mode: tarMode(f.Mode, 0o644), Format: tar.FormatPAX}
		switch {
		case f.Mode.IsDir():
			h.Name, h.Typeflag, h.Mode = name+"/", tar.TypeDir, tarMode(f.Mode, 0o755)
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, tarMode(f.Mode, 0o777)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarMode converts m to a tar header mode, using def when m has no
// permission bits.
func tarMode(m fs.FileMode, def int64) int64 {
	mode := int64(m.Perm())
	if mode == 0 {
		mode = def
	}
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func descriptor(mediaType string, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }
