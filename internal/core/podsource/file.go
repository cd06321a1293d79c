package podsource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// DefaultPeriod is the rescan period when FileConfig.Period is 0: the
// kubelet's fileCheckFrequency default.
const DefaultPeriod = 20 * time.Second

// Event reasons of File.
const (
	// ReasonInvalidManifest is the reason of the Warning event recorded on the
	// Node for a manifest file, or a pod in it, that is skipped: it cannot be
	// read or decoded, or the pod is invalid. The message is the error.
	ReasonInvalidManifest = "InvalidManifest"
	// ReasonFailedValidation is the kubelet's reason for the Warning event
	// recorded on a pod skipped because an earlier pod of the source has the
	// same namespace and name.
	ReasonFailedValidation = "FailedValidation"
)

// FileConfig configures a File source.
type FileConfig struct {
	// Path is a directory of manifests or a single manifest file: the
	// kubelet's staticPodPath (--pod-manifest-path). In a directory, names
	// starting with "." are ignored and subdirectories are not read.
	Path string
	// NodeName is the node the pods run on; static pod names end with it,
	// lowercased.
	NodeName string
	// Period is how often the path is read again whatever inotify reports
	// (the kubelet's fileCheckFrequency); 0 means DefaultPeriod.
	Period time.Duration
	// MaxFileSize is the largest manifest file read, in bytes; 0 means
	// DefaultMaxFileSize.
	MaxFileSize int64
}

// DefaultMaxFileSize is the largest manifest file read when
// FileConfig.MaxFileSize is 0: 10 MiB, the kubelet's limit
// (maxConfigLength). A larger file is skipped unread past the limit, with an
// InvalidManifest event: its pod could not start anyway (a CRI message is at
// most 16 MiB), and reading it would grow the agent by many times its size.
const DefaultMaxFileSize = decode.DefaultMaxConfigSize

// FileDeps are the collaborators of a File source.
type FileDeps struct {
	// Clock times the periodic rescan; nil means the real clock. It is
	// injected because the tests hold the rescan still while the source
	// watches real files with inotify, which a synctest bubble cannot hold.
	Clock    clock.WithTicker
	Logger   *slog.Logger     // nil discards logs
	Recorder nodeapi.Recorder // nil discards events
}

// File is the static pod source of a manifest directory or file. Build it
// with NewFile and run it with Run; it keeps no state between runs.
type File struct {
	path     string // cfg.Path without trailing separators
	nodeName string
	period   time.Duration
	maxSize  int64
	clock    clock.WithTicker
	log      *slog.Logger
	rec      nodeapi.Recorder
	noWatch  bool   // tests of the periodic rescan turn inotify off
	onSync   func() // tests: called after each scan
}

// NewFile checks cfg and returns a File source. The path need not exist yet.
func NewFile(cfg FileConfig, deps FileDeps) (*File, error) {
	path := strings.TrimRight(cfg.Path, string(os.PathSeparator))
	if cfg.Path != "" && path == "" {
		path = string(os.PathSeparator)
	}
	switch {
	case path == "":
		return nil, errors.New("podsource: Path is empty")
	case cfg.NodeName == "":
		return nil, errors.New("podsource: NodeName is empty")
	case cfg.Period < 0:
		return nil, fmt.Errorf("podsource: Period %v is negative", cfg.Period)
	case cfg.MaxFileSize < 0:
		return nil, fmt.Errorf("podsource: MaxFileSize %d is negative", cfg.MaxFileSize)
	}
	if msgs := validation.IsDNS1123Subdomain(strings.ToLower(cfg.NodeName)); len(msgs) > 0 {
		return nil, fmt.Errorf("podsource: NodeName %q: %s", cfg.NodeName, strings.Join(msgs, "; "))
	}
	f := &File{
		path:     path,
		nodeName: cfg.NodeName,
		period:   cfg.Period,
		maxSize:  cfg.MaxFileSize,
		clock:    deps.Clock,
		log:      deps.Logger,
		rec:      deps.Recorder,
	}
	if f.period == 0 {
		f.period = DefaultPeriod
	}
	if f.maxSize == 0 {
		f.maxSize = DefaultMaxFileSize
	}
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.rec == nil {
		f.rec = nodeapi.LogRecorder{}
	}
	f.log = f.log.With("source", "file", "path", f.path)
	return f, nil
}

