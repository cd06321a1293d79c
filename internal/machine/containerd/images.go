package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

// importVisibleTimeout bounds the wait for the CRI plugin to list an image ctr
// imported (it learns of imports from containerd's events).
const importVisibleTimeout = 30 * time.Second

// Imported is one image imported from a tarball.
type Imported struct {
	// File is the tarball the image came from.
	File string
	// Ref is the image's name in containerd, e.g. "docker.io/library/app:1".
	Ref string
	// ID is the image ID the CRI API reports (the config digest).
	ID string
}

// ImportDir imports every *.tar file in dirs (OCI image layouts or docker save
// archives), in name order per dir, as ImportFiles does. A dir that does not
// exist is skipped (and logged).
func (m *Managed) ImportDir(ctx context.Context, dirs ...string) ([]Imported, error) {
	var files []string
	var errs []error
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			m.cfg.Logger.Info("image directory does not exist; nothing to import", "dir", d)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("image directory: %w", err))
			continue
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".tar") {
				files = append(files, filepath.Join(d, e.Name()))
			}
		}
	}
	imported, err := m.ImportFiles(ctx, files...)
	return imported, errors.Join(append(errs, err)...)
}

// ImportFiles imports image tarballs into containerd's k8s.io namespace with
// ctr (next to the containerd binary, else on PATH), unpacked for the
// snapshotter in use, and waits until the CRI API lists each image. It waits
// for Ready first. A file that cannot be imported gives an error naming it;
// the other files are still imported. It returns what was imported and the
// errors joined.
func (m *Managed) ImportFiles(ctx context.Context, files ...string) ([]Imported, error) {
	if len(files) == 0 {
		return nil, nil
	}
	select {
	case <-m.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("import images: containerd not ready: %w", ctx.Err())
	}
	ctr, err := m.ctrPath()
	if err != nil {
		return nil, err
	}
	client, err := cri.New(m.Endpoint(), cri.Options{Timeout: importVisibleTimeout})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	var out []Imported
	var errs []error
	for _, f := range files {
		refs, err := m.ctrImport(ctx, ctr, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ref := range refs {
			id, err := waitImage(ctx, client, ref)
			if err != nil {
				errs = append(errs, fmt.Errorf("import image %s from %s: %w", ref, f, err))
				continue
			}
			out = append(out, Imported{File: f, Ref: ref, ID: id})
			m.remember(ref, f)
			m.cfg.Logger.Info("imported image", "file", f, "image", ref, "imageID", id)
		}
	}
	return out, errors.Join(errs...)
}

// remember records that the image named ref came from file.
func (m *Managed) remember(ref, file string) {
	m.sourcesMu.Lock()
	defer m.sourcesMu.Unlock()
	if m.sources == nil {
		m.sources = map[string]string{}
	}
	m.sources[normalizedName(ref)] = file
}

// ImportAgain imports image again from the file an earlier import took it
// from, and returns its image ID: the image directories are where those
// images come from, as a registry is for the others, so an image removed
// since (by image GC, or by hand) comes back when a pod needs it, as the
// kubelet pulls a collected image again. ok is false when no import took
// image from a file (pull it). image is a pod's image reference, normalized
// as the runtime does ("app:1" is "docker.io/library/app:1").
func (m *Managed) ImportAgain(ctx context.Context, image string) (id string, ok bool, err error) {
	name := normalizedName(image)
	m.sourcesMu.Lock()
	file, ok := m.sources[name]
	m.sourcesMu.Unlock()
	if !ok {
		return "", false, nil
	}
	imported, err := m.ImportFiles(ctx, file)
	for _, im := range imported {
		if normalizedName(im.Ref) == name {
			m.cfg.Logger.Info("image imported again from its file", "image", image, "file", file, "imageID", im.ID)
			return im.ID, true, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%s no longer holds it", file)
	}
	return "", true, fmt.Errorf("import image %q again from %s: %w", image, file, err)
}

// normalizedName is ref as containerd names it (docker.io/library/ for a
// bare name, :latest without a tag or digest); ref itself when it does not
// parse.
func normalizedName(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// ctrPath finds ctr next to the containerd binary, else on PATH.
func (m *Managed) ctrPath() (string, error) {
	p := filepath.Join(filepath.Dir(m.cfg.Binary), "ctr")
	if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return p, nil
	}
	p, err := exec.LookPath("ctr")
	if err != nil {
		return "", fmt.Errorf("import images: ctr not found next to %s nor on PATH (it comes with the containerd package)", m.cfg.Binary)
	}
	return p, nil
}

// unpacking matches the line ctr images import prints per image it unpacks:
// "unpacking docker.io/library/app:1 (sha256:...)...done".
var unpacking = regexp.MustCompile(`unpacking (\S+) \((sha256:[0-9a-f]{64})\)\.\.\.`)

// ctrImport runs ctr images import on file and returns the refs it unpacked.
func (m *Managed) ctrImport(ctx context.Context, ctr, file string) ([]string, error) {
	cmd := exec.CommandContext(ctx, ctr, "-a", m.Socket(), "-n", Namespace,
		"images", "import", "--snapshotter", m.Config().Snapshotter, file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := lastLine(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("import image file %s: %s", file, msg)
	}
	var refs []string
	for _, mt := range unpacking.FindAllStringSubmatch(stdout.String(), -1) {
		if !slices.Contains(refs, mt[1]) {
			refs = append(refs, mt[1])
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("import image file %s: it holds no named image for this platform (ctr: %q)", file, strings.TrimSpace(stdout.String()))
	}
	return refs, nil
}

// lastLine returns the last non-empty line of s, without ctr's "ctr: " prefix.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "ctr: ")
}

// waitImage waits until the CRI API lists ref and returns its image ID. The
// CRI plugin learns of imports from containerd events: poll with a short,
// bounded interval.
func waitImage(ctx context.Context, client *cri.Client, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, importVisibleTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := client.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
		if err == nil && st.GetImage() != nil {
			return st.GetImage().GetId(), nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("not listed by the CRI API")
			}
			return "", fmt.Errorf("%w (waited %v)", err, importVisibleTimeout)
		case <-tick.C:
		}
	}
}
