package main

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/e2eimages"
)

// TestStartRegistry: the run's registry serves each stand-in under its
// upstream name on 127.0.0.1, the mirrors name every registry the stand-ins
// come from and nothing else, and stop ends the server.
func TestStartRegistry(t *testing.T) {
	dir := t.TempDir()
	var imgs []e2eimages.Image
	for _, ref := range []string{e2eimages.AgnhostRef, e2eimages.CadvisorRef, e2eimages.SRIOVDevicePluginRef} {
		p := filepath.Join(dir, filepath.Base(ref)+".tar")
		b, err := ocibuild.WriteFile(p, ocibuild.Image{Ref: ref, Files: []ocibuild.File{{Path: "/x", Data: []byte(ref)}}})
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, e2eimages.Image{Ref: ref, Path: p, ID: b.ID})
	}
	mirrors, stop, err := startRegistry(t.Context(), slog.New(slog.NewTextHandler(t.Output(), nil)), imgs)
	if err != nil {
		t.Fatal(err)
	}
	url := mirrors["registry.k8s.io"]
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("registry URL %q, want http://127.0.0.1:PORT", url)
	}
	if diff := cmp.Diff(map[string]string{"docker.io": url, "gcr.io": url, "registry.k8s.io": url}, mirrors); diff != "" {
		t.Errorf("mirrors (-want +got):\n%s", diff)
	}
	resp, err := http.Get(url + "/v2/cadvisor/cadvisor/manifests/v0.47.2?ns=gcr.io")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET cadvisor's manifest from %s: %s", url, resp.Status)
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := http.Get(url + "/v2/"); err == nil {
		t.Errorf("%s still answers after stop", url)
	}
}
