package devicemanager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
	filecheckpoint "github.com/nodekeeper/nodekeeper/internal/base/checkpoint"
)

// Manager is the device manager. Create it with New, start it with Run.
// Its methods are safe for concurrent use.
type Manager struct {
	cfg        Config
	log        *slog.Logger
	deps       Deps
	clock      clock.WithTicker // Deps.Clock or the real clock
	metrics    *metrics
	socket     string
	checkpoint string
	// writeFile persists the checkpoint; a field so benchmarks can replace
	// the disk.
	writeFile func(path string, data []byte, perm fs.FileMode) error
	// checkpointFound records whether New found a checkpoint file.
	checkpointFound bool
	// corrupt is why the checkpoint could not be read; nil when it could
	// (or there was none). Run then rebuilds from Deps.RuntimeDevices.
	corrupt error

	regC      chan registration // Register → Run loop
	saveC     chan chan error   // synchronous checkpoint requests → saver
	dirty     chan struct{}     // cap 1: state changed, write soon
	changed   chan struct{}     // cap 1: device state changed (Changed)
	started   chan struct{}     // closed when Run is serving
	healthC   chan struct{}     // cap 1: healthPending gained a pod
	healthOut chan []string     // HealthChanges; sent by sendHealth only
	saverDone chan struct{}     // closed when the saver has exited
	runOnce   sync.Once

	// mu guards the fields below and the fields of the resource states. It
	// is never held across an RPC, file IO, a Deps call or a channel send,
	// and ListAndWatch updates hold it only to assign device sets built
	// before they lock.
	mu sync.Mutex
	// resources maps a resource name to its state.
	resources map[string]*resourceState
	pods      podDevices
	used      inUse
	// reuse holds, for the pods being admitted, the devices their
	// non-restartable init containers used, for their app containers.
	reuse map[string]map[string]sets.Set[string]
	// inAdmission counts the Allocate and AllocatePod calls in flight per
	// pod UID (several pods' calls may overlap), and lastAdmitted is the pod
	// of the latest call: both keep their devices while ActivePods may not
	// list them yet.
	inAdmission  map[string]int
	lastAdmitted string
	// inFlight holds, per resource, the reservations whose Allocate RPC is
	// in progress; allocations short of free devices wait for them.
	inFlight map[string]*inFlight
	// oversized holds the resources whose last ListAndWatch message was
	// refused as too large and already logged at ERROR.
	oversized map[string]bool
	// healthPending holds the UIDs of the pods holding a device whose
	// health changed since sendHealth last took them (noteHealth).
	healthPending sets.Set[string]
}

// New validates cfg and restores the checkpoint in cfg.Dir, if any. A
// corrupt or unreadable-format checkpoint is moved aside and logged; New then
// starts empty. Only an unreadable file system is an error.
func New(cfg Config, deps Deps) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("device manager config: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	met, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	clk := deps.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Manager{
		cfg:         cfg,
		log:         log.With("subsystem", "devicemanager"),
		deps:        deps,
		clock:       clk,
		metrics:     met,
		socket:      filepath.Join(cfg.Dir, SocketName),
		checkpoint:  filepath.Join(cfg.Dir, checkpoint.FileName),
		writeFile:   filecheckpoint.WriteFile,
		regC:        make(chan registration),
		saveC:       make(chan chan error),
		dirty:       make(chan struct{}, 1),
		changed:     make(chan struct{}, 1),
		started:     make(chan struct{}),
		healthC:     make(chan struct{}, 1),
		healthOut:   make(chan []string),
		saverDone:   make(chan struct{}),
		resources:   map[string]*resourceState{},
		pods:        podDevices{},
		used:        inUse{},
		reuse:       map[string]map[string]sets.Set[string]{},
		inAdmission: map[string]int{},
		oversized:   map[string]bool{},
		inFlight:    map[string]*inFlight{},

		healthPending: sets.New[string](),
	}
	if err := m.restore(m.clock.Now()); err != nil {
		return nil, err
	}
	return m, nil
}