// Run reads the path and calls sink with the complete, current set of valid
// pods: once at start (also when there are none, or the path does not exist,
// so the caller knows which pods it ran before are gone), then after every
// change, seen through inotify or the periodic rescan. sink is called from
// Run's goroutine, one call at a time, and only when the set differs from the
// last one sent (by pod UID and content); it owns the pods it is given. Each
// pod carries the config.seen annotation of when the source first saw it.
//
// An invalid manifest, or pod in one, is logged (one line naming the file,
// the field and the value) and recorded as a Warning event once per file
// content, and skipped. Run returns nil when ctx ends, after its goroutines
// have.
func (f *File) Run(ctx context.Context, sink func(pods []*v1.Pod)) error {
	st := &scanState{
		files:    map[string]*fileResult{},
		problems: map[string]bool{},
		seen:     map[types.UID]string{},
		dirWD:    -1,
		parentWD: -1,
	}
	pokes := make(chan struct{}, 1)
	var w *watcher
	var wg sync.WaitGroup
	if !f.noWatch {
		var err error
		if w, err = newWatcher(); err != nil {
			f.log.Warn("Cannot watch static pod path; reading it every period only", "period", f.period, "err", err)
			w = nil
		} else {
			wg.Go(func() {
				err := w.run(func() {
					select {
					case pokes <- struct{}{}:
					default: // a rescan is already due
					}
				})
				if err != nil {
					f.log.Error("Watching static pod path failed; reading it every period only", "period", f.period, "err", err)
				}
			})
			defer func() {
				_ = w.close()
				wg.Wait()
			}()
		}
	}
	ticker := f.clock.NewTicker(f.period)
	defer ticker.Stop()
	for {
		f.sync(ctx, st, w, sink)
		if f.onSync != nil {
			f.onSync()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		case <-pokes:
		}
	}
}

// scanState is what Run keeps between scans; only Run's goroutine touches it.
type scanState struct {
	files    map[string]*fileResult // by file path: the last content read and its pods
	problems map[string]bool        // keys of the problems reported and still present
	seen     map[types.UID]string   // config.seen of each pod in the last set sent
	sent     []string               // keys of the pods in the last set sent
	sentOnce bool
	missing  bool  // the path did not exist at the last scan
	dirWD    int32 // the watch on the path when it is a directory, or -1
	parentWD int32 // the watch on the path's parent directory, or -1
}

// fileResult is what one content of a manifest file gives.
type fileResult struct {
	sum  [sha256.Size]byte
	pods []*v1.Pod
	keys []string // per pod: UID and content hash
	errs []error
}

// problem is something to report once: logged, and recorded on obj.
type problem struct {
	key    string
	err    error
	obj    runtime.Object
	reason string
}

// sync scans the path, reports new problems and sends the set if it changed.
func (f *File) sync(ctx context.Context, st *scanState, w *watcher, sink func([]*v1.Pod)) {
	if w != nil {
		f.ensureWatches(st, w)
		f.sendRemovals(st, w.takeRemoved(), sink)
	}
	pods, keys, problems, ok := f.scan(ctx, st)
	if ctx.Err() != nil {
		return
	}
	f.report(st, problems)
	if !ok && st.sentOnce {
		return // keep the last set until the path can be read again
	}
	f.send(st, pods, keys, sink)
}

// sendRemovals sends the last set without the pods of the files removed
// since the last scan, as the kubelet sees every removal: a manifest deleted
// and written again before this scan stops its pods, and the scan then gives
// them back (see the agent's revive), instead of the two changes cancelling.
func (f *File) sendRemovals(st *scanState, removed []string, sink func([]*v1.Pod)) {
	if !st.sentOnce {
		return
	}
	kept := maps.Clone(st.files)
	for _, file := range removed {
		delete(kept, file)
	}
	if len(kept) == len(st.files) {
		return
	}
	pods, keys, _ := collect(slices.Sorted(maps.Keys(kept)), kept)
	f.send(st, pods, keys, sink)
}

