package imagegc

import (
	"math"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Record is what GC knows about one image, keyed by image ID.
type Record struct {
	// FirstDetected is when GC first saw the image. The zero time means
	// "unknown, in the past": the image was there at the first detection.
	FirstDetected time.Time
	// LastUsed is the last detection at which the image was in use; zero if never.
	LastUsed time.Time
	// Size is the image's size in bytes, as the runtime reports it (at most
	// math.MaxInt64; never negative).
	Size int64
	// Pinned is the runtime's CRI pinned flag: the image is never removed.
	Pinned bool
	// Tags and Digests are the image's references, for matching and for output.
	Tags, Digests []string
}

// InUse maps an image reference (ID, tag or digest) to the reason it is in use,
// KeepInUse or KeepSandbox.
type InUse map[string]KeepReason

// NewInUse returns the images in use: sandbox, the pod sandbox image's
// references (the configured reference and the ID it resolves to), as
// KeepSandbox, and containers, the images of the runtime's containers (see
// ContainerImageRef), as KeepInUse. Empty references are skipped.
func NewInUse(sandbox, containers []string) InUse {
	inUse := make(InUse, len(sandbox)+len(containers))
	for _, ref := range sandbox {
		if ref != "" {
			inUse[ref] = KeepSandbox
		}
	}
	for _, ref := range containers {
		if _, ok := inUse[ref]; !ok && ref != "" {
			inUse[ref] = KeepInUse
		}
	}
	return inUse
}

// reason returns why the image with this record and id is in use, if it is.
func (u InUse) reason(id string, r *Record) (KeepReason, bool) {
	if why, ok := u[id]; ok {
		return why, true
	}
	for _, refs := range [][]string{r.Tags, r.Digests} {
		for _, ref := range refs {
			if why, ok := u[ref]; ok {
				return why, true
			}
		}
	}
	return "", false
}

// Detect updates records in place from the runtime's image list: an image seen
// for the first time gets FirstDetected = detectTime (the zero time on the very
// first detection: "unknown, in the past"); an image in use gets LastUsed = now;
// size, pinned flag and references are refreshed; records of images the runtime
// no longer lists are dropped. It does no I/O.
func Detect(records map[string]*Record, images []*runtimeapi.Image, inUse InUse, detectTime, now time.Time) {
	seen := make(map[string]struct{}, len(images))
	for _, img := range images {
		id := img.GetId()
		if id == "" {
			continue
		}
		seen[id] = struct{}{}
		r, ok := records[id]
		if !ok {
			r = &Record{FirstDetected: detectTime}
			records[id] = r
		}
		r.Size = int64(min(img.GetSize(), math.MaxInt64)) // a larger size would wrap negative
		r.Pinned = img.GetPinned()
		r.Tags = img.GetRepoTags()
		r.Digests = img.GetRepoDigests()
		if _, used := inUse.reason(id, r); used {
			r.LastUsed = now
		}
	}
	for id := range records {
		if _, ok := seen[id]; !ok {
			delete(records, id)
		}
	}
}
