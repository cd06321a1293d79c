// Package pressure wakes the eviction manager as soon as memory or disk
// crosses an eviction threshold, instead of at its next periodic pass. It uses
// the kernel's notifications where the machine has them — a memory-usage
// threshold eventfd on a cgroup v1 memory cgroup (cgroup.event_control),
// armed at the working-set mark plus the cgroup's inactive file pages and
// re-armed as they change; on cgroup v2 the watched cgroup's memory.events
// (high, max and OOM events) and a PSI trigger on its memory.pressure; a PSI
// trigger on /proc/pressure/memory — and polls: memory where the kernel has no
// usage threshold (cgroup v2 has none: there the working set, memory.current
// less inactive_file, is read every MemoryPollPeriod) and, always, statfs of
// the watched filesystems (all cheap). It only wakes: the eviction pass it
// starts reads fresh stats and decides.
package pressure

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
)

// DefaultPSITrigger asks for a notification when tasks stall on memory for
// 150ms within a 1s window. The kernel accepts windows that are not a
// multiple of 2s only from a process with CAP_SYS_RESOURCE; where it refuses
// one, the notifier writes the trigger again with the window rounded up to
// the next multiple of 2s (see psiTrigger).
const DefaultPSITrigger = "some 150000 1000000"

// DefaultPollPeriod is the period of the statfs poll.
const DefaultPollPeriod = time.Second

// DefaultMemoryPollPeriod is the period of the memory poll, used where the
// kernel has no usage threshold (cgroup v2, or a v1 cgroup that refuses
// one). It is well under the 0.5 s the notifier is to react in: a poll
// reads two small files per watch.
const DefaultMemoryPollPeriod = 100 * time.Millisecond

// DefaultRearmPeriod is the default of Config.RearmPeriod: the eviction
// manager's default monitoring interval, at which the kubelet re-arms its
// memory threshold notifiers.
const DefaultRearmPeriod = 10 * time.Second

// DefaultMinWakeInterval is the default of Config.MinWakeInterval.
const DefaultMinWakeInterval = 100 * time.Millisecond

// DefaultFollowUps is the default of Config.FollowUps.
var DefaultFollowUps = []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}

// The mechanisms, as Mechanisms and the start log name them.
const (
	MechanismMemcgThreshold = "memcg-v1-usage-threshold"
	MechanismMemoryEvents   = "memory.events"
	MechanismPSI            = "psi-trigger"
	MechanismCgroupPSI      = "cgroup-psi-trigger"
	MechanismMemoryPoll     = "memory-poll"
	MechanismStatfsPoll     = "statfs-poll"
)

// MemoryWatch is a memory cgroup whose working set is watched.
type MemoryWatch struct {
	// Cgroup is the cgroup's path in the memory hierarchy ("/" is the root).
	Cgroup string
	// Usage is the working set in bytes at which to wake: the capacity (or
	// limit) less the hard eviction threshold. The kernel notifies on usage,
	// which also counts the inactive file pages that the working set leaves
	// out, so the notifier arms usage at Usage plus the cgroup's inactive
	// file pages, as the kubelet does, and re-arms every RearmPeriod.
	Usage uint64
}

// DiskWatch is a filesystem whose available space is polled.
type DiskWatch struct {
	// Path is a path on the filesystem.
	Path string
	// Available is the available bytes below which to wake.
	Available uint64
}