// send gives sink pods, the set whose keys are keys, if it differs from the
// last set sent.
func (f *File) send(st *scanState, pods []*v1.Pod, keys []string, sink func([]*v1.Pod)) {
	if st.sentOnce && slices.Equal(keys, st.sent) {
		return
	}
	now := seenString(f.clock.Now())
	seen := make(map[types.UID]string, len(pods))
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		s, ok := st.seen[p.UID]
		if !ok {
			s = now
		}
		seen[p.UID] = s
		out[i] = p.DeepCopy()
		out[i].Annotations[ConfigSeenAnnotation] = s
	}
	st.seen, st.sent, st.sentOnce = seen, keys, true
	sink(out)
}

// ensureWatches watches the path's parent directory for the path itself
// (made, removed, renamed, written when it is a file) and, when the path is a
// directory, the directory for its entries. A directory that was replaced is
// watched anew. Errors (a missing parent) leave it to the periodic rescan.
func (f *File) ensureWatches(st *scanState, w *watcher) {
	rewatch := func(old *int32, dir, name string) {
		wd, err := w.add(dir, name)
		if err != nil {
			wd = -1
		}
		if *old >= 0 && *old != wd {
			w.remove(*old)
		}
		*old = wd
	}
	rewatch(&st.parentWD, filepath.Dir(f.path), filepath.Base(f.path))
	if fi, err := os.Stat(f.path); err == nil && fi.IsDir() {
		rewatch(&st.dirWD, f.path, "")
	} else if st.dirWD >= 0 {
		w.remove(st.dirWD)
		st.dirWD = -1
	}
}

// scan reads the path and returns its valid pods in order (files by name,
// pods in file order) with their keys, and the problems found. ok is false
// when the path could not be listed: the last set sent stays (the first set is
// empty).
func (f *File) scan(ctx context.Context, st *scanState) (pods []*v1.Pod, keys []string, problems []problem, ok bool) {
	fi, err := os.Stat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		if !st.missing {
			f.log.Warn("Static pod path does not exist; watching for it")
		}
		st.missing = true
		st.files = map[string]*fileResult{}
		return nil, nil, nil, true
	}
	st.missing = false
	if err != nil {
		return nil, nil, []problem{f.nodeProblem(f.path, err)}, false
	}
	var files []string
	switch {
	case fi.IsDir():
		entries, err := os.ReadDir(f.path)
		if err != nil {
			return nil, nil, []problem{f.nodeProblem(f.path, err)}, false
		}
		for _, e := range entries { // sorted by name
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			files = append(files, filepath.Join(f.path, e.Name()))
		}
	case fi.Mode().IsRegular():
		files = []string{f.path}
	default:
		return nil, nil, []problem{f.nodeProblem(f.path, fmt.Errorf("%s: not a directory or regular file (mode %v)", f.path, fi.Mode()))}, false
	}

	results := make(map[string]*fileResult, len(files))
	for _, file := range files {
		r, perr := f.readFile(ctx, st, file)
		if perr != nil {
			if ctx.Err() != nil {
				return nil, nil, nil, false
			}
			if _, lerr := os.Lstat(file); errors.Is(lerr, fs.ErrNotExist) {
				continue // removed since the directory was listed
			}
			problems = append(problems, f.nodeProblem(file, perr))
			continue
		}
		results[file] = r
	}
	st.files = results
	pods, keys, dups := collect(files, results)
	for _, file := range files {
		if r := results[file]; r != nil {
			for _, err := range r.errs {
				problems = append(problems, problem{key: "pod\x00" + file + "\x00" + hex.EncodeToString(r.sum[:]) + "\x00" + err.Error(),
					err: err, obj: nodeapi.NodeRef(f.nodeName), reason: ReasonInvalidManifest})
			}
		}
	}
	return pods, keys, append(problems, dups...), true
}

