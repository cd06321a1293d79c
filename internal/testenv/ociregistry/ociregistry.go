// Package ociregistry serves OCI image-layout tarballs (as ocibuild writes
// them) read-only over the OCI distribution API, so that a containerd whose
// registries are mirrored to it (containerd.Config.RegistryMirrors) pulls the
// images by their upstream names: the conformance harness's loopback
// registry of the e2e stand-ins. It serves only what a pull needs (the API
// version check, manifests by tag or digest, blobs by digest, GET and HEAD);
// it has no push, catalog or authentication.
//
// The blobs are read from the tarballs where they lie (uncompressed tar
// entries), never copied into memory or onto disk; the tarballs must not
// change while a Registry serves them.
package ociregistry

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Ref is an image reference split as a registry sees it.
type Ref struct {
	// Registry is the host ("registry.k8s.io", "docker.io").
	Registry string
	// Repository is the path in the registry ("e2e-test-images/agnhost",
	// "library/busybox").
	Repository string
	// Tag is the tag, "" for a reference by digest only.
	Tag string
	// Digest is the "@sha256:..." part without the "@", "" if none.
	Digest string
}

// ParseRef splits a reference as containerd and docker normalize it: a first
// component without '.' or ':' (and not localhost) is a repository of
// docker.io, a single-component docker.io repository is in library/, and
// no tag and no digest means the tag latest.
func ParseRef(s string) (Ref, error) {
	var r Ref
	name := s
	if i := strings.Index(name, "@"); i >= 0 {
		r.Digest, name = name[i+1:], name[:i]
		if _, err := digest.Parse(r.Digest); err != nil {
			return r, fmt.Errorf("image reference %q: digest: %w", s, err)
		}
	}
	if i := strings.LastIndex(name, ":"); i >= 0 && !strings.Contains(name[i:], "/") {
		r.Tag, name = name[i+1:], name[:i]
	}
	first, rest, ok := strings.Cut(name, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		r.Registry, r.Repository = first, rest
	} else {
		r.Registry, r.Repository = "docker.io", name
	}
	if r.Registry == "docker.io" && !strings.Contains(r.Repository, "/") {
		r.Repository = "library/" + r.Repository
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	if !repoRE.MatchString(r.Repository) || r.Tag != "" && !tagRE.MatchString(r.Tag) {
		return r, fmt.Errorf("image reference %q: not a valid reference", s)
	}
	return r, nil
}

var (
	repoRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	tagRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// blob is where a blob lies: a span of one tarball.
type blob struct {
	file      string
	off, size int64
}

// manifest is a served manifest: its media type and bytes.
type manifest struct {
	mediaType string
	digest    digest.Digest
	data      []byte
}

// Registry serves the images of the tarballs Load read. It is safe for
// concurrent use: after Load it is read-only.
type Registry struct {
	// tags maps registry/repository:tag to the manifest.
	tags map[string]*manifest
	// repos maps registry/repository to the manifests and blobs it
	// holds, by digest: a repository serves only its own content, as a
	// registry does.
	repos map[string]*repo
	// byPath maps a repository path alone to the registry/repository keys
	// holding it: a request without ?ns= is served only when one does.
	byPath map[string][]string
	// Unservable are the references of the tarballs that name an image by a
	// digest that is not its manifest's: a registry cannot serve those (the
	// client checks the digest of what it gets), only an import can name
	// them.
	Unservable []string
	log        *slog.Logger
	files      sync.Map // file name -> *os.File, opened on first use
}

type repo struct {
	manifests map[digest.Digest]*manifest
	blobs     map[digest.Digest]blob
}

// Load reads the image-layout tarballs: each image its index.json names
// (by the containerd or OCI ref-name annotation) is served under its
// reference's repository and tag. Two tarballs naming one reference, or a
// tarball without a named image, are errors naming the file. log receives
// each request that is not found (nil: discarded).
func Load(log *slog.Logger, files ...string) (*Registry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{tags: map[string]*manifest{}, repos: map[string]*repo{}, byPath: map[string][]string{}, log: log}
	for _, f := range files {
		if err := r.load(f); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", f, err)
		}
	}
	return r, nil
}

// Refs returns the references served by tag, sorted.
func (r *Registry) Refs() []string {
	var out []string
	for k := range r.tags {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Registries returns the registry hosts the served images name, sorted:
// those to mirror to this registry.
func (r *Registry) Registries() []string {
	seen := map[string]bool{}
	var out []string
	for k := range r.repos {
		host, _, _ := strings.Cut(k, "/")
		if !seen[host] {
			seen[host] = true
			out = append(out, host)
		}
	}
	slices.Sort(out)
	return out
}

// load indexes one tarball.
func (r *Registry) load(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	blobs := map[digest.Digest]blob{}
	var index []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Name == "index.json" {
			if index, err = io.ReadAll(tr); err != nil {
				return err
			}
			continue
		}
		alg, enc, ok := strings.Cut(strings.TrimPrefix(h.Name, "blobs/"), "/")
		if !strings.HasPrefix(h.Name, "blobs/") || !ok {
			continue
		}
		d := digest.NewDigestFromEncoded(digest.Algorithm(alg), enc)
		if d.Validate() != nil {
			continue
		}
		// The entry's data starts where the reader is now: tar entries are
		// stored uncompressed, in one piece.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		blobs[d] = blob{file: file, off: off, size: h.Size}
	}
	if index == nil {
		return errors.New("no index.json: not an OCI image layout")
	}
	var idx ocispec.Index
	if err := json.Unmarshal(index, &idx); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	named := 0
	for _, desc := range idx.Manifests {
		name := desc.Annotations["io.containerd.image.name"]
		if name == "" {
			name = desc.Annotations[ocispec.AnnotationRefName]
		}
		if name == "" {
			continue
		}
		ref, err := ParseRef(name)
		if err != nil {
			return err
		}
		b, ok := blobs[desc.Digest]
		if !ok {
			return fmt.Errorf("index.json: manifest %s of %s is not in the tarball", desc.Digest, name)
		}
		data := make([]byte, b.size)
		if _, err := f.ReadAt(data, b.off); err != nil {
			return fmt.Errorf("manifest of %s: %w", name, err)
		}
		if digest.FromBytes(data) != desc.Digest {
			return fmt.Errorf("manifest of %s: content does not match its digest %s", name, desc.Digest)
		}
		m := &manifest{mediaType: desc.MediaType, digest: desc.Digest, data: data}
		if m.mediaType == "" {
			m.mediaType = ocispec.MediaTypeImageManifest
		}
		named++
		key := ref.Registry + "/" + ref.Repository
		if ref.Digest != "" && ref.Digest != desc.Digest.String() {
			r.Unservable = append(r.Unservable, name)
			continue
		}
		if ref.Tag != "" {
			tagKey := key + ":" + ref.Tag
			if _, dup := r.tags[tagKey]; dup {
				return fmt.Errorf("%s: a tarball loaded before names it too", tagKey)
			}
			r.tags[tagKey] = m
		}
		rp := r.repos[key]
		if rp == nil {
			rp = &repo{manifests: map[digest.Digest]*manifest{}, blobs: map[digest.Digest]blob{}}
			r.repos[key] = rp
			r.byPath[ref.Repository] = append(r.byPath[ref.Repository], key)
		}
		rp.manifests[desc.Digest] = m
		for d, b := range blobs {
			if d != desc.Digest {
				rp.blobs[d] = b
			}
		}
	}
	if named == 0 {
		return errors.New("index.json names no image")
	}
	return nil
}

// pathRE is /v2/<repository>/(manifests|blobs)/<reference>.
var pathRE = regexp.MustCompile(`^/v2/(.+)/(manifests|blobs)/([^/]+)$`)

// ServeHTTP answers the distribution API's pull requests: GET or HEAD of
// /v2/, of /v2/<repo>/manifests/<tag or digest> and of
// /v2/<repo>/blobs/<digest>. The registry is the ns query parameter
// containerd adds for a mirror; without it the repository path must be held
// under one registry only.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		apiError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
		return
	}
	if req.URL.Path == "/v2/" || req.URL.Path == "/v2" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
		return
	}
	m := pathRE.FindStringSubmatch(req.URL.Path)
	if m == nil {
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "not a path of the distribution API")
		return
	}
	repoPath, kind, reference := m[1], m[2], m[3]
	key := ""
	if ns := req.URL.Query().Get("ns"); ns != "" {
		key = ns + "/" + repoPath
	} else if keys := r.byPath[repoPath]; len(keys) == 1 {
		key = keys[0]
	}
	rp := r.repos[key]
	if rp == nil {
		r.log.Info("registry: repository unknown", "path", req.URL.Path, "ns", req.URL.Query().Get("ns"))
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository "+repoPath+" is not served here")
		return
	}
	switch kind {
	case "manifests":
		mf := r.tags[key+":"+reference]
		if d, err := digest.Parse(reference); err == nil {
			mf = rp.manifests[d]
		}
		if mf == nil {
			r.log.Info("registry: manifest unknown", "repository", key, "reference", reference)
			apiError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest "+reference+" of "+repoPath+" is not served here")
			return
		}
		w.Header().Set("Content-Type", mf.mediaType)
		w.Header().Set("Docker-Content-Digest", mf.digest.String())
		w.Header().Set("Content-Length", fmt.Sprint(len(mf.data)))
		if req.Method == http.MethodGet {
			_, _ = w.Write(mf.data)
		}
	case "blobs":
		d, err := digest.Parse(reference)
		if err != nil {
			apiError(w, http.StatusBadRequest, "DIGEST_INVALID", "blob "+reference+": not a digest")
			return
		}
		b, ok := rp.blobs[d]
		if !ok {
			r.log.Info("registry: blob unknown", "repository", key, "digest", d)
			apiError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob "+reference+" of "+repoPath+" is not served here")
			return
		}
		f, err := r.open(b.file)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", d.String())
		w.Header().Set("Etag", `"`+d.String()+`"`)
		// ServeContent answers HEAD and Range requests (a resumed pull).
		http.ServeContent(w, req, "", blobTime, io.NewSectionReader(f, b.off, b.size))
	}
}

// open returns the tarball file, opened once and kept open for ReadAt
// (safe for concurrent use) until Close.
func (r *Registry) open(name string) (*os.File, error) {
	if f, ok := r.files.Load(name); ok {
		return f.(*os.File), nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	if prev, loaded := r.files.LoadOrStore(name, f); loaded {
		f.Close()
		return prev.(*os.File), nil
	}
	return f, nil
}

// Close closes the tarballs the registry opened; a request after Close
// opens them again.
func (r *Registry) Close() error {
	var errs []error
	r.files.Range(func(k, v any) bool {
		r.files.Delete(k)
		errs = append(errs, v.(*os.File).Close())
		return true
	})
	return errors.Join(errs...)
}

// blobTime is the blobs' modification time: none (no Last-Modified).
var blobTime time.Time

// Serve serves the registry on l until ctx is done, then closes l, waits for
// the requests in flight (at most 5 s) and closes the tarballs. It returns
// nil after ctx is done, else the server's error.
func (r *Registry) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if serr := srv.Shutdown(sctx); serr != nil {
			srv.Close()
		}
		<-done
	}
	return errors.Join(err, r.Close())
}

// apiError writes an error of the distribution API.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
