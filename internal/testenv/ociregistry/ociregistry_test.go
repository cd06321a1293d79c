package ociregistry

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	const d = "sha256:a9155b13325b2abef48e71de77bb8ac015412a566829f621d06bfae5c699b1b9"
	tests := []struct {
		name, in string
		want     Ref
		wantErr  bool
	}{
		{name: "registry, path and tag", in: "registry.k8s.io/e2e-test-images/agnhost:2.63.0",
			want: Ref{Registry: "registry.k8s.io", Repository: "e2e-test-images/agnhost", Tag: "2.63.0"}},
		{name: "docker hub user", in: "docker.io/nfvpe/sriov-device-plugin:v3.1",
			want: Ref{Registry: "docker.io", Repository: "nfvpe/sriov-device-plugin", Tag: "v3.1"}},
		{name: "docker hub short", in: "busybox", want: Ref{Registry: "docker.io", Repository: "library/busybox", Tag: "latest"}},
		{name: "registry with port", in: "localhost:5000/a/b", want: Ref{Registry: "localhost:5000", Repository: "a/b", Tag: "latest"}},
		{name: "digest", in: "registry.k8s.io/e2e-test-images/busybox@" + d,
			want: Ref{Registry: "registry.k8s.io", Repository: "e2e-test-images/busybox", Digest: d}},
		{name: "bad digest", in: "registry.k8s.io/busybox@sha256:abc", wantErr: true},
		{name: "upper case repository", in: "registry.k8s.io/BusyBox:1", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRef(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseRef(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseRef(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

// write builds a one-file image named ref into dir.
func write(t *testing.T, dir, ref, content string) (string, ocibuild.Built) {
	t.Helper()
	p := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref)+".tar")
	b, err := ocibuild.WriteFile(p, ocibuild.Image{Ref: ref, Files: []ocibuild.File{{Path: "/hello", Data: []byte(content)}}})
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

func get(t *testing.T, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestServe pulls as containerd does: the manifest by tag, then by digest,
// then the config and layer blobs, each checked against its digest; the
// ns parameter picks the registry; what is not held is a 404 of the API.
func TestServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agn, built := write(t, dir, "registry.k8s.io/e2e-test-images/agnhost:2.63.0", "agnhost")
	sriov, _ := write(t, dir, "docker.io/nfvpe/sriov-device-plugin:v3.1", "sriov")
	same, _ := write(t, dir, "gcr.io/e2e-test-images/agnhost:2.63.0", "gcr")
	const fake = "registry.k8s.io/e2e-test-images/busybox@sha256:a9155b13325b2abef48e71de77bb8ac015412a566829f621d06bfae5c699b1b9"
	pinned, _ := write(t, dir, fake, "busybox")
	r, err := Load(nil, agn, sriov, same, pinned)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"docker.io", "gcr.io", "registry.k8s.io"}, r.Registries()); diff != "" {
		t.Errorf("Registries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{fake}, r.Unservable); diff != "" {
		t.Errorf("Unservable (-want +got):\n%s", diff)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { r.Close() })

	if resp, _ := get(t, http.MethodGet, srv.URL+"/v2/"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/: %s", resp.Status)
	}
	base := srv.URL + "/v2/e2e-test-images/agnhost"
	resp, _ := get(t, http.MethodHead, base+"/manifests/2.63.0?ns=registry.k8s.io")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != built.Manifest ||
		resp.Header.Get("Content-Type") != ocispec.MediaTypeImageManifest {
		t.Fatalf("HEAD manifest: %s, digest %q (want %s), type %q", resp.Status, resp.Header.Get("Docker-Content-Digest"), built.Manifest, resp.Header.Get("Content-Type"))
	}
	resp, body := get(t, http.MethodGet, base+"/manifests/"+built.Manifest+"?ns=registry.k8s.io")
	if resp.StatusCode != http.StatusOK || digest.FromBytes(body).String() != built.Manifest {
		t.Fatalf("GET manifest by digest: %s, content digest %s, want %s", resp.Status, digest.FromBytes(body), built.Manifest)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.Digest.String() != built.ID {
		t.Errorf("manifest's config %s, want %s", m.Config.Digest, built.ID)
	}
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		resp, body := get(t, http.MethodGet, base+"/blobs/"+d.Digest.String()+"?ns=registry.k8s.io")
		if resp.StatusCode != http.StatusOK || digest.FromBytes(body) != d.Digest || int64(len(body)) != d.Size {
			t.Errorf("GET blob %s: %s, %d bytes of digest %s", d.Digest, resp.Status, len(body), digest.FromBytes(body))
		}
	}
	// gcr.io holds the same path with other content: ns decides.
	resp, _ = get(t, http.MethodHead, base+"/manifests/2.63.0?ns=gcr.io")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") == built.Manifest {
		t.Errorf("HEAD gcr.io's manifest: %s, digest %s, want gcr.io's own", resp.Status, resp.Header.Get("Docker-Content-Digest"))
	}
	// A blob of another repository is not served from this one.
	resp, _ = get(t, http.MethodGet, srv.URL+"/v2/nfvpe/sriov-device-plugin/blobs/"+m.Layers[0].Digest.String())
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET another repository's blob: %s, want 404", resp.Status)
	}
	for _, tc := range []struct{ url, code string }{
		{"/v2/nfvpe/sriov-device-plugin/manifests/v3.1", ""},                                  // one registry holds the path: no ns needed
		{"/v2/e2e-test-images/agnhost/manifests/2.63.0", "NAME_UNKNOWN"},                      // two do
		{"/v2/e2e-test-images/agnhost/manifests/2.64?ns=registry.k8s.io", "MANIFEST_UNKNOWN"}, // no such tag
		{"/v2/e2e-test-images/busybox/manifests/sha256:a9155b13325b2abef48e71de77bb8ac015412a566829f621d06bfae5c699b1b9?ns=registry.k8s.io", "NAME_UNKNOWN"},
		{"/v2/e2e-test-images/agnhost/blobs/sha256:0000000000000000000000000000000000000000000000000000000000000000?ns=registry.k8s.io", "BLOB_UNKNOWN"},
	} {
		resp, body := get(t, http.MethodGet, srv.URL+tc.url)
		if tc.code == "" {
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %s, want 200", tc.url, resp.Status)
			}
			continue
		}
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
			t.Errorf("GET %s: %s %s, want 404 %s", tc.url, resp.Status, body, tc.code)
		}
	}
	if resp, _ := get(t, http.MethodPut, base+"/manifests/2.63.0"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %s, want 405", resp.Status)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := write(t, dir, "registry.k8s.io/pause:3.10.2", "a")
	b := filepath.Join(dir, "b.tar")
	if _, err := ocibuild.WriteFile(b, ocibuild.Image{Ref: "registry.k8s.io/pause:3.10.2", Files: []ocibuild.File{{Path: "/b", Data: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	notTar := filepath.Join(dir, "x.tar")
	if err := os.WriteFile(notTar, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		files []string
		want  string
	}{
		{[]string{a, b}, "registry: " + b + ": registry.k8s.io/pause:3.10.2: a tarball loaded before names it too"},
		{[]string{notTar}, "registry: " + notTar + ": "},
		{[]string{filepath.Join(dir, "none.tar")}, "registry: " + filepath.Join(dir, "none.tar") + ": open"},
	} {
		if _, err := Load(nil, tc.files...); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Load(%v) = %v, want an error starting %q", tc.files, err, tc.want)
		}
	}
}
