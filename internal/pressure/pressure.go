// Package pressure wakes the eviction manager as soon as memory or disk
// crosses an eviction threshold, instead of at its next periodic pass. It uses
// the kernel's notifications where the machine has them — a memory-usage
// threshold eventfd on a cgroup v1 memory cgroup (cgroup.event_control),
// armed at the working-set mark plus the cgroup's inactive file pages and
// re-armed as they change, the
// memory.events file of a cgroup v2 cgroup, a PSI trigger on
// /proc/pressure/memory — and polls where it has none: the memory usage file
// and, always, statfs of the watched filesystems (both cheap). It only wakes:
// the eviction pass it starts reads fresh stats and decides.
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

	"github.com/nodekeeper/nodekeeper/internal/cgroups"
)

// DefaultPSITrigger asks for a notification when tasks stall on memory for
// 150ms within a 2s window. A window must be a multiple of 2s for a process
// without CAP_SYS_RESOURCE.
const DefaultPSITrigger = "some 150000 2000000"

// DefaultPollPeriod is the period of the statfs poll and of the memory poll
// used where no notification is available.
const DefaultPollPeriod = time.Second

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
	// trigger ("some|full STALL_US WINDOW_US"), e.g. DefaultPSITrigger.
	PSITrigger string
	// Disk are the filesystems to poll.
	Disk []DiskWatch
	// PollPeriod is the period of the polls; zero is DefaultPollPeriod.
	PollPeriod time.Duration
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
	// Clock drives the polls; nil is the real clock.
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
}

type polledMemory struct {
	file  string
	stat  string // the cgroup's memory.stat, for its inactive file pages
	base  uint64 // MemoryWatch.Usage
	usage uint64 // base plus the inactive file pages at the last re-arm
	over  bool   // the last poll found usage at or over the mark
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

// Mechanisms lists the mechanisms in use, in the order they were set up.
func (n *Notifier) Mechanisms() []string { return append([]string(nil), n.mechs...) }

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
	events := filepath.Join(dir, "memory.events")
	if fd, err := unix.Open(events, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		n.fds = append(n.fds, notifyFD{fd: fd, events: unix.POLLPRI, what: "memory.events " + w.Cgroup})
		n.addMech(MechanismMemoryEvents)
	} else {
		n.log.Warn("memory.events unavailable", "file", events, "err", err)
	}
	// memory.events changes only on high, max and OOM events: usage is
	// polled too.
	n.polled = append(n.polled, polledMemory{file: filepath.Join(dir, "memory.current"), stat: stat, base: w.Usage, usage: mark})
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
		p := &n.polled[i]
		p.usage = p.base + inactiveFile(p.stat, n.version)
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
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if _, err := unix.Write(fd, append([]byte(n.cfg.PSITrigger), 0)); err != nil {
		unix.Close(fd)
		return fmt.Errorf("write trigger to %s: %w", path, err)
	}
	n.fds = append(n.fds, notifyFD{fd: fd, events: unix.POLLPRI, what: "psi"})
	n.addMech(MechanismPSI)
	return nil
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
	if len(n.polled) > 0 || len(n.cfg.Disk) > 0 {
		t := n.deps.Clock.NewTicker(n.cfg.PollPeriod)
		defer t.Stop()
		pollC = t.C()
		n.poll()
	}
	if len(n.polled) > 0 || len(n.memcg) > 0 {
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
			n.poll()
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
	// Notifications closer than MinWakeInterval to the last wake are held
	// and delivered as one wake when the interval is over.
	var last time.Time
	pending := false
	var due []time.Time // follow-up wakes of the last notification, ascending
	for {
		for i := range pfds {
			pfds[i].Revents = 0
		}
		timeout := -1
		var next time.Time // the earliest held or follow-up wake
		if pending {
			next = last.Add(n.cfg.MinWakeInterval)
		}
		if len(due) > 0 && (next.IsZero() || due[0].Before(next)) {
			next = due[0]
		}
		if !next.IsZero() {
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
			if f.events == unix.POLLPRI && strings.HasPrefix(f.what, "memory.events") {
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
		now := time.Now()
		if woke {
			due = due[:0]
			for _, d := range n.cfg.FollowUps {
				due = append(due, now.Add(d))
			}
		}
		fire := woke || pending
		for len(due) > 0 && !due[0].After(now) {
			fire, due = true, due[1:]
		}
		if !fire {
			continue
		}
		if now.Sub(last) < n.cfg.MinWakeInterval {
			pending = true
			continue
		}
		n.deps.Wake()
		last, pending = time.Now(), false
	}
}

// poll reads the polled memory usage files and statfs of the disk watches,
// and wakes when one has crossed its mark since the previous poll (or is over
// it at the first).
func (n *Notifier) poll() {
	woke := false
	for i := range n.polled {
		p := &n.polled[i]
		v, err := readUint(p.file)
		if err != nil {
			n.log.Debug("memory poll", "err", err)
			continue
		}
		over := v >= p.usage
		if over && !p.over {
			woke = true
		}
		p.over = over
	}
	for i, w := range n.cfg.Disk {
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