// restore loads the checkpoint. Registered resources come back with no
// devices and a stopped plugin, so their capacity is zero until the plugin
// registers again and the grace period runs from now.
func (m *Manager) restore(now time.Time) error {
	b, err := os.ReadFile(m.checkpoint)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read device checkpoint: %w", err)
	}
	m.checkpointFound = true
	st, err := checkpoint.Decode(b)
	if err != nil {
		aside, mvErr := filecheckpoint.MoveAside(m.checkpoint, now)
		if mvErr != nil {
			return fmt.Errorf("device checkpoint %s: %w; moving it aside: %w", m.checkpoint, err, mvErr)
		}
		m.corrupt = err
		msg := "Device checkpoint unreadable; moved aside, starting with no device assignments"
		if m.deps.RuntimeDevices != nil {
			msg = "Device checkpoint unreadable; moved aside, rebuilding the assignments from the runtime's containers"
		}
		m.log.Error(msg, "path", m.checkpoint, "movedTo", aside, "err", err)
		return nil
	}
	for _, e := range st.Entries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if len(e.AllocResp) == 0 {
			// No answer recorded: an assignment rebuilt from the runtime
			// (or a plugin that answered nothing). The plugin is asked again,
			// for the same devices, before the container is next created.
			resp = nil
		} else if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			m.log.Error("Device checkpoint entry has an undecodable allocation response; skipping it",
				"podUID", e.PodUID, "containerName", e.ContainerName, "resourceName", e.ResourceName, "err", err)
			continue
		}
		ids := e.DeviceIDs.Devices()
		m.pods.put(e.PodUID, e.ContainerName, e.ResourceName, &allocation{devices: e.DeviceIDs, ids: ids, resp: resp})
		m.used.add(e.ResourceName, ids...)
	}
	for res := range st.Registered {
		rs := newResourceState()
		rs.stoppedAt = now
		m.resources[res] = rs
	}
	m.log.Info("Restored device checkpoint", "path", m.checkpoint,
		"entries", len(st.Entries), "resources", len(st.Registered))
	return nil
}

// CheckpointFound reports whether New found a checkpoint file. A node
// without one (a new or re-created node) should zero its extended-resource
// capacity, as the kubelet's ShouldResetExtendedResourceCapacity.
func (m *Manager) CheckpointFound() bool { return m.checkpointFound }

// Ready is closed once Run serves the registration socket; from then on
// ContainerOptions can write the checkpoint.
func (m *Manager) Ready() <-chan struct{} { return m.started }

// Changed delivers a value after device state changed (registration,
// ListAndWatch update, plugin loss, removal). Notifications coalesce; a
// reader should call Capacity after each. Meant for a single reader.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
	select {
	case m.dirty <- struct{}{}:
	default:
	}
}

// Run serves the registration socket until ctx ends. On start it creates
// the directory (0750), deletes every socket in it, which tells running
// plugins to register again, and listens on kubelet.sock. It returns after
// all its goroutines have exited and a last checkpoint was written. Run may
// be called once.
func (m *Manager) Run(ctx context.Context) error {
	ran := false
	var err error
	m.runOnce.Do(func() {
		ran = true
		err = m.run(ctx)
	})
	if !ran {
		return errors.New("run device manager: Run called twice")
	}
	return err
}