// Config says what to watch.
type Config struct {
	// CgroupFSRoot is where the cgroup filesystems are mounted; "" is /sys/fs/cgroup.
	CgroupFSRoot string
	// ProcRoot is the proc filesystem; "" is /proc.
	ProcRoot string
	// Memory are the memory cgroups to watch.
	Memory []MemoryWatch
	// PSITrigger, when set, is written to ProcRoot/pressure/memory as a
	// trigger ("some|full STALL_US WINDOW_US"), e.g. DefaultPSITrigger, and
	// on cgroup v2 to the memory.pressure file of each watched cgroup other
	// than the root (whose pressure is /proc's).
	PSITrigger string
	// Disk are the filesystems to poll.
	Disk []DiskWatch
	// PollPeriod is the period of the statfs poll; zero is DefaultPollPeriod.
	PollPeriod time.Duration
	// MemoryPollPeriod is the period of the memory poll; zero is
	// DefaultMemoryPollPeriod.
	MemoryPollPeriod time.Duration
	// RearmPeriod is how often the memory marks are moved to the cgroups'
	// current inactive file pages; zero is DefaultRearmPeriod.
	RearmPeriod time.Duration
	// MinWakeInterval spaces the wakes kernel notifications cause: one that
	// comes sooner after the last wake is held until the interval is over,
	// and merged with any others then (none is lost). Usage hovering at a
	// memcg threshold would otherwise cross it many times a second, each a
	// pass. Zero is DefaultMinWakeInterval; negative is no spacing.
	MinWakeInterval time.Duration
	// FollowUps are the delays, ascending, after a kernel notification at
	// which it wakes again: a memcg usage threshold fires once, when usage
	// crosses it, and the working set the eviction pass reads (usage less
	// inactive file pages) may cross the threshold only later. Nil is
	// DefaultFollowUps; an empty slice is none.
	FollowUps []time.Duration
}

// Deps are the notifier's collaborators.
type Deps struct {
	// Wake is called when a watched value crosses its mark. Required. It must
	// not block (eviction.Manager.Wake).
	Wake func()
	// Statfs is unix.Statfs when nil.
	Statfs func(path string, st *unix.Statfs_t) error
	// Clock drives the polls' and re-arms' tickers; nil is the real clock.
	// It is injected because a test steps the re-arm ticker while the
	// notifier waits on a real memcg eventfd, which a synctest bubble cannot
	// hold (docs/architecture.md, One time model). The notifications' wake
	// spacing runs on real time, decided by wakeGate with the time as data.
	Clock  clock.WithTicker
	Logger *slog.Logger // nil discards
}

// Notifier watches memory and disk and calls Wake. Build it with New, which
// sets up the kernel notifications, and run it with Run, once.
type Notifier struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	mechs []string
	// fds are the notification descriptors polled by Run: eventfds (POLLIN),
	// memory.events files and PSI triggers (POLLPRI).
	fds []notifyFD
	// polled are the memory watches without a notification, read every PollPeriod.
	polled []polledMemory
	// below is, per disk watch, whether the last poll found it below its mark;
	// only Run's poll goroutine touches it.
	below []bool
	// memcg are the memory watches armed as v1 usage thresholds. Their
	// fields other than fd are Run's ticker goroutine's.
	memcg []*memcgWatch
	// rearmFD wakes pollFDs to take the descriptors of re-armed thresholds
	// from swaps (by index in fds), guarded by mu.
	rearmFD int
	mu      sync.Mutex
	swaps   map[int]memcgFDs
	version cgroups.Version
	// onRearm, when set (tests), is called after each re-arm round.
	onRearm func()
	once    sync.Once
}

// memcgWatch is a memory watch armed as a v1 usage threshold.
type memcgWatch struct {
	dir   string // the cgroup's directory
	base  uint64 // MemoryWatch.Usage
	armed uint64 // the usage threshold registered
	fd    int    // index in Notifier.fds
}

type notifyFD struct {
	fd     int
	events int16
	what   string
	closer []int // descriptors to close with it
	// ack: the descriptor is a kernfs file (memory.events) whose change is
	// acknowledged by reading it; until then poll reports it again.
	ack bool
}

type polledMemory struct {
	// file is the usage file (v1 memory.usage_in_bytes, v2 memory.current);
	// "" for the v2 root cgroup, which has none: its usage is anon + file
	// from memory.stat, as internal/machine/stats reads it.
	file string
	stat string // the cgroup's memory.stat, for its inactive file pages
	// v2: each poll reads the working set itself (usage less inactive_file)
	// and compares it with base; v1 compares usage with usage, re-armed.
	v2    bool
	base  uint64 // MemoryWatch.Usage
	usage uint64 // v1: base plus the inactive file pages at the last re-arm
	over  bool   // the last poll found the cgroup at or over the mark
}

