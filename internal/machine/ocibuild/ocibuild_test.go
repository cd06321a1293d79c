package ocibuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// readTar returns the regular files and directories of a tarball, by name.
func readTar(t *testing.T, data []byte) (files map[string][]byte, modes map[string]int64) {
	t.Helper()
	files, modes = map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: mtime %v uid %d gid %d uname %q, want fixed", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], modes[h.Name] = b, h.Mode
	}
}

func testImage() Image {
	return Image{
		Ref: "localhost/nodekeeper/t:1",
		Files: []File{
			{Path: "/bin/app", Mode: 0o755, Data: []byte("#!app")},
			{Path: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
			{Path: "/etc/hello", Data: []byte("hi")},
		},
		Entrypoint: []string{"/bin/app"}, Cmd: []string{"serve"},
		Env: []string{"PATH=/bin"}, WorkingDir: "/", Labels: map[string]string{"a": "b"},
	}
}

// TestWriteLayout checks the tarball as an importer reads it: every blob
// under its digest, the index naming the image, the manifest and config
// pointing at the blobs, the layer holding the files with parents.
func TestWriteLayout(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	b, err := Write(&buf, testImage())
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, buf.Bytes())
	for name, data := range files {
		if enc, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && enc != "" {
			if got := digest.FromBytes(data).Encoded(); got != enc {
				t.Errorf("blob %s has digest %s", name, got)
			}
		}
	}
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", got)
	}
	var index ocispec.Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("index has %d manifests", len(index.Manifests))
	}
	md := index.Manifests[0]
	if diff := cmp.Diff(map[string]string{ContainerdNameAnnotation: b.Ref, ocispec.AnnotationRefName: b.Ref}, md.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	if md.Digest.String() != b.Manifest {
		t.Errorf("index names manifest %s, Built says %s", md.Digest, b.Manifest)
	}
	manifestData := files[blobPath(md.Digest)]
	if int64(len(manifestData)) != md.Size {
		t.Errorf("manifest size %d, index says %d", len(manifestData), md.Size)
	}
	var manifest ocispec.Manifest
	if err := json.Unmarshal(manifestData, &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.Digest.String() != b.ID {
		t.Errorf("manifest config %s, Built.ID %s", manifest.Config.Digest, b.ID)
	}
	var config ocispec.Image
	if err := json.Unmarshal(files[blobPath(manifest.Config.Digest)], &config); err != nil {
		t.Fatal(err)
	}
	want := ocispec.ImageConfig{Entrypoint: []string{"/bin/app"}, Cmd: []string{"serve"}, Env: []string{"PATH=/bin"}, WorkingDir: "/", Labels: map[string]string{"a": "b"}}
	if diff := cmp.Diff(want, config.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if len(manifest.Layers) != 1 || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("layers %v, diff IDs %v", manifest.Layers, config.RootFS.DiffIDs)
	}
	layer := files[blobPath(manifest.Layers[0].Digest)]
	if want := manifest.Layers[0].Size + manifest.Config.Size + md.Size; b.Size != want {
		t.Errorf("Size %d, want %d", b.Size, want)
	}
	lf, modes := readTar(t, layer)
	if diff := cmp.Diff(map[string]int64{"bin/": 0o755, "bin/app": 0o755, "etc/": 0o755, "etc/hello": 0o644, "tmp/": 0o1777}, modes); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	if string(lf["bin/app"]) != "#!app" || string(lf["etc/hello"]) != "hi" {
		t.Errorf("layer content %q", lf)
	}
}

// TestWriteReproducible: the same input gives the same bytes and ID, in any
// file order; a different input gives another ID.
func TestWriteReproducible(t *testing.T) {
	t.Parallel()
	var a, b, c bytes.Buffer
	img := testImage()
	ba, err := Write(&a, img)
	if err != nil {
		t.Fatal(err)
	}
	img.Files = []File{img.Files[2], img.Files[0], img.Files[1]}
	bb, err := Write(&b, img)
	if err != nil {
		t.Fatal(err)
	}
	if ba.ID != bb.ID || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("same input, IDs %s and %s (bytes equal: %t)", ba.ID, bb.ID, bytes.Equal(a.Bytes(), b.Bytes()))
	}
	img.Files[0].Data = []byte("other")
	bc, err := Write(&c, img)
	if err != nil {
		t.Fatal(err)
	}
	if bc.ID == ba.ID {
		t.Errorf("different content, same ID %s", bc.ID)
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "img.tar")
	b, err := WriteFile(p, testImage())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	want, err := Write(&buf, testImage())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, b); diff != "" || !bytes.Equal(buf.Bytes(), data) {
		t.Errorf("WriteFile differs from Write (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the tarball", len(entries))
	}
}

func TestWriteRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		img   Image
		error string
	}{
		{"no ref", Image{}, "image: Ref is empty"},
		{"dotdot", Image{Ref: "r", Files: []File{{Path: "../x"}}}, `image r: Files[0].Path "../x": want a clean path inside the image`},
		{"unclean", Image{Ref: "r", Files: []File{{Path: "a//b"}}}, `image r: Files[0].Path "a//b": want a clean path inside the image`},
		{"root", Image{Ref: "r", Files: []File{{Path: "/"}}}, `image r: Files[0].Path "/": want a clean path inside the image`},
		{"twice", Image{Ref: "r", Files: []File{{Path: "a"}, {Path: "/a"}}}, `image r: Files[1].Path "/a": named twice`},
		{"under a file", Image{Ref: "r", Files: []File{{Path: "a"}, {Path: "a/b"}}}, `image r: Files[1].Path "a/b": its parent "a" is not a directory`},
		{"under a symlink", Image{Ref: "r", Files: []File{{Path: "a", Mode: fs.ModeSymlink, Link: "b"}, {Path: "a/b"}}}, `image r: Files[1].Path "a/b": its parent "a" is not a directory`},
		{"dir with data", Image{Ref: "r", Files: []File{{Path: "d", Mode: fs.ModeDir, Data: []byte("x")}}}, `image r: Files[0].Path "d": a directory with data`},
		{"pipe", Image{Ref: "r", Files: []File{{Path: "p", Mode: fs.ModeNamedPipe}}}, `image r: Files[0].Mode p---------: only regular files, directories and symlinks`},
		{"symlink without link", Image{Ref: "r", Files: []File{{Path: "l", Mode: fs.ModeSymlink}}}, `image r: Files[0].Path "l": want Link set exactly for a symlink (mode L---------, link "")`},
		{"link on a file", Image{Ref: "r", Files: []File{{Path: "l", Link: "x"}}}, `image r: Files[0].Path "l": want Link set exactly for a symlink (mode ----------, link "x")`},
		{"symlink with data", Image{Ref: "r", Files: []File{{Path: "l", Mode: fs.ModeSymlink, Link: "x", Data: []byte("d")}}}, `image r: Files[0].Path "l": a symlink with data`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Write(io.Discard, tc.img)
			if err == nil || err.Error() != tc.error {
				t.Errorf("error %v, want %s", err, tc.error)
			}
		})
	}
}

// An explicit directory may follow a file inside it (it was implied).
func TestWriteExplicitDirAfterChild(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if _, err := Write(&buf, Image{Ref: "r", Files: []File{{Path: "d/f"}, {Path: "d", Mode: fs.ModeDir | 0o700}}}); err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, buf.Bytes())
	var index ocispec.Index
	var manifest ocispec.Manifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(files[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	_, modes := readTar(t, files[blobPath(manifest.Layers[0].Digest)])
	if diff := cmp.Diff(map[string]int64{"d/": 0o700, "d/f": 0o644}, modes); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}

// A symlink is written as a tar symlink entry with its target, 0o777 unless
// told otherwise.
func TestWriteSymlink(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	img := Image{Ref: "r", Files: []File{
		{Path: "/bin/busybox", Mode: 0o755, Data: []byte("bb")},
		{Path: "/bin/sh", Mode: fs.ModeSymlink, Link: "busybox"},
		{Path: "/usr/bin/env", Mode: fs.ModeSymlink | 0o755, Link: "/bin/busybox"},
	}}
	if _, err := Write(&buf, img); err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, buf.Bytes())
	var index ocispec.Index
	var manifest ocispec.Manifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(files[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Type byte
		Mode int64
		Link string
	}
	got := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(files[blobPath(manifest.Layers[0].Digest)]))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = entry{h.Typeflag, h.Mode, h.Linkname}
	}
	want := map[string]entry{
		"bin/":        {tar.TypeDir, 0o755, ""},
		"bin/busybox": {tar.TypeReg, 0o755, ""},
		"bin/sh":      {tar.TypeSymlink, 0o777, "busybox"},
		"usr/":        {tar.TypeDir, 0o755, ""},
		"usr/bin/":    {tar.TypeDir, 0o755, ""},
		"usr/bin/env": {tar.TypeSymlink, 0o755, "/bin/busybox"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}
