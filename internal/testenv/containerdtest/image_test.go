package containerdtest

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
)

// TestBuildImage checks the OCI layout without a containerd: every blob is
// stored under its digest and the index names the image.
func TestBuildImage(t *testing.T) {
	t.Parallel()
	b := BuildImage(t, t.TempDir(), Image{Ref: "docker.io/nodekeeper/data:1", Pad: 100})
	f, err := os.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
	for name, data := range files {
		if len(name) > len("blobs/sha256/") && name[:len("blobs/sha256/")] == "blobs/sha256/" {
			if got := digest(data); got != "sha256:"+name[len("blobs/sha256/"):] {
				t.Errorf("blob %s has digest %s", name, got)
			}
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != b.Ref {
		t.Fatalf("index = %+v", index)
	}
	var manifest struct {
		Config struct{ Digest string } `json:"config"`
	}
	if err := json.Unmarshal(files[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.ID, manifest.Config.Digest); diff != "" {
		t.Errorf("image ID (-want +got):\n%s", diff)
	}
	if b.Entrypoint != nil {
		t.Errorf("data image has entrypoint %v", b.Entrypoint)
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
}

// BuildPause packs images/pause as ocibuild.PauseImage does, under the ref
// given.
func TestBuildPause(t *testing.T) {
	t.Parallel()
	b := BuildPause(t, t.TempDir(), SandboxImageRef)
	bin, err := pauseBin()
	if err != nil {
		t.Fatal(err)
	}
	img := ocibuild.PauseImage(bin)
	img.Ref = SandboxImageRef
	want, err := ocibuild.Write(io.Discard, img)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Built{Ref: SandboxImageRef, Path: b.Path, ID: want.ID, Size: want.Size, Entrypoint: []string{"/pause"}}, b); diff != "" {
		t.Errorf("Built (-want +got):\n%s", diff)
	}
}
