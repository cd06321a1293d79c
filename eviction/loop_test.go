package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// loopClock is a fake clock for tests of Run. Each timer Reset is reported on
// resets once the timer is re-armed, so a test can wait for Run to finish a
// wake-up before it moves the clock, as nodekeeper simulate does. The calls the
// loop discipline rules out are recorded in forbidden.
type loopClock struct {
	*testingclock.FakeClock
	timers  atomic.Int32       // NewTimer calls
	created chan struct{}      // one value per NewTimer
	resets  chan time.Duration // one value per Reset
	mu      sync.Mutex
	due     time.Time // guarded by mu; when the timer fires
	forbid  []string  // guarded by mu
}

func newLoopClock() *loopClock {
	return &loopClock{FakeClock: testingclock.NewFakeClock(fixtureTime),
		created: make(chan struct{}, 1), resets: make(chan time.Duration, 16)}
}

func (c *loopClock) NewTimer(d time.Duration) clock.Timer {
	c.timers.Add(1)
	c.arm(d)
	t := &loopTimer{Timer: c.FakeClock.NewTimer(d), c: c}
	select {
	case c.created <- struct{}{}:
	default:
	}
	return t
}

// arm notes when a timer armed now for d fires. Only the test moves the
// clock, so the time read here is the time of the call.
func (c *loopClock) arm(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.due = c.Now().Add(d)
}

func (c *loopClock) forbidden(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forbid = append(c.forbid, call)
}

func (c *loopClock) NewTicker(d time.Duration) clock.Ticker {
	c.forbidden("NewTicker")
	return c.FakeClock.NewTicker(d)
}

func (c *loopClock) After(d time.Duration) <-chan time.Time {
	c.forbidden("After")
	return c.FakeClock.After(d)
}

func (c *loopClock) Tick(d time.Duration) <-chan time.Time {
	c.forbidden("Tick")
	return c.FakeClock.Tick(d)
}

func (c *loopClock) Sleep(d time.Duration) {
	c.forbidden("Sleep")
	c.FakeClock.Sleep(d)
}

type loopTimer struct {
	clock.Timer
	c *loopClock
}

func (t *loopTimer) Reset(d time.Duration) bool {
	t.c.arm(d)
	active := t.Timer.Reset(d)
	t.c.resets <- d
	return active
}

// step moves the clock by d and, when that fires Run's timer, waits for Run to
// re-arm it and returns the duration it was re-armed for; it returns 0 when the
// timer was not due.
func (c *loopClock) step(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	c.mu.Lock()
	fires := !c.due.After(c.Now().Add(d))
	c.mu.Unlock()
	c.Step(d)
	if !fires {
		return 0
	}
	select {
	case next := <-c.resets:
		return next
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not re-arm its timer at %v", c.Since(fixtureTime))
		return 0
	}
}

// clockStats is a StatsSource whose Summary has the node's memory, as set, and
// the working set of each pod still there, all stamped with the clock's time;
// it records when it was called.
type clockStats struct {
	clk       clock.PassiveClock
	mu        sync.Mutex
	available string
	pods      map[string]string // pod name -> working set
	calls     []time.Duration   // since fixtureTime
}

func (f *clockStats) Summary(context.Context) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clk.Now()
	f.calls = append(f.calls, now.Sub(fixtureTime))
	b := newSummary().memory(f.available, "7Gi")
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		pod := newTestPod(name)
		b.pods(newPodStats(pod, podWorkingSet(f.pods[name]), ctrWorkingSet("app", f.pods[name])))
	}
	s := b.build()
	s.Node.Memory.Time = metav1.NewTime(now)
	return s, nil
}

func (f *clockStats) called() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// loopNode is a node under a hard memory threshold, with a manager on a
// loopClock: a killed pod leaves the active pods and the stats, and is cleaned
// up once cleaned is set.
type loopNode struct {
	clk     *loopClock
	stats   *clockStats
	m       *Manager
	cleaned atomic.Bool
	mu      sync.Mutex
	pods    []*v1.Pod       // guarded by mu
	kills   []time.Duration // guarded by mu; since fixtureTime
}

