package imagegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/metrics"
	"github.com/nodekeeper/nodekeeper/internal/base/periodic"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// The kubelet's periods.
const (
	DefaultDetectPeriod = 5 * time.Minute
	DefaultCachePeriod  = 30 * time.Second
	DefaultGCPeriod     = 5 * time.Minute
)

// Event reasons, the kubelet's.
const (
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	EventImageGCFailed       = "ImageGCFailed"
)

// ImageService is the part of CRI's ImageManagerService the Manager uses.
// internal/machine/cri's Client and cri-api's FakeImageService satisfy it. Calls may
// come from several goroutines; the Manager never calls RemoveImage for the
// same image twice at once.
type ImageService interface {
	// ListImages lists all images; GC passes nil.
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	// ImageStatus resolves the sandbox image's reference to its ID; a nil
	// Image in the response means it is absent.
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	// RemoveImage removes an image by ID. Removing an absent image succeeds.
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
}

// ImageFs reports which filesystem holds the images: the CRI ImageFsInfo call.
// The Manager statfs'es the first image filesystem's mountpoint for capacity.
type ImageFs interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// Config configures a Manager.
type Config struct {
	Policy Policy
	// SandboxImage is the pod sandbox (pause) image reference; it is always in
	// use. Empty: rely on the runtime's pinned flag alone.
	SandboxImage string
	// Periods of the loops; zero means the kubelet's default.
	DetectPeriod, CachePeriod, GCPeriod time.Duration
	// Start is when the Manager starts: the maximum age applies only once it
	// is that far behind. Zero means the time New is called.
	Start time.Time
}

// Deps are the Manager's collaborators.
type Deps struct {
	Images  ImageService // required
	ImageFs ImageFs      // required for GarbageCollect
	// InUse returns the references (image IDs) of the images the runtime's
	// containers use, exited ones included; see ContainerImages. Required.
	InUse func(ctx context.Context) ([]string, error)
	// Statfs returns the capacity and available bytes of the filesystem at
	// path. Nil means statfs(2).
	Statfs func(path string) (FsStats, error)
	// Recorder receives the node-level events (InvalidDiskCapacity,
	// FreeDiskSpaceFailed, ImageGCFailed), about the Node NodeName. Nil
	// discards them.
	Recorder nodeapi.Recorder
	// NodeName names the node the events are about.
	NodeName string
	// Registerer receives kubelet_image_garbage_collected_total. Nil: the
	// counter is kept but not registered.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil: discard
	// Store, when set, keeps the image records across restarts: New loads
	// them (a failure is logged and GC starts with none), and every detection,
	// GC pass and FreeSpace saves them.
	Store RecordStore
}

// Manager garbage-collects images. Run drives the periodic loops; GarbageCollect,
// FreeSpace and DeleteUnusedImages may also be called from any goroutine: passes
// are serialized.
type Manager struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	removed *prometheus.CounterVec

	// pass is held by the one pass that may touch records and initialized.
	pass        periodic.Serial
	records     map[string]*Record // guarded by pass
	initialized bool               // guarded by pass: a detection succeeded
	gcFailed    bool               // the last periodic GC failed; touched only by the caller of Step
	// step is the schedule of Step's duties, made at its first call; touched
	// only by the caller of Step.
	step periodic.Step

	cache atomic.Pointer[[]*runtimeapi.Image] // the last image list; read by Images
}