// collect is the set of pods that the files' results give, in file order,
// with a problem for each pod whose namespace and name, or UID, an earlier
// pod has.
func collect(files []string, results map[string]*fileResult) (pods []*v1.Pod, keys []string, problems []problem) {
	from := map[string]string{}       // namespace/name -> the file of the pod that has it
	fromUID := map[types.UID]string{} // UID -> the file of the pod that has it
	for _, file := range files {
		r := results[file]
		if r == nil {
			continue
		}
		for i, p := range r.pods {
			name := p.Namespace + "/" + p.Name
			first, dup := from[name]
			what := "pod name: %s has a pod of the same namespace and name"
			if !dup {
				// Only a UID written in two manifests can be the same.
				first, dup = fromUID[p.UID]
				what = "pod UID: %s has a pod with metadata.uid " + string(p.UID)
			}
			if dup {
				err := &Error{File: file, Pod: name, Err: fmt.Errorf("duplicate "+what+"; skipped", first)}
				problems = append(problems, problem{key: "dup\x00" + file + "\x00" + string(p.UID) + "\x00" + first,
					err: err, obj: p.DeepCopy(), reason: ReasonFailedValidation})
				continue
			}
			from[name], fromUID[p.UID] = file, file
			pods = append(pods, p)
			keys = append(keys, r.keys[i])
		}
	}
	return pods, keys, problems
}

// readFile returns the pods of file, parsing it only when its content changed
// since the last scan. The error is about the file as a whole: not a regular
// file, unreadable, too large.
func (f *File) readFile(ctx context.Context, st *scanState, file string) (*fileResult, error) {
	fi, err := os.Stat(file) // follows symbolic links, as the kubelet does
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, fmt.Errorf("%s: is a directory; manifests in subdirectories are not read", file)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s: not a regular file (mode %v)", file, fi.Mode())
	}
	data, err := decode.ReadFile(ctx, file, f.maxSize)
	if err != nil {
		if tl := (*decode.TooLargeError)(nil); errors.As(err, &tl) {
			return nil, fmt.Errorf("%s: larger than %s (%d bytes), the largest static pod manifest read, as the kubelet's",
				file, resource.NewQuantity(tl.Limit, resource.BinarySI), tl.Limit)
		}
		return nil, err
	}
	sum := sha256.Sum256(data)
	if old, ok := st.files[file]; ok && old.sum == sum {
		return old, nil
	}
	pods, errs := ParseManifest(file, data, f.nodeName)
	if len(pods) == 0 && len(errs) == 0 {
		// The kubelet cannot parse such a file and says so; say it once
		// per content, as for the other problems.
		what := "holds no pod (only comments or empty YAML documents)"
		if len(bytes.TrimSpace(data)) == 0 {
			what = "is empty: no pod"
		}
		errs = []error{&Error{File: file, Err: errors.New(what)}}
	}
	r := &fileResult{sum: sum, pods: pods, errs: errs, keys: make([]string, len(pods))}
	for i, p := range pods {
		// The generated protobuf encoding: deterministic (map keys sorted)
		// and, unlike encoding/json, without a field cache for the whole
		// Pod type that the agent would keep for good.
		pb, err := p.Marshal()
		if err != nil { // cannot happen for a decoded pod
			return nil, fmt.Errorf("%s: encode pod %s: %w", file, p.Name, err)
		}
		h := sha256.Sum256(pb)
		r.keys[i] = string(p.UID) + "/" + hex.EncodeToString(h[:])
	}
	return r, nil
}

func (f *File) nodeProblem(file string, err error) problem {
	return problem{key: "file\x00" + file + "\x00" + err.Error(), err: err, obj: nodeapi.NodeRef(f.nodeName), reason: ReasonInvalidManifest}
}

// report logs and records the problems not reported at the last scan, and
// forgets those that are gone, so that one coming back is reported again.
func (f *File) report(st *scanState, problems []problem) {
	now := make(map[string]bool, len(problems))
	for _, p := range problems {
		now[p.key] = true
		if st.problems[p.key] {
			continue
		}
		msg := p.err.Error()
		f.log.Warn("Skipping static pod manifest", "reason", p.reason, "err", msg)
		f.rec.Event(p.obj, v1.EventTypeWarning, p.reason, msg)
	}
	st.problems = now
}