// New sets up the notifications cfg asks for. A notification the machine
// refuses falls back to polling (for memory) or to none (PSI), and is logged;
// only a bad Config is an error.
func New(cfg Config, deps Deps) (*Notifier, error) {
	if deps.Wake == nil {
		return nil, errors.New("pressure: Wake is required")
	}
	if cfg.CgroupFSRoot == "" {
		cfg.CgroupFSRoot = "/sys/fs/cgroup"
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.PollPeriod < 0 {
		return nil, fmt.Errorf("pressure: poll period %v: must not be negative", cfg.PollPeriod)
	}
	if cfg.PollPeriod == 0 {
		cfg.PollPeriod = DefaultPollPeriod
	}
	if cfg.MemoryPollPeriod < 0 {
		return nil, fmt.Errorf("pressure: memory poll period %v: must not be negative", cfg.MemoryPollPeriod)
	}
	if cfg.MemoryPollPeriod == 0 {
		cfg.MemoryPollPeriod = DefaultMemoryPollPeriod
	}
	if cfg.RearmPeriod < 0 {
		return nil, fmt.Errorf("pressure: re-arm period %v: must not be negative", cfg.RearmPeriod)
	}
	if cfg.RearmPeriod == 0 {
		cfg.RearmPeriod = DefaultRearmPeriod
	}
	if cfg.MinWakeInterval == 0 {
		cfg.MinWakeInterval = DefaultMinWakeInterval
	}
	if cfg.FollowUps == nil {
		cfg.FollowUps = DefaultFollowUps
	}
	if !slices.IsSorted(cfg.FollowUps) || (len(cfg.FollowUps) > 0 && cfg.FollowUps[0] < 0) {
		return nil, fmt.Errorf("pressure: follow-ups %v: want non-negative delays in ascending order", cfg.FollowUps)
	}
	if deps.Statfs == nil {
		deps.Statfs = unix.Statfs
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{cfg: cfg, deps: deps, log: deps.Logger.With("subsystem", "pressure"), below: make([]bool, len(cfg.Disk)),
		rearmFD: -1, swaps: map[int]memcgFDs{}}
	for i, w := range cfg.Memory {
		if w.Cgroup == "" || w.Usage == 0 {
			return nil, fmt.Errorf("pressure: memory watch %d: cgroup %q usage %d: want a cgroup and a usage", i, w.Cgroup, w.Usage)
		}
	}
	for i, w := range cfg.Disk {
		if w.Path == "" {
			return nil, fmt.Errorf("pressure: disk watch %d: empty path", i)
		}
	}
	if len(cfg.Memory) > 0 {
		layout, err := cgroups.Detect(cfg.CgroupFSRoot)
		if err != nil {
			return nil, fmt.Errorf("pressure: %w", err)
		}
		n.version = layout.Version
		for _, w := range cfg.Memory {
			n.watchMemory(layout, w)
		}
	}
	if cfg.PSITrigger != "" {
		if err := n.watchPSI(); err != nil {
			n.log.Warn("PSI trigger unavailable", "trigger", cfg.PSITrigger, "err", err)
		}
	}
	if len(n.polled) > 0 {
		n.addMech(MechanismMemoryPoll)
	}
	if len(cfg.Disk) > 0 {
		n.addMech(MechanismStatfsPoll)
	}
	return n, nil
}

func (n *Notifier) addMech(m string) {
	for _, x := range n.mechs {
		if x == m {
			return
		}
	}
	n.mechs = append(n.mechs, m)
}

// watchMemory sets up the best notification for w: the v1 usage threshold, the
// v2 memory.events file, else the poll of the usage file.
func (n *Notifier) watchMemory(l cgroups.Layout, w MemoryWatch) {
	dir := l.Dir("memory", w.Cgroup)
	stat := filepath.Join(dir, "memory.stat")
	mark := w.Usage + inactiveFile(stat, l.Version)
	if l.Version == cgroups.V1 {
		usage := filepath.Join(dir, "memory.usage_in_bytes")
		fd, err := memcgThreshold(dir, mark)
		if err == nil {
			n.memcg = append(n.memcg, &memcgWatch{dir: dir, base: w.Usage, armed: mark, fd: len(n.fds)})
			n.fds = append(n.fds, notifyFD{fd: fd.event, events: unix.POLLIN, what: "memcg " + w.Cgroup, closer: []int{fd.usage}})
			n.addMech(MechanismMemcgThreshold)
			return
		}
		n.log.Warn("memcg usage threshold unavailable; polling usage", "cgroup", dir, "err", err)
		n.polled = append(n.polled, polledMemory{file: usage, stat: stat, base: w.Usage, usage: mark})
		return
	}
	// The working set is polled: memory.events changes only on high, max
	// and OOM events, and a PSI trigger only on stalls.
	p := polledMemory{file: filepath.Join(dir, "memory.current"), stat: stat, v2: true, base: w.Usage}
	if w.Cgroup == "/" {
		// The root has neither memory.current nor memory.events, and its
		// memory.pressure is /proc/pressure/memory (Config.PSITrigger).
		p.file = ""
		n.polled = append(n.polled, p)
		return
	}
	n.polled = append(n.polled, p)
	events := filepath.Join(dir, "memory.events")
	if fd, err := unix.Open(events, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		// kernfs reports POLLPRI|POLLERR at once on a descriptor that was
		// never read: read it now, so that only a change after this wakes.
		if _, err := unix.Pread(fd, make([]byte, 512), 0); err != nil {
			n.log.Warn("memory.events unreadable", "file", events, "err", err)
			unix.Close(fd)
		} else {
			n.fds = append(n.fds, notifyFD{fd: fd, events: unix.POLLPRI, what: "memory.events " + w.Cgroup, ack: true})
			n.addMech(MechanismMemoryEvents)
		}
	} else {
		n.log.Warn("memory.events unavailable", "file", events, "err", err)
	}
	if n.cfg.PSITrigger != "" {
		file := filepath.Join(dir, "memory.pressure")
		fd, trigger, err := psiTrigger(file, n.cfg.PSITrigger)
		if err != nil {
			n.log.Warn("cgroup PSI trigger unavailable", "file", file, "trigger", n.cfg.PSITrigger, "err", err)
			return
		}
		n.log.Debug("cgroup PSI trigger", "file", file, "trigger", trigger)
		n.fds = append(n.fds, notifyFD{fd: fd, events: unix.POLLPRI, what: "psi " + w.Cgroup})
		n.addMech(MechanismCgroupPSI)
	}
}

// inactiveFile is the inactive file pages of a memory cgroup, in bytes, from
// its memory.stat (v1: total_inactive_file, which counts its descendants;
// v2: inactive_file); 0 when unreadable, which arms at the working-set mark
// itself (an early wake at worst).
func inactiveFile(stat string, v cgroups.Version) uint64 {
	key := "inactive_file"
	if v == cgroups.V1 {
		key = "total_inactive_file"
	}
	b, err := os.ReadFile(stat)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		k, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// rearm moves every memory mark to its cgroup's current inactive file pages:
// a polled mark at once, a v1 threshold by registering a new one, handed to
// pollFDs (which closes the old one) through swaps. A registration the
// kernel refuses keeps the old threshold.
func (n *Notifier) rearm() {
	for i := range n.polled {
		if p := &n.polled[i]; !p.v2 {
			p.usage = p.base + inactiveFile(p.stat, n.version)
		}
	}
	for _, w := range n.memcg {
		mark := w.base + inactiveFile(filepath.Join(w.dir, "memory.stat"), cgroups.V1)
		if mark == w.armed {
			continue
		}
		fd, err := memcgThreshold(w.dir, mark)
		if err != nil {
			n.log.Warn("re-arming the memcg usage threshold failed; keeping the old one", "cgroup", w.dir, "err", err)
			continue
		}
		w.armed = mark
		n.mu.Lock()
		if old, ok := n.swaps[w.fd]; ok { // not taken yet
			unix.Close(old.event)
			unix.Close(old.usage)
		}
		n.swaps[w.fd] = fd
		n.mu.Unlock()
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		_, _ = unix.Write(n.rearmFD, one)
	}
	if n.onRearm != nil {
		n.onRearm()
	}
}

// takeSwaps puts the re-armed thresholds in place of the old ones, in fds
// and in pfds (offset is the index in pfds of fds[0]), and closes the old.
func (n *Notifier) takeSwaps(pfds []unix.PollFd, offset int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, fd := range n.swaps {
		f := &n.fds[i]
		unix.Close(f.fd)
		for _, c := range f.closer {
			unix.Close(c)
		}
		f.fd, f.closer = fd.event, []int{fd.usage}
		pfds[offset+i].Fd = int32(fd.event)
	}
	clear(n.swaps)
}

type memcgFDs struct{ event, usage int }

// memcgThreshold registers an eventfd notified when the usage of the v1
// memory cgroup dir crosses usage, in either direction.
func memcgThreshold(dir string, usage uint64) (memcgFDs, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return memcgFDs{}, fmt.Errorf("eventfd: %w", err)
	}
	ufd, err := unix.Open(filepath.Join(dir, "memory.usage_in_bytes"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(efd)
		return memcgFDs{}, err
	}
	ctl := filepath.Join(dir, "cgroup.event_control")
	line := fmt.Sprintf("%d %d %d", efd, ufd, usage)
	if err := writeExisting(ctl, line); err != nil {
		unix.Close(efd)
		unix.Close(ufd)
		return memcgFDs{}, err
	}
	return memcgFDs{event: efd, usage: ufd}, nil
}

// watchPSI writes the trigger to the memory pressure file.
func (n *Notifier) watchPSI() error {
	path := filepath.Join(n.cfg.ProcRoot, "pressure", "memory")
	fd, trigger, err := psiTrigger(path, n.cfg.PSITrigger)
	if err != nil {
		return err
	}
	n.log.Debug("PSI trigger", "file", path, "trigger", trigger)
	n.fds = append(n.fds, notifyFD{fd: fd, events: unix.POLLPRI, what: "psi"})
	n.addMech(MechanismPSI)
	return nil
}

// psiTrigger opens the pressure file path and writes trigger to it. Where
// the kernel refuses the trigger (EINVAL) and its window is not a multiple
// of 2s — the only windows it accepts from a process without
// CAP_SYS_RESOURCE — it writes it again on a new descriptor with the window
// rounded up to the next multiple of 2s (when it is one a privileged process
// may ask for: 500ms to 10s). It returns the descriptor and the trigger the
// kernel took.
func psiTrigger(path, trigger string) (int, string, error) {
	fd, err := writeTrigger(path, trigger)
	if err == nil || !errors.Is(err, unix.EINVAL) {
		return fd, trigger, err
	}
	f := strings.Fields(trigger)
	if len(f) != 3 {
		return -1, "", err
	}
	// A privileged process may ask for a window of 500ms to 10s; outside
	// that range the trigger is wrong for everyone and is not widened.
	const step, least, most = 2000000, 500000, 10000000 // µs
	window, perr := strconv.ParseUint(f[2], 10, 64)
	if perr != nil || window%step == 0 || window < least || window > most {
		return -1, "", err
	}
	wider := fmt.Sprintf("%s %s %d", f[0], f[1], (window/step+1)*step)
	fd, err2 := writeTrigger(path, wider)
	if err2 != nil {
		return -1, "", err // the first refusal says what was asked for
	}
	return fd, wider, nil
}

// writeTrigger opens path and writes trigger to it as a PSI trigger.
func writeTrigger(path, trigger string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if _, err := unix.Write(fd, append([]byte(trigger), 0)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("write trigger %q to %s: %w", trigger, path, err)
	}
	return fd, nil
}

// Run calls Wake on every notification and runs the polls until ctx ends,
// then closes the notifications and returns nil after its goroutines end. It
// logs the mechanisms in use at start. Call it once.
func (n *Notifier) Run(ctx context.Context) error {
	defer n.close()
	n.log.Info("pressure notifier started", "mechanisms", strings.Join(n.mechs, ","))
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	if len(n.fds) > 0 {
		cancelFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return fmt.Errorf("pressure: eventfd: %w", err)
		}
		defer unix.Close(cancelFD)
		if len(n.memcg) > 0 {
			if n.rearmFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
				return fmt.Errorf("pressure: eventfd: %w", err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.pollFDs(cancelFD); err != nil {
				errc <- err
			}
		}()
		defer func() {
			one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
			_, _ = unix.Write(cancelFD, one)
			wg.Wait()
		}()
	}
	var pollC, rearmC <-chan time.Time
	// lastDisk is when poll last ran statfs, taken before the first poll
	// (a clock read after it could come after the next tick's time).
	lastDisk := n.deps.Clock.Now()
	if len(n.polled) > 0 || len(n.cfg.Disk) > 0 {
		// One ticker: at the memory poll's period when memory is polled;
		// statfs runs at the ticks PollPeriod after its last run.
		period := n.cfg.PollPeriod
		if len(n.polled) > 0 {
			period = min(period, n.cfg.MemoryPollPeriod)
		}
		t := n.deps.Clock.NewTicker(period)
		defer t.Stop()
		pollC = t.C()
		n.poll(true)
	}
	if n.needRearm() {
		t := n.deps.Clock.NewTicker(n.cfg.RearmPeriod)
		defer t.Stop()
		rearmC = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-pollC:
			disk := len(n.cfg.Disk) > 0 && n.deps.Clock.Since(lastDisk) >= n.cfg.PollPeriod
			if disk {
				lastDisk = n.deps.Clock.Now()
			}
			n.poll(disk)
		case <-rearmC:
			n.rearm()
		}
	}
}

// pollFDs waits on the notification descriptors until cancelFD is readable.
func (n *Notifier) pollFDs(cancelFD int) error {
	pfds := make([]unix.PollFd, 0, len(n.fds)+2)
	pfds = append(pfds, unix.PollFd{Fd: int32(cancelFD), Events: unix.POLLIN},
		unix.PollFd{Fd: int32(n.rearmFD), Events: unix.POLLIN}) // -1 (none) is skipped by poll
	const first = 2 // the index in pfds of fds[0]
	for _, f := range n.fds {
		pfds = append(pfds, unix.PollFd{Fd: int32(f.fd), Events: f.events})
	}
	buf := make([]byte, 8)
	g := wakeGate{minInterval: n.cfg.MinWakeInterval, followUps: n.cfg.FollowUps}
	for {
		for i := range pfds {
			pfds[i].Revents = 0
		}
		timeout := -1
		if next := g.next(); !next.IsZero() {
			timeout = max(0, int((time.Until(next)+time.Millisecond-1)/time.Millisecond))
		}
		if _, err := unix.Poll(pfds, timeout); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("pressure: poll: %w", err)
		}
		if pfds[0].Revents != 0 {
			return nil
		}
		if pfds[1].Revents != 0 {
			_, _ = unix.Read(n.rearmFD, buf)
			n.takeSwaps(pfds, first)
		}
		woke := false
		for i, p := range pfds[first:] {
			if p.Revents == 0 {
				continue
			}
			f := n.fds[i]
			if p.Revents&unix.POLLIN != 0 {
				_, _ = unix.Read(f.fd, buf) // reset the eventfd counter
			}
			if f.ack {
				_, _ = unix.Pread(f.fd, make([]byte, 512), 0) // acknowledge the change
			}
			if p.Revents&(unix.POLLIN|unix.POLLPRI) == 0 {
				// An error without an event (a descriptor that went bad):
				// stop polling it rather than spin.
				n.log.Warn("pressure notification ended", "watch", f.what, "revents", p.Revents)
				pfds[i+first].Fd = -1
				continue
			}
			n.log.Debug("pressure notification", "watch", f.what)
			woke = true
		}
		if g.step(woke, time.Now()) {
			n.deps.Wake()
			g.woke(time.Now())
		}
	}
}

// wakeGate decides when pressure notifications wake the eviction manager, with
// the time as data: a notification wakes at once and again after each
// follow-up delay (a new notification restarts the follow-ups); wakes closer
// than minInterval to the last are held and delivered as one when the
// interval is over. Only pollFDs' goroutine touches it.
type wakeGate struct {
	minInterval time.Duration
	followUps   []time.Duration
	last        time.Time   // when the last wake was delivered
	pending     bool        // a wake is held until minInterval after last
	due         []time.Time // follow-up wakes of the last notification, ascending
}

// next returns the earliest held or follow-up wake: the time by which step
// must be called again; zero when none is waiting.
func (g *wakeGate) next() time.Time {
	var next time.Time
	if g.pending {
		next = g.last.Add(g.minInterval)
	}
	if len(g.due) > 0 && (next.IsZero() || g.due[0].Before(next)) {
		next = g.due[0]
	}
	return next
}

// step records, at now, whether a notification came, and reports whether to
// wake now; the caller then wakes and calls woke.
func (g *wakeGate) step(notified bool, now time.Time) bool {
	if notified {
		g.due = g.due[:0]
		for _, d := range g.followUps {
			g.due = append(g.due, now.Add(d))
		}
	}
	fire := notified || g.pending
	for len(g.due) > 0 && !g.due[0].After(now) {
		fire, g.due = true, g.due[1:]
	}
	if !fire {
		return false
	}
	if now.Sub(g.last) < g.minInterval {
		g.pending = true
		return false
	}
	return true
}

// woke records a wake delivered at now.
func (g *wakeGate) woke(now time.Time) { g.last, g.pending = now, false }

// needRearm says whether a mark depends on inactive file pages read at
// re-arm time: a v1 threshold or a v1 poll.
func (n *Notifier) needRearm() bool {
	if len(n.memcg) > 0 {
		return true
	}
	for _, p := range n.polled {
		if !p.v2 {
			return true
		}
	}
	return false
}

// poll reads the polled memory cgroups and, when disk is set, statfs of the
// disk watches, and wakes when one has crossed its mark since the previous
// poll (or is over it at the first).
func (n *Notifier) poll(disk bool) {
	woke := false
	for i := range n.polled {
		p := &n.polled[i]
		var over bool
		if p.v2 {
			ws, err := workingSetV2(p.file, p.stat)
			if err != nil {
				n.log.Debug("memory poll", "err", err)
				continue
			}
			over = ws >= p.base
		} else {
			v, err := readUint(p.file)
			if err != nil {
				n.log.Debug("memory poll", "err", err)
				continue
			}
			over = v >= p.usage
		}
		if over && !p.over {
			woke = true
		}
		p.over = over
	}
	for i, w := range n.cfg.Disk {
		if !disk {
			break
		}
		var st unix.Statfs_t
		if err := n.deps.Statfs(w.Path, &st); err != nil {
			n.log.Debug("statfs poll", "path", w.Path, "err", err)
			continue
		}
		below := st.Bavail*uint64(st.Bsize) < w.Available
		if below && !n.below[i] {
			woke = true
		}
		n.below[i] = below
	}
	if woke {
		n.deps.Wake()
	}
}

// workingSetV2 is a cgroup v2 cgroup's working set, as internal/machine/stats and the
// kubelet compute it: usage less inactive_file (at least 0). usage is the
// current file (memory.current), or, when it is "" (the root cgroup, which
// has none), anon + file from memory.stat.
func workingSetV2(current, stat string) (uint64, error) {
	b, err := os.ReadFile(stat)
	if err != nil {
		return 0, err
	}
	var anon, file, inactive uint64
	for line := range strings.Lines(string(b)) {
		k, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		var dst *uint64
		switch k {
		case "anon":
			dst = &anon
		case "file":
			dst = &file
		case "inactive_file":
			dst = &inactive
		}
		if !ok || dst == nil {
			continue
		}
		if *dst, err = strconv.ParseUint(val, 10, 64); err != nil {
			return 0, fmt.Errorf("%s: %s %q: %w", stat, k, val, err)
		}
	}
	usage := anon + file
	if current != "" {
		if usage, err = readUint(current); err != nil {
			return 0, err
		}
	}
	if inactive > usage {
		return 0, nil
	}
	return usage - inactive, nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, fmt.Errorf("%s: %w", path, fs.ErrInvalid)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// close closes the notification descriptors.
func (n *Notifier) close() {
	n.once.Do(func() {
		for _, f := range n.fds {
			unix.Close(f.fd)
			for _, c := range f.closer {
				unix.Close(c)
			}
		}
		n.mu.Lock()
		for _, fd := range n.swaps {
			unix.Close(fd.event)
			unix.Close(fd.usage)
		}
		clear(n.swaps)
		n.mu.Unlock()
		if n.rearmFD >= 0 {
			unix.Close(n.rearmFD)
		}
	})
}

// writeExisting writes s to the existing file path (a cgroup control file).
func writeExisting(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", s, path, err)
	}
	return nil
}