func (m *Manager) run(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.Dir, 0o750); err != nil {
		close(m.saverDone)
		return fmt.Errorf("create device-plugin directory: %w", err)
	}
	if err := removeSockets(m.cfg.Dir); err != nil {
		close(m.saverDone)
		return err
	}
	lis, err := net.Listen("unix", m.socket)
	if err != nil {
		close(m.saverDone)
		return fmt.Errorf("listen on %s: %w", m.socket, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, registrar{m: m})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	wg.Go(func() { m.saveLoop(ctx) })
	wg.Go(func() { m.sendHealth(ctx) })
	if m.corrupt != nil && m.deps.RuntimeDevices != nil {
		m.recoverFromRuntime(ctx)
	}
	close(m.started)
	m.log.Info("Device plugin registration server listening", "socket", m.socket)

	var runErr error
	served := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-serveErr:
			runErr = fmt.Errorf("serve %s: %w", m.socket, err)
			served = true
			break loop
		case r := <-m.regC:
			wg.Go(func() { m.runEndpoint(ctx, r) })
		}
	}
	cancel()
	srv.Stop()
	if !served {
		<-serveErr
	}
	wg.Wait()
	if err := os.Remove(m.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		runErr = errors.Join(runErr, fmt.Errorf("remove %s: %w", m.socket, err))
	}
	return runErr
}

// removeSockets deletes every Unix socket directly in dir, whatever its
// name, and leaves other files (the checkpoint) alone.
func removeSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list device-plugin directory: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&fs.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove stale socket: %w", err))
		}
	}
	return errors.Join(errs...)
}

// saveDelay lets bursts of changes (many plugins pushing device state)
// share one background checkpoint write.
const saveDelay = 50 * time.Millisecond

// saveLoop writes the checkpoint a little (saveDelay on the Manager's clock)
// after state changed, and at once for synchronous requests; requests that
// queue up share one write.
func (m *Manager) saveLoop(ctx context.Context) {
	defer close(m.saverDone)
	var timer clock.Timer
	var timerC <-chan time.Time
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer, timerC = nil, nil
		}
	}
	defer stopTimer()
	for {
		select {
		case <-ctx.Done():
			pending := timer != nil
			select {
			case <-m.dirty:
				pending = true
			default:
			}
			if pending {
				if err := m.save(); err != nil {
					m.log.Error("Writing device checkpoint at shutdown", "err", err)
				}
			}
			return
		case <-m.dirty:
			if timer == nil {
				timer = m.clock.NewTimer(saveDelay)
				timerC = timer.C()
			}
		case <-timerC:
			timer, timerC = nil, nil
			if err := m.save(); err != nil {
				m.log.Error("Writing device checkpoint", "err", err)
			}
		case w := <-m.saveC:
			waiters := []chan error{w}
		drain:
			for {
				select {
				case w := <-m.saveC:
					waiters = append(waiters, w)
				default:
					break drain
				}
			}
			select {
			case <-m.dirty:
			default:
			}
			stopTimer()
			err := m.save()
			for _, w := range waiters {
				w <- err // buffered
			}
		}
	}
}

// persist waits until a checkpoint taken after the call was written.
func (m *Manager) persist(ctx context.Context) error {
	select {
	case <-m.started:
	default:
		return fmt.Errorf("write device checkpoint: %w", ErrNotRunning)
	}
	done := make(chan error, 1)
	select {
	case m.saveC <- done:
	case <-m.saverDone:
		return fmt.Errorf("write device checkpoint: %w", ErrNotRunning)
	case <-ctx.Done():
		return fmt.Errorf("write device checkpoint: %w", ctx.Err())
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("write device checkpoint: %w", ctx.Err())
	}
}

// save writes the current state. Only the saver goroutine calls it.
func (m *Manager) save() error {
	st, err := m.checkpointState()
	if err != nil {
		return err
	}
	b, err := checkpoint.Encode(st)
	if err != nil {
		return err
	}
	if err := m.writeFile(m.checkpoint, b, 0o600); err != nil {
		return fmt.Errorf("failed to write checkpoint file %q: %w", checkpoint.FileName, err)
	}
	return nil
}