func newLoopNode(t *testing.T, cfg Config, available string, podMemory map[string]string, cleanup bool) *loopNode {
	t.Helper()
	n := &loopNode{clk: newLoopClock()}
	n.stats = &clockStats{clk: n.clk, available: available, pods: podMemory}
	for _, name := range slices.Sorted(maps.Keys(podMemory)) {
		n.pods = append(n.pods, newTestPod(name, bestEffort()))
	}
	cfg.Thresholds = []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}
	deps := Deps{
		Stats: n.stats,
		Killer: nodeapi.PodKillerFunc(func(_ context.Context, req nodeapi.KillRequest) error {
			n.mu.Lock()
			n.kills = append(n.kills, n.clk.Since(fixtureTime))
			n.pods = slices.DeleteFunc(n.pods, func(p *v1.Pod) bool { return p.Name == req.Pod.Name })
			n.mu.Unlock()
			n.stats.mu.Lock()
			delete(n.stats.pods, req.Pod.Name)
			n.stats.mu.Unlock()
			return nil
		}),
		ActivePods: func() []*v1.Pod { n.mu.Lock(); defer n.mu.Unlock(); return slices.Clone(n.pods) },
		Clock:      n.clk,
		Logger:     testLogger(t),
	}
	if cleanup {
		deps.PodCleanedUp = func(*v1.Pod) bool { return n.cleaned.Load() }
	}
	m, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	return n
}

// run starts Run and waits until it has made its timer; it stops Run at the
// end of the test and checks that it returned nil and kept to one timer and
// none of the calls the loop discipline rules out.
func (n *loopNode) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.m.Run(ctx) }()
	select {
	case <-n.clk.created:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run made no timer")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
		if got := n.clk.timers.Load(); got != 1 {
			t.Errorf("Run made %d timers, want 1", got)
		}
		n.clk.mu.Lock()
		defer n.clk.mu.Unlock()
		if len(n.clk.forbid) > 0 {
			t.Errorf("Run called %v", n.clk.forbid)
		}
	})
}

func (n *loopNode) killedAt() []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.kills)
}