// New validates the policy and returns a Manager. The maximum age counts from now.
func New(cfg Config, deps Deps) (*Manager, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if deps.Images == nil || deps.InUse == nil {
		return nil, errors.New("imagegc: Deps.Images and Deps.InUse are required")
	}
	cfg.DetectPeriod = cmpOr(cfg.DetectPeriod, DefaultDetectPeriod)
	cfg.CachePeriod = cmpOr(cfg.CachePeriod, DefaultCachePeriod)
	cfg.GCPeriod = cmpOr(cfg.GCPeriod, DefaultGCPeriod)
	if deps.Statfs == nil {
		deps.Statfs = statfs
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := metrics.NewRegistrar(deps.Registerer, "imagegc")
	removed := reg.CounterVec(prometheus.CounterOpts{
		Name: "kubelet_image_garbage_collected_total",
		Help: "Total number of images garbage collected, by reason (age or space).",
	}, "reason")
	if err := reg.Err(); err != nil {
		return nil, err
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Now()
	}
	m := &Manager{
		cfg: cfg, deps: deps, log: log.With("subsystem", "imagegc"),
		removed: removed,
		pass:    periodic.NewSerial(), records: map[string]*Record{},
	}
	if deps.Store != nil {
		records, err := deps.Store.Load()
		switch {
		case err != nil:
			m.log.Error("image records not restored; starting with none", "err", err)
		case records != nil:
			// The records say when each image was first seen: images new
			// since then are new, not "there before".
			m.records, m.initialized = records, true
			m.log.Info("image records restored", "images", len(records))
		}
	}
	return m, nil
}

// save saves the records to the store, if any. The caller holds pass.
func (m *Manager) save() {
	if m.deps.Store == nil {
		return
	}
	if err := m.deps.Store.Save(m.records); err != nil {
		m.log.Error("save image records", "err", err)
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Run detects images (every DetectPeriod), refreshes the image-list cache
// (every CachePeriod) and, unless the policy disables it (high = 100 and no
// maximum age), garbage-collects (every GCPeriod), until ctx ends; then it
// returns nil: Step on real time (periodic.Loop). Call Run once.
func (m *Manager) Run(ctx context.Context) error {
	return periodic.Loop(ctx, m.Step, nil)
}

// Step runs the duties due at now — detection, cache refresh and GC, all
// first due at the first call, in that order — and returns the earliest time
// one is due again. Failures are logged and retried at the next period; a GC
// failure that repeats emits ImageGCFailed. Call it from one goroutine at a
// time (Run's, or nodekeeper simulate's on virtual time).
func (m *Manager) Step(ctx context.Context, now time.Time) time.Time {
	if m.step == nil {
		duties := []periodic.Duty{
			{Period: m.cfg.DetectPeriod, Do: m.detectOnce},
			{Period: m.cfg.CachePeriod, Do: m.refreshCache},
		}
		if m.cfg.Policy.PeriodicEnabled() {
			duties = append(duties, periodic.Duty{Period: m.cfg.GCPeriod, Do: m.periodicGC})
		} else {
			m.log.Info("image GC disabled: imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0")
		}
		m.step, _ = periodic.Duties(duties...) // New validated the periods
	}
	return m.step(ctx, now)
}

// periodicGC is one tick of the periodic GC loop: GarbageCollect, with the
// failure handling of the kubelet's loop. A first failure is logged (stats may
// not be ready yet); a failure after a failure also emits ImageGCFailed. Only
// the caller of Step calls it.
func (m *Manager) periodicGC(ctx context.Context, now time.Time) {
	err := m.GarbageCollect(ctx, now)
	prevFailed := m.gcFailed
	switch {
	case ctx.Err() != nil:
		return
	case err != nil && prevFailed:
		m.log.Error("image garbage collection failed multiple times in a row", "err", err)
		m.event(EventImageGCFailed, err.Error())
	case err != nil:
		m.log.Error("image garbage collection failed once; stats may not be ready yet", "err", err)
	case prevFailed:
		m.log.Info("image garbage collection succeeded")
	default:
		m.log.Debug("image garbage collection succeeded")
	}
	m.gcFailed = err != nil
}

// Images returns the image list of the last successful cache refresh (nil
// before the first). The slice is shared: do not modify it.
func (m *Manager) Images() []*runtimeapi.Image {
	if p := m.cache.Load(); p != nil {
		return *p
	}
	return nil
}

func (m *Manager) refreshCache(ctx context.Context, _ time.Time) {
	imgs, err := m.deps.Images.ListImages(ctx, nil)
	if err != nil {
		m.log.Warn("update image list", "err", err)
		return
	}
	m.cache.Store(&imgs)
}

// detectOnce is the periodic detection; a failure is logged and retried at the
// next period.
func (m *Manager) detectOnce(ctx context.Context, now time.Time) {
	if err := m.Detect(ctx, now); err != nil {
		m.log.Warn("detect images", "err", err)
	}
}

// Detect updates the image records from the runtime at now: new images get
// now as their detection time (until one detection has succeeded, the zero
// time: "unknown, in the past"), images in use get now as last used, vanished
// images are dropped. Step calls it every detection period; it may be called
// from any goroutine.
func (m *Manager) Detect(ctx context.Context, now time.Time) error {
	if err := m.pass.Lock(ctx); err != nil {
		return err
	}
	defer m.pass.Unlock()
	defer m.save()
	var ts time.Time
	if m.initialized {
		ts = now
	}
	if _, err := m.detect(ctx, ts, now); err != nil {
		return err
	}
	m.initialized = true
	return nil
}

// detect lists images and the images in use and updates the records. The
// caller holds pass.
func (m *Manager) detect(ctx context.Context, detectTime, now time.Time) (InUse, error) {
	var sandbox []string
	if ref := m.cfg.SandboxImage; ref != "" {
		// Like the kubelet, a sandbox image that cannot be resolved is not an error.
		st, err := m.deps.Images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
		if err == nil {
			sandbox = append(sandbox, st.GetImage().GetId())
		}
		sandbox = append(sandbox, ref)
	}
	images, err := m.deps.Images.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	refs, err := m.deps.InUse(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images in use: %w", err)
	}
	inUse := NewInUse(sandbox, refs)
	Detect(m.records, images, inUse, detectTime, now)
	return inUse, nil
}

// GarbageCollect runs one GC pass at now: unused images not used for longer than
// the maximum age are removed; then, if image filesystem usage is at or above
// the high threshold, unused images are removed in LRU order until usage
// reaches the low threshold. A zero capacity emits InvalidDiskCapacity; freeing
// less than wanted emits FreeDiskSpaceFailed, whose message
// (FreeDiskSpaceFailedMessage) is also the error's. Removal errors do not stop
// the walk; they are returned together.
func (m *Manager) GarbageCollect(ctx context.Context, now time.Time) error {
	if err := m.pass.Lock(ctx); err != nil {
		return err
	}
	defer m.pass.Unlock()
	defer m.save()
	inUse, err := m.detect(ctx, now, now)
	if err != nil {
		return err
	}
	fs, fsErr := m.fsStats(ctx)
	st, planErr := gcSteps(m.records, inUse, fs, m.cfg.Policy, m.cfg.Start, now)
	_, ageErrs := m.remove(ctx, st.byAge, math.MaxInt64, ReasonAge)
	switch {
	case fsErr != nil:
		return errors.Join(append([]error{fmt.Errorf("image filesystem stats: %w", fsErr)}, ageErrs...)...)
	case errors.Is(planErr, ErrInvalidCapacity):
		m.event(EventInvalidDiskCapacity, planErr.Error())
		return errors.Join(append([]error{planErr}, ageErrs...)...)
	case planErr != nil:
		return planErr
	}
	if !st.over {
		return errors.Join(ageErrs...)
	}
	m.log.Info("image filesystem usage over the high threshold; freeing down to the low threshold",
		"usage", st.usage, "highThreshold", m.cfg.Policy.HighThresholdPercent,
		"bytesToFree", st.toFree, "lowThreshold", m.cfg.Policy.LowThresholdPercent)
	freed, errs := m.remove(ctx, st.bySpace, st.toFree, ReasonSpace)
	errs = append(ageErrs, errs...)
	if freed < st.toFree {
		msg := FreeDiskSpaceFailedMessage(st.usage, fs.CapacityBytes, freed)
		m.event(EventFreeDiskSpaceFailed, msg)
		return errors.Join(append([]error{errors.New(msg)}, errs...)...)
	}
	return errors.Join(errs...)
}

// FreeSpace removes unused images in LRU order until bytes are freed, honouring
// the minimum age at now, and returns the bytes freed. Removal errors are
// returned together with the bytes freed by the removals that worked.
func (m *Manager) FreeSpace(ctx context.Context, bytes int64, now time.Time) (int64, error) {
	if err := m.pass.Lock(ctx); err != nil {
		return 0, err
	}
	defer m.pass.Unlock()
	defer m.save()
	inUse, err := m.detect(ctx, now, now)
	if err != nil {
		return 0, err
	}
	st := unusedSteps(m.records, inUse, m.cfg.Policy, now)
	freed, errs := m.remove(ctx, st.bySpace, bytes, ReasonSpace)
	return freed, errors.Join(errs...)
}

// DeleteUnusedImages removes every unused, unpinned image first detected at
// least the minimum age before now: the eviction manager's reclaim step. It
// works whatever the thresholds (also with high = 100).
func (m *Manager) DeleteUnusedImages(ctx context.Context, now time.Time) error {
	_, err := m.FreeSpace(ctx, math.MaxInt64, now)
	return err
}

// remove removes cands in order until want bytes are freed (all of them for
// a want of math.MaxInt64), continuing past errors. The caller holds pass.
func (m *Manager) remove(ctx context.Context, cands []Candidate, want int64, why Reason) (int64, []error) {
	var freed int64
	var errs []error
	for _, c := range cands {
		if want != math.MaxInt64 && freed >= want {
			break
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		m.log.Info("removing image", "imageID", c.ID, "tags", c.Tags, "size", c.Size, "reason", string(why))
		if err := m.deps.Images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: c.ID}); err != nil {
			errs = append(errs, fmt.Errorf("remove image %q: %w", c.ID, err))
			continue
		}
		delete(m.records, c.ID)
		freed = quantity.AddSat(freed, c.Size)
		m.removed.WithLabelValues(string(why)).Inc()
	}
	return freed, errs
}

// fsStats measures the image filesystem.
func (m *Manager) fsStats(ctx context.Context) (FsStats, error) {
	if m.deps.ImageFs == nil {
		return FsStats{}, errors.New("no image filesystem source configured")
	}
	info, err := m.deps.ImageFs.ImageFsInfo(ctx)
	if err != nil {
		return FsStats{}, err
	}
	fss := info.GetImageFilesystems()
	if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
		return FsStats{}, errors.New("runtime reported no image filesystem")
	}
	return m.deps.Statfs(fss[0].GetFsId().GetMountpoint())
}

// event records a Warning event about the node.
func (m *Manager) event(reason, msg string) {
	if m.deps.Recorder != nil {
		m.deps.Recorder.Event(nodeapi.NodeRef(m.deps.NodeName), v1.EventTypeWarning, reason, msg)
	}
}

// statfs measures the filesystem holding path.
func statfs(path string) (FsStats, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return FsStats{}, fmt.Errorf("statfs %q: %w", path, err)
	}
	return FsStats{
		CapacityBytes:  int64(s.Blocks) * int64(s.Bsize),
		AvailableBytes: int64(s.Bavail) * int64(s.Bsize),
	}, nil
}

// ContainerLister is the part of CRI's RuntimeService that ContainerImages uses;
// internal/machine/cri's Client and cri-api's FakeRuntimeService satisfy it.
type ContainerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// ContainerImages returns a Deps.InUse that lists every container the runtime
// has, running or not, and returns the image IDs they use (CRI image_id, else
// image_ref). As in the kubelet (its image manager lists all pods' containers,
// exited ones included), a container keeps its image until container GC removes
// the container: a crash-looping container's image is never deleted between
// restarts.
func ContainerImages(l ContainerLister) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		cs, err := l.ListContainers(ctx, nil)
		if err != nil {
			return nil, err
		}
		refs := make([]string, 0, len(cs))
		for _, c := range cs {
			refs = append(refs, ContainerImageRef(c))
		}
		return refs, nil
	}
}

// ContainerImageRef is the image a CRI container uses: its image_id when the
// runtime sets it, else its image_ref (containerd 1.6 puts the image ID there).
func ContainerImageRef(c *runtimeapi.Container) string {
	if id := c.GetImageId(); id != "" {
		return id
	}
	return c.GetImageRef()
}