// checkpointState snapshots the state in the checkpoint's terms, sorted so
// that equal states give equal files. Only references are copied under the
// lock: device lists and responses are never modified once stored.
func (m *Manager) checkpointState() (checkpoint.State, error) {
	type ref struct {
		pod, ctr, res string
		a             *allocation
	}
	var refs []ref
	st := checkpoint.State{}
	m.mu.Lock()
	st.Registered = make(map[string][]string, len(m.resources))
	for res, rs := range m.resources {
		ids := rs.order
		if ids == nil {
			ids = []string{}
		}
		st.Registered[res] = ids
	}
	for pod, ctrs := range m.pods {
		for ctr, byRes := range ctrs {
			for res, a := range byRes {
				refs = append(refs, ref{pod, ctr, res, a})
			}
		}
	}
	m.mu.Unlock()
	slices.SortFunc(refs, func(x, y ref) int {
		return cmp.Or(strings.Compare(x.pod, y.pod), strings.Compare(x.ctr, y.ctr), strings.Compare(x.res, y.res))
	})
	for _, r := range refs {
		resp, err := proto.Marshal(r.a.resp)
		if err != nil {
			return checkpoint.State{}, fmt.Errorf("encode allocation of pod %q container %q resource %q: %w", r.pod, r.ctr, r.res, err)
		}
		st.Entries = append(st.Entries, checkpoint.PodDevicesEntry{
			PodUID: r.pod, ContainerName: r.ctr, ResourceName: r.res,
			DeviceIDs: r.a.devices, AllocResp: resp,
		})
	}
	return st, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Capacity returns, for each device resource, its capacity (healthy and
// unhealthy devices) and allocatable (healthy devices), as the kubelet's
// GetCapacity. A resource whose plugin has been gone longer than the stop
// grace period (on the Manager's clock) is removed by this call and listed
// in removed, once.
func (m *Manager) Capacity() (capacity, allocatable v1.ResourceList, removed []string) {
	now := m.clock.Now()
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	var stop []*endpoint
	health := false
	m.mu.Lock()
	for res, rs := range m.resources {
		if rs.graceExpired(now, m.cfg.StopGracePeriod) {
			before := m.inUseHealth(res)
			delete(m.resources, res)
			health = m.noteHealth(res, before) || health
			removed = append(removed, res)
			if rs.ep != nil {
				stop = append(stop, rs.ep)
			}
			continue
		}
		name := v1.ResourceName(res)
		capacity[name] = *resource.NewQuantity(int64(rs.healthy.Len()+rs.unhealthy.Len()), resource.DecimalSI)
		allocatable[name] = *resource.NewQuantity(int64(rs.healthy.Len()), resource.DecimalSI)
	}
	m.mu.Unlock()
	for _, ep := range stop {
		ep.cancel()
	}
	if health {
		m.signalHealth()
	}
	if len(removed) > 0 {
		slices.Sort(removed)
		m.log.Info("Removed device resources whose plugins did not return", "resources", removed)
		m.notify()
	}
	return capacity, allocatable, removed
}

// SanitizeAllocatable returns allocatable with every device resource raised
// to at least the number of its devices assigned to containers, as the
// kubelet's sanitizeNodeAllocatable: pods that already hold devices then
// pass resource-fit re-admission while their plugin is away. The argument is
// not modified; when nothing needs raising it is returned as is.
func (m *Manager) SanitizeAllocatable(allocatable v1.ResourceList) v1.ResourceList {
	m.mu.Lock()
	counts := make(map[string]int, len(m.used))
	for res, ids := range m.used {
		counts[res] = len(ids)
	}
	m.mu.Unlock()
	var out v1.ResourceList
	for res, n := range counts {
		name := v1.ResourceName(res)
		if q, ok := allocatable[name]; ok && q.Value() >= int64(n) {
			continue
		}
		if out == nil {
			out = allocatable.DeepCopy()
			if out == nil {
				out = v1.ResourceList{}
			}
		}
		out[name] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	if out == nil {
		return allocatable
	}
	return out
}

// AllocatedDevices returns the device IDs assigned to the container, by
// resource, sorted. It is for status reporting (pod resources).
func (m *Manager) AllocatedDevices(podUID, containerName string) map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for res, a := range m.pods[podUID][containerName] {
		out[res] = slices.Clone(a.ids)
	}
	return out
}