// TestRunMonitoringIntervalOnFakeClock: the first pass runs on the first
// wake-up (the timer is armed for 0), then one pass per monitoring interval,
// each wake-up re-arming the one timer once.
func TestRunMonitoringIntervalOnFakeClock(t *testing.T) {
	t.Parallel()
	n := newLoopNode(t, Config{MonitoringInterval: 10 * time.Second}, "1Gi", map[string]string{"a": "1Gi"}, false)
	n.run(t)
	if got := n.stats.called(); len(got) != 0 {
		t.Fatalf("passes before the first wake-up: %v", got)
	}
	var rearmed []time.Duration
	for _, d := range []time.Duration{0, 9 * time.Second, time.Second, 10 * time.Second, 5 * time.Second} {
		rearmed = append(rearmed, n.clk.step(t, d))
	}
	if diff := cmp.Diff([]time.Duration{10 * time.Second, 0, 10 * time.Second, 10 * time.Second, 0}, rearmed); diff != "" {
		t.Errorf("re-armed for, per step (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Duration{0, 10 * time.Second, 20 * time.Second}, n.stats.called()); diff != "" {
		t.Errorf("passes at (-want +got):\n%s", diff)
	}
}

// TestRunWaitsForCleanupOnFakeClock: after a pass that evicts, the same timer
// polls the cleanup every second; the next pass runs in the wake-up that sees
// the pod cleaned up (or the wait time out), and without eviction the loop goes
// back to the monitoring interval.
func TestRunWaitsForCleanupOnFakeClock(t *testing.T) {
	t.Parallel()
	t.Run("cleaned up at the second poll", func(t *testing.T) {
		t.Parallel()
		n := newLoopNode(t, Config{}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, true)
		n.run(t)
		var rearmed []time.Duration
		rearmed = append(rearmed, n.clk.step(t, 0))           // 0s: pass evicts a
		rearmed = append(rearmed, n.clk.step(t, time.Second)) // 1s: a not cleaned up
		n.cleaned.Store(true)
		rearmed = append(rearmed, n.clk.step(t, time.Second)) // 2s: cleaned up; pass evicts b
		rearmed = append(rearmed, n.clk.step(t, time.Second)) // 3s: cleaned up; pass, nobody left
		if diff := cmp.Diff([]time.Duration{time.Second, time.Second, time.Second, DefaultMonitoringInterval}, rearmed); diff != "" {
			t.Errorf("re-armed for, per step (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{0, 2 * time.Second, 3 * time.Second}, n.stats.called()); diff != "" {
			t.Errorf("passes at (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{0, 2 * time.Second}, n.killedAt()); diff != "" {
			t.Errorf("kills at (-want +got):\n%s", diff)
		}
	})
	t.Run("no PodCleanedUp: next pass one poll later", func(t *testing.T) {
		t.Parallel()
		n := newLoopNode(t, Config{}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, false)
		n.run(t)
		for range 3 {
			n.clk.step(t, time.Second)
		}
		if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, n.stats.called()); diff != "" {
			t.Errorf("passes at (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second}, n.killedAt()); diff != "" {
			t.Errorf("kills at (-want +got):\n%s", diff)
		}
	})
	t.Run("timeout between polls", func(t *testing.T) {
		t.Parallel()
		n := newLoopNode(t, Config{PodCleanupTimeout: 2500 * time.Millisecond}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, true)
		n.run(t)
		var rearmed []time.Duration
		for _, d := range []time.Duration{0, time.Second, time.Second, 500 * time.Millisecond} {
			rearmed = append(rearmed, n.clk.step(t, d))
		}
		// The last wait is cut to the deadline; at 2.5s the wait times out and
		// the pass evicts b.
		if diff := cmp.Diff([]time.Duration{time.Second, time.Second, 500 * time.Millisecond, time.Second}, rearmed); diff != "" {
			t.Errorf("re-armed for, per step (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{0, 2500 * time.Millisecond}, n.killedAt()); diff != "" {
			t.Errorf("kills at (-want +got):\n%s", diff)
		}
	})
}

// recorded is one event a fakeRecorder got, or one kill.
type recorded struct {
	Object      string // "Pod ns/name", "Node name"; "kill ns/name" for a kill
	Annotations map[string]string
	Type        string
	Reason      string
	Message     string
	Kill        *nodeapi.KillRequest
}

// fakeRecorder records events and, through killer, kills, in call order.
type fakeRecorder struct {
	mu  sync.Mutex
	got []recorded
}

func (r *fakeRecorder) add(x recorded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, x)
}

func objectOf(o runtime.Object) string {
	switch o := o.(type) {
	case *v1.Pod:
		return "Pod " + nodeapi.PodName(o)
	case *v1.ObjectReference:
		return fmt.Sprintf("%s %s (uid %s)", o.Kind, o.Name, o.UID)
	}
	return fmt.Sprintf("%T", o)
}

func (r *fakeRecorder) Event(o runtime.Object, eventtype, reason, message string) {
	r.add(recorded{Object: objectOf(o), Type: eventtype, Reason: reason, Message: message})
}

func (r *fakeRecorder) Eventf(o runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.add(recorded{Object: objectOf(o), Type: eventtype, Reason: reason, Message: fmt.Sprintf(messageFmt, args...)})
}

func (r *fakeRecorder) AnnotatedEventf(o runtime.Object, ann map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.add(recorded{Object: objectOf(o), Annotations: ann, Type: eventtype, Reason: reason, Message: fmt.Sprintf(messageFmt, args...)})
}

func (r *fakeRecorder) killer() nodeapi.PodKiller {
	return nodeapi.PodKillerFunc(func(_ context.Context, req nodeapi.KillRequest) error {
		r.add(recorded{Object: "kill " + nodeapi.PodName(req.Pod), Kill: &req})
		return nil
	})
}

// evictedStatus is the final status the kubelet records on a pod it evicts with
// message, spelled out rather than built with the code under test.
func evictedStatus(message string) v1.PodStatus {
	return v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  "Evicted",
		Message: message,
		Conditions: []v1.PodCondition{{
			Type: "DisruptionTarget", Status: "True", Reason: "TerminationByKubelet", Message: message,
		}},
	}
}

// TestEvictionRecordsKubeletEventAndStatus checks what an eviction leaves behind,
// as the kubelet does it: the EvictionThresholdMet event on the node, then the
// Evicted event on the pod (annotated with the offending containers for a
// threshold, without annotations for a local-storage limit), then the kill with
// status Failed/Evicted, the message, a DisruptionTarget condition and the grace
// period. Decide, given the same node, plans the same kill requests.
func TestEvictionRecordsKubeletEventAndStatus(t *testing.T) {
	t.Parallel()
	hog := newTestPod("hog", withContainer("app", nil, nil), withGracePeriod(60))
	quick := newTestPod("quick", withContainer("app", nil, nil), withGracePeriod(7))
	scratch := newTestPod("scratch", withContainer("app", nil, nil), withEmptyDir("tmp", v1.StorageMediumDefault, "1Mi"))
	memMsg := func(available, usage string) string {
		return "The node was low on resource: memory. Threshold quantity: 100Mi, available: " + available + ". " +
			"Container app was using " + usage + ", request is 0, has larger consumption of memory. "
	}
	softMsg := "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. " +
		"Container app was using 3Gi, request is 0, has larger consumption of memory. "
	ann := func(usage string) map[string]string {
		return map[string]string{"offending_containers": "app", "offending_containers_usage": usage, "starved_resource": "memory"}
	}
	grace := func(s int64) *int64 { return &s }
	node := recorded{Object: "Node node-1 (uid node-1)", Type: "Warning", Reason: "EvictionThresholdMet", Message: "Attempting to reclaim memory"}
	storageMsg := `Usage of EmptyDir volume "tmp" exceeds the limit "1Mi". `
	tests := []struct {
		name      string
		cfg       Config
		pod       *v1.Pod
		available string
		stats     []statsOpt
		passes    []time.Duration // when the passes run; the last evicts
		want      []recorded
	}{
		{
			name: "hard threshold: 1s grace", cfg: Config{Thresholds: []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}},
			pod: hog, available: "50Mi", stats: []statsOpt{podWorkingSet("3Gi"), ctrWorkingSet("app", "3Gi")},
			passes: []time.Duration{0},
			want: []recorded{node,
				{Object: "Pod default/hog", Annotations: ann("3Gi"), Type: "Warning", Reason: "Evicted", Message: memMsg("50Mi", "3Gi")},
				{Object: "kill default/hog", Kill: &nodeapi.KillRequest{Pod: hog, Status: evictedStatus(memMsg("50Mi", "3Gi")), GracePeriodOverride: grace(1)}},
			},
		},
		{
			name: "soft threshold: evictionMaxPodGracePeriod below the pod's", pod: hog, available: "500Mi",
			cfg:   Config{Thresholds: []Threshold{graced(thrQ(SignalMemoryAvailable, "1Gi"), time.Minute)}, MaxPodGracePeriod: 20 * time.Second},
			stats: []statsOpt{podWorkingSet("3Gi"), ctrWorkingSet("app", "3Gi")}, passes: []time.Duration{0, time.Minute},
			want: []recorded{node,
				{Object: "Pod default/hog", Annotations: ann("3Gi"), Type: "Warning", Reason: "Evicted", Message: softMsg},
				{Object: "kill default/hog", Kill: &nodeapi.KillRequest{Pod: hog, Status: evictedStatus(softMsg), GracePeriodOverride: grace(20)}},
			},
		},
		{
			name: "soft threshold: the pod's terminationGracePeriodSeconds below the cap", pod: quick, available: "500Mi",
			cfg:   Config{Thresholds: []Threshold{graced(thrQ(SignalMemoryAvailable, "1Gi"), time.Minute)}, MaxPodGracePeriod: 20 * time.Second},
			stats: []statsOpt{podWorkingSet("3Gi"), ctrWorkingSet("app", "3Gi")}, passes: []time.Duration{0, time.Minute},
			want: []recorded{node,
				{Object: "Pod default/quick", Annotations: ann("3Gi"), Type: "Warning", Reason: "Evicted", Message: softMsg},
				{Object: "kill default/quick", Kill: &nodeapi.KillRequest{Pod: quick, Status: evictedStatus(softMsg), GracePeriodOverride: grace(7)}},
			},
		},
		{
			name: "local-storage limit: 1s grace, no annotations, no node event", pod: scratch, available: "4Gi",
			cfg:   Config{Thresholds: []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}, LocalStorageCapacityIsolation: true},
			stats: []statsOpt{podWorkingSet("10Mi"), volumeUsage("tmp", "5Mi", 1)}, passes: []time.Duration{0},
			want: []recorded{
				{Object: "Pod default/scratch", Type: "Warning", Reason: "Evicted", Message: storageMsg},
				{Object: "kill default/scratch", Kill: &nodeapi.KillRequest{Pod: scratch, Status: evictedStatus(storageMsg), GracePeriodOverride: grace(1)}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := testingclock.NewFakeClock(fixtureTime)
			summary := func() *statsapi.Summary {
				s := newSummary().memory(tc.available, "4Gi").pods(newPodStats(tc.pod, tc.stats...)).build()
				s.Node.Memory.Time = metav1.NewTime(clk.Now())
				return s
			}
			rec := &fakeRecorder{}
			m, err := New(tc.cfg, Deps{
				Stats:      summaryFn(func(context.Context) (*statsapi.Summary, error) { return summary(), nil }),
				Killer:     rec.killer(),
				ActivePods: func() []*v1.Pod { return []*v1.Pod{tc.pod} },
				Recorder:   rec,
				NodeName:   "node-1",
				Clock:      clk,
				Logger:     testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			var evicted []*v1.Pod
			for _, at := range tc.passes {
				clk.SetTime(fixtureTime.Add(at))
				evicted = m.Pass(t.Context())
			}
			if diff := cmp.Diff([]*v1.Pod{tc.pod}, evicted); diff != "" {
				t.Errorf("evicted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, rec.got); diff != "" {
				t.Errorf("events and kills (-want +got):\n%s", diff)
			}

			// explain's Decide: the same core, every grace period taken as elapsed.
			d := Decide(tc.cfg, Snapshot{Pods: []*v1.Pod{tc.pod}, Summary: summary()}, nil, tc.cfg.LocalStorageCapacityIsolation)
			var planned []nodeapi.KillRequest
			for _, e := range d.Evictions {
				planned = append(planned, e.KillRequest())
			}
			if diff := cmp.Diff([]nodeapi.KillRequest{*tc.want[len(tc.want)-1].Kill}, planned); diff != "" {
				t.Errorf("Decide's kill requests (-want +got):\n%s", diff)
			}
		})
	}
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// wake calls Wake and waits for Run to re-arm its timer after the pass.
func (c *loopClock) wake(t *testing.T, m *Manager) time.Duration {
	t.Helper()
	m.Wake()
	select {
	case next := <-c.resets:
		return next
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not re-arm its timer after Wake at %v", c.Since(fixtureTime))
		return 0
	}
}

// TestWakeRunsPassAtOnce: Wake runs a pass at once, between timer wake-ups,
// and the monitoring interval counts from it; during a cleanup wait a wake
// checks the cleanup and passes only once the pod is cleaned up.
func TestWakeRunsPassAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("between passes", func(t *testing.T) {
		t.Parallel()
		n := newLoopNode(t, Config{MonitoringInterval: 10 * time.Second}, "1Gi", map[string]string{"a": "1Gi"}, false)
		n.run(t)
		rearmed := []time.Duration{n.clk.step(t, 0), n.clk.step(t, 3*time.Second), n.clk.wake(t, n.m), n.clk.step(t, 9*time.Second), n.clk.step(t, time.Second)}
		if diff := cmp.Diff([]time.Duration{10 * time.Second, 0, 10 * time.Second, 0, 10 * time.Second}, rearmed); diff != "" {
			t.Errorf("re-armed for, per step (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{0, 3 * time.Second, 13 * time.Second}, n.stats.called()); diff != "" {
			t.Errorf("passes at (-want +got):\n%s", diff)
		}
	})
	t.Run("during a cleanup wait", func(t *testing.T) {
		t.Parallel()
		n := newLoopNode(t, Config{}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, true)
		n.run(t)
		n.clk.step(t, 0) // evicts a
		n.clk.Step(300 * time.Millisecond)
		if got := n.clk.wake(t, n.m); got != DefaultPodCleanupPoll {
			t.Errorf("not cleaned up: re-armed for %v, want one poll, %v", got, DefaultPodCleanupPoll)
		}
		n.cleaned.Store(true)
		n.clk.Step(100 * time.Millisecond)
		n.clk.wake(t, n.m) // cleaned up: the pass evicts b
		if diff := cmp.Diff([]time.Duration{0, 400 * time.Millisecond}, n.stats.called()); diff != "" {
			t.Errorf("passes at (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{0, 400 * time.Millisecond}, n.killedAt()); diff != "" {
			t.Errorf("kills at (-want +got):\n%s", diff)
		}
	})
}
