package prober

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// fakeStatus is the agent's pod status, as the probes read it.
type fakeStatus struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus // guarded by mu
}

func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[uid]
	return *s.DeepCopy(), ok
}

func (f *fakeStatus) set(uid types.UID, s v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[uid] = s
}

// harness runs a Manager inside a synctest bubble with exec probes whose
// outcome is chosen by their command's first word.
type harness struct {
	t      *testing.T
	m      *Manager
	status *fakeStatus
	reg    *prometheus.Registry
	start  time.Time

	mu       sync.Mutex
	outcomes map[string][]Outcome // by command; the last one repeats
	errs     map[string]int       // errors to return before the outcomes
	calls    map[string][]time.Duration
	updates  []string
}

func newHarness(t *testing.T, jitter func(time.Duration) time.Duration) *harness {
	h := &harness{t: t, status: &fakeStatus{m: map[types.UID]v1.PodStatus{}}, reg: prometheus.NewRegistry(),
		start: time.Now(), outcomes: map[string][]Outcome{}, errs: map[string]int{}, calls: map[string][]time.Duration{}}
	if jitter == nil {
		jitter = func(time.Duration) time.Duration { return 0 }
	}
	m, err := New(Config{Concurrency: 4}, Deps{
		Status:     h.status,
		Exec:       RunnerFunc(h.probe),
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Registerer: h.reg,
		Jitter:     jitter,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	for _, pt := range probeTypes {
		go func() {
			for {
				select {
				case u := <-m.Results(pt).Updates():
					s := fmt.Sprintf("%v %v %s %s %v", time.Since(h.start), u.ProbeType, u.ContainerName, u.ContainerID, u.Result)
					h.mu.Lock()
					h.updates = append(h.updates, s)
					h.mu.Unlock()
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func (h *harness) probe(_ context.Context, t Target) (Outcome, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cmd := t.Command[0]
	h.calls[cmd] = append(h.calls[cmd], time.Since(h.start))
	if h.errs[cmd] > 0 {
		h.errs[cmd]--
		return OutcomeUnknown, "", errors.New("runtime hiccup")
	}
	seq := h.outcomes[cmd]
	if len(seq) == 0 {
		return OutcomeSuccess, "", nil
	}
	o := seq[0]
	if len(seq) > 1 {
		h.outcomes[cmd] = seq[1:]
	}
	return o, "", nil
}

func (h *harness) setOutcomes(cmd string, o ...Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outcomes[cmd] = o
}

// advance lets d of fake time pass and every goroutine settle.
func (h *harness) advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func (h *harness) takeUpdates() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.updates
	h.updates = nil
	return u
}

func (h *harness) callTimes(cmd string) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.calls[cmd]...)
}

func execProbe(cmd string, mod ...func(*v1.Probe)) *v1.Probe {
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}}}
	for _, f := range mod {
		f(p)
	}
	return p
}

func testPod(name string, ctrs ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")},
		Spec:       v1.PodSpec{Containers: ctrs, RestartPolicy: v1.RestartPolicyAlways},
	}
}

// runningStatus is a pod status with one running container "app".
func runningStatus(id string, started *bool) v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodRunning, PodIP: "10.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: id, Started: started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}},
	}
}

func TestManagerLivenessFailureHoldsUntilRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.setOutcomes("live", OutcomeFailure)
		pod := testPod("p", v1.Container{Name: "app", LivenessProbe: execProbe("live", func(p *v1.Probe) {
			p.TerminationGracePeriodSeconds = ptr.To[int64](5)
		})})
		h.status.set(pod.UID, runningStatus("c1", ptr.To(true)))
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.advance(65 * time.Second)
		want := []string{"0s Liveness app c1 Success", "20s Liveness app c1 Failure"}
		if diff := cmp.Diff(want, h.takeUpdates()); diff != "" {
			t.Errorf("updates (-want +got):\n%s", diff)
		}
		if pt, grace, bad := h.m.Unhealthy(pod.UID, "app", "c1"); !bad || pt != Liveness || grace == nil || *grace != 5 {
			t.Errorf("Unhealthy(c1) = %v, %v, %v; want Liveness, grace 5, true", pt, grace, bad)
		}
		if diff := cmp.Diff([]time.Duration{0, 10 * time.Second, 20 * time.Second}, h.callTimes("live")); diff != "" {
			t.Errorf("probe runs while on hold (-want +got):\n%s", diff)
		}
		if r, ok := h.m.Results(Liveness).Get("c1"); !ok || r != Failure {
			t.Errorf("Get(c1) = %v, %v; want Failure", r, ok)
		}

		// The agent restarts the container: a new ID lifts the hold.
		h.setOutcomes("live", OutcomeSuccess)
		h.status.set(pod.UID, runningStatus("c2", ptr.To(true)))
		h.advance(10 * time.Second)
		want = []string{"1m10s Liveness app c2 Success"}
		if diff := cmp.Diff(want, h.takeUpdates()); diff != "" {
			t.Errorf("updates after restart (-want +got):\n%s", diff)
		}
		if _, ok := h.m.Results(Liveness).Get("c1"); ok {
			t.Errorf("result of the old container kept")
		}
		if n := len(h.callTimes("live")); n != 4 {
			t.Errorf("%d probe runs, want 4", n)
		}
		labels := prometheus.Labels{"probe_type": "Liveness", "container": "app", "pod": "p", "namespace": "ns", "pod_uid": "p-uid"}
		for result, want := range map[string]float64{"failed": 3, "successful": 1, "unknown": 0} {
			labels["result"] = result
			c, err := findCounter(h.reg, "prober_probe_total", labels)
			if err != nil || c != want {
				t.Errorf("prober_probe_total{result=%q} = %v, %v; want %v", result, c, err, want)
			}
		}
	})
}

// findCounter reads one series of a counter from a registry.
func findCounter(reg *prometheus.Registry, name string, labels prometheus.Labels) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, nil
}

func TestManagerStartupGatesOtherProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.setOutcomes("start", OutcomeFailure, OutcomeFailure, OutcomeSuccess)
		pod := testPod("p", v1.Container{
			Name:           "app",
			StartupProbe:   execProbe("start", func(p *v1.Probe) { p.FailureThreshold = 5 }),
			ReadinessProbe: execProbe("ready"),
			LivenessProbe:  execProbe("live"),
		})
		h.status.set(pod.UID, runningStatus("c1", nil))
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.advance(35 * time.Second)
		if diff := cmp.Diff([]time.Duration{0, 10 * time.Second, 20 * time.Second}, h.callTimes("start")); diff != "" {
			t.Errorf("startup runs (-want +got):\n%s", diff)
		}
		// Probes due at the same instant as the startup verdict may run
		// before or after it: the first run of the others is at 20s or 30s.
		for _, cmd := range []string{"live", "ready"} {
			got := h.callTimes(cmd)
			if len(got) == 0 || got[0] < 20*time.Second {
				t.Errorf("%s runs %v, want the first at 20s or 30s, after startup succeeded", cmd, got)
			}
		}
		var updates []string
		for _, u := range h.takeUpdates() {
			if strings.HasSuffix(u, "Readiness app c1 Success") {
				if u != "20s Readiness app c1 Success" && u != "30s Readiness app c1 Success" {
					t.Errorf("readiness success at %q, want at 20s or 30s", u)
				}
				continue
			}
			updates = append(updates, u)
		}
		want := []string{
			"0s Startup app c1 Unknown", "0s Readiness app c1 Failure", "0s Liveness app c1 Success",
			"20s Startup app c1 Success",
		}
		if diff := cmp.Diff(sorted(want), sorted(updates)); diff != "" {
			t.Errorf("updates (-want +got):\n%s", diff)
		}

		st, _ := h.status.GetPodStatus(pod.UID)
		h.m.UpdatePodStatus(pod, &st)
		c := st.ContainerStatuses[0]
		if !*c.Started || !c.Ready {
			t.Errorf("UpdatePodStatus: started %v ready %v, want both", *c.Started, c.Ready)
		}
	})
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestManagerUpdatePodStatusTriggersReadiness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(p time.Duration) time.Duration { return p - time.Second })
		pod := testPod("p",
			v1.Container{Name: "app", ReadinessProbe: execProbe("ready")},
			v1.Container{Name: "plain"})
		st := runningStatus("c1", nil)
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{Name: "plain", ContainerID: "c9",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}})
		h.status.set(pod.UID, st)
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Second) // first run is jittered to 9s
		h.m.UpdatePodStatus(pod, &st)
		if got := [2]bool{st.ContainerStatuses[0].Ready, st.ContainerStatuses[1].Ready}; got != [2]bool{false, true} {
			t.Errorf("ready = %v, want app not ready, plain (no probe) ready", got)
		}
		h.advance(0)
		if diff := cmp.Diff([]time.Duration{time.Second}, h.callTimes("ready")); diff != "" {
			t.Errorf("readiness runs (-want +got):\n%s", diff)
		}
		h.advance(9 * time.Second) // the regular schedule is kept
		if diff := cmp.Diff([]time.Duration{time.Second, 9 * time.Second}, h.callTimes("ready")); diff != "" {
			t.Errorf("readiness runs (-want +got):\n%s", diff)
		}
		h.m.UpdatePodStatus(pod, &st)
		if !st.ContainerStatuses[0].Ready {
			t.Errorf("not ready after a successful readiness probe")
		}
	})
}

func TestManagerDeletionAndRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.setOutcomes("live", OutcomeFailure)
		pod := testPod("p", v1.Container{Name: "app", ReadinessProbe: execProbe("ready"),
			LivenessProbe: execProbe("live", func(p *v1.Probe) { p.FailureThreshold = 1 })})
		h.status.set(pod.UID, runningStatus("c1", ptr.To(true)))
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.advance(15 * time.Second)
		h.takeUpdates()

		h.m.StopLivenessAndStartup(pod)
		h.advance(0)
		if diff := cmp.Diff([]string{"15s Liveness app c1 Success"}, h.takeUpdates()); diff != "" {
			t.Errorf("updates (-want +got):\n%s", diff)
		}
		if _, ok := h.m.Results(Liveness).Get("c1"); ok {
			t.Errorf("liveness result kept after stop")
		}
		h.advance(20 * time.Second)
		if n := len(h.callTimes("live")); n != 1 {
			t.Errorf("liveness ran %d times, want 1 (on hold, then stopped)", n)
		}
		if n := len(h.callTimes("ready")); n != 4 {
			t.Errorf("readiness ran %d times, want 4 (keeps probing while terminating)", n)
		}
		if n := h.m.Len(); n != 1 {
			t.Errorf("%d probes, want 1", n)
		}
		h.m.RemovePod(pod)
		h.advance(0)
		if n := h.m.Len(); n != 0 {
			t.Errorf("%d probes after RemovePod, want 0", n)
		}
		if _, ok := h.m.Results(Readiness).Get("c1"); ok {
			t.Errorf("readiness result kept after RemovePod")
		}
		if n, err := countSeries(h.reg, "prober_probe_total"); err != nil || n != 0 {
			t.Errorf("%d prober_probe_total series left, %v", n, err)
		}
	})
}

func TestManagerStopsOnTerminatedPodAndRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		done := testPod("done", v1.Container{Name: "app", ReadinessProbe: execProbe("ready")})
		gone := testPod("gone", v1.Container{Name: "app", ReadinessProbe: execProbe("ready")})
		kept := testPod("kept", v1.Container{Name: "app", ReadinessProbe: execProbe("ready")})
		for _, p := range []*v1.Pod{done, gone, kept} {
			h.status.set(p.UID, runningStatus(string(p.UID)+"-c", ptr.To(true)))
			if err := h.m.AddPod(p); err != nil {
				t.Fatal(err)
			}
		}
		h.advance(5 * time.Second)
		st := runningStatus("done-uid-c", ptr.To(true))
		st.Phase = v1.PodSucceeded
		h.status.set(done.UID, st)
		h.m.RemovePod(gone)
		h.advance(10 * time.Second)
		if n := h.m.Len(); n != 1 {
			t.Errorf("%d probes left, want 1 (kept)", n)
		}
	})
}

func TestManagerBadProbesDoNotBlockOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		pod := testPod("p",
			v1.Container{Name: "bad", LivenessProbe: &v1.Probe{PeriodSeconds: -1},
				ReadinessProbe: execProbe("ready", func(p *v1.Probe) { p.TCPSocket = &v1.TCPSocketAction{} })},
			v1.Container{Name: "app", LivenessProbe: execProbe("live")})
		h.status.set(pod.UID, runningStatus("c1", ptr.To(true)))
		err := h.m.AddPod(pod)
		if !errors.Is(err, ErrInvalidProbe) {
			t.Fatalf("AddPod: %v, want ErrInvalidProbe", err)
		}
		for _, want := range []string{`container "bad" Liveness probe`, "no handler", "periodSeconds must not be negative", `container "bad" Readiness probe`, "2 handlers"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("AddPod error %q does not mention %q", err, want)
			}
		}
		h.advance(time.Second)
		if n := h.m.Len(); n != 1 {
			t.Errorf("%d probes, want the good one", n)
		}
		if n := len(h.callTimes("live")); n != 1 {
			t.Errorf("good probe ran %d times, want 1", n)
		}
	})
}

func TestManagerRetriesErrorsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		pod := testPod("p", v1.Container{Name: "app", ReadinessProbe: execProbe("ready")})
		h.status.set(pod.UID, runningStatus("c1", ptr.To(true)))
		h.mu.Lock()
		h.errs["ready"] = 2 // two errors, then success: one run, three tries
		h.mu.Unlock()
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Second)
		if n := len(h.callTimes("ready")); n != 3 {
			t.Errorf("%d tries, want 3", n)
		}
		if r, _ := h.m.Results(Readiness).Get("c1"); r != Success {
			t.Errorf("readiness %v, want Success", r)
		}
		h.mu.Lock()
		h.errs["ready"] = 3 // three errors: the run is dropped
		h.outcomes["ready"] = []Outcome{OutcomeFailure}
		h.mu.Unlock()
		h.advance(10 * time.Second)
		if n := len(h.callTimes("ready")); n != 6 {
			t.Errorf("%d tries, want 6", n)
		}
		if r, _ := h.m.Results(Readiness).Get("c1"); r != Success {
			t.Errorf("readiness %v after errored run, want Success kept", r)
		}
		h.advance(10 * time.Second) // failure is not retried
		if n := len(h.callTimes("ready")); n != 7 {
			t.Errorf("%d tries, want 7", n)
		}
	})
}

// TestManagerSpreadsManyProbes checks that 2,000 probes added at once start
// spread over their first period and cost no goroutine each.
func TestManagerSpreadsManyProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h *harness
		pprof.Do(t.Context(), pprof.Labels("test", t.Name()), func(context.Context) {
			h = newHarness(t, defaultJitter) // Run and its workers carry the label
		})
		synctest.Wait()
		base := labelledGoroutines(t, t.Name())
		for i := range 2000 {
			pod := testPod(fmt.Sprintf("p%d", i), v1.Container{Name: "app", LivenessProbe: execProbe("live")})
			h.status.set(pod.UID, runningStatus(fmt.Sprintf("c%d", i), ptr.To(true)))
			if err := h.m.AddPod(pod); err != nil {
				t.Fatal(err)
			}
		}
		if n := labelledGoroutines(t, t.Name()); n > base+2 {
			t.Errorf("goroutines %d after adding 2000 probes, want about %d", n, base)
		}
		h.advance(10 * time.Second)
		var perSecond [10]int
		for _, d := range h.callTimes("live") {
			perSecond[d/time.Second]++
		}
		for s, n := range perSecond {
			if n < 100 || n > 300 {
				t.Errorf("%d first runs in second %d, want about 200 (spread): %v", n, s, perSecond)
				break
			}
		}
	})
}

func countSeries(reg *prometheus.Registry, name string) (int, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric()), nil
		}
	}
	return 0, nil
}

// labelledGoroutines counts the live goroutines whose profiler label
// "test" is name, from the goroutine profile's grouped form: a line
// "N @ PCS" opens each group and "# labels: {...}" follows it.
func labelledGoroutines(t *testing.T, name string) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("# labels: {%q:%q}", "test", name)
	n, count := 0, 0
	for line := range strings.Lines(buf.String()) {
		line = strings.TrimRight(line, "\n")
		if c, _, ok := strings.Cut(line, " @ "); ok {
			count, _ = strconv.Atoi(c)
			continue
		}
		if line == want {
			n += count
			count = 0
		}
	}
	return n
}

// TestManagerStartsWorkersAsNeeded: a Manager without probes runs no pool
// goroutines; they start as runs need them, never more than Concurrency,
// and runs beyond it wait for a free one.
func TestManagerStartsWorkersAsNeeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		inFlight, most, runs := 0, 0, 0
		slow := RunnerFunc(func(context.Context, Target) (Outcome, string, error) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			runs++
			mu.Unlock()
			time.Sleep(3 * time.Second)
			mu.Lock()
			inFlight--
			mu.Unlock()
			return OutcomeSuccess, "", nil
		})
		status := &fakeStatus{m: map[types.UID]v1.PodStatus{}}
		m, err := New(Config{Concurrency: 2}, Deps{Status: status, Exec: slow, Registerer: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Jitter: func(time.Duration) time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		// Other tests of this package run in parallel, so the process-wide
		// runtime.NumGoroutine is no measure: count the goroutines that
		// carry this test's profiler label, which Run and the workers it
		// starts inherit.
		label := pprof.Labels("test", t.Name())
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		pprof.Do(ctx, label, func(ctx context.Context) {
			go func() { done <- m.Run(ctx) }()
		})
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		synctest.Wait()
		if n := labelledGoroutines(t, t.Name()); n != 1 {
			t.Errorf("%d goroutines with no probes, want 1 (Run)", n)
		}
		for i := range 5 {
			pod := testPod(fmt.Sprintf("p%d", i), v1.Container{Name: "app", LivenessProbe: execProbe("live")})
			status.set(pod.UID, runningStatus(fmt.Sprintf("c%d", i), ptr.To(true)))
			if err := m.AddPod(pod); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := labelledGoroutines(t, t.Name()); n != 3 {
			t.Errorf("%d goroutines with 5 runs due, want 3 (Run and 2 workers)", n)
		}
		time.Sleep(8 * time.Second) // the runs at 0 s, 3 s and 6 s end
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if runs != 5 || most != 2 {
			t.Errorf("%d runs, at most %d at once; want 5 runs, at most 2 at once", runs, most)
		}
	})
}

// TestManagerKeepsStatusAcrossRestart: a container that ran from before the
// Manager's start keeps the Started and Ready it showed until its probes have
// results of their own; one that shows nothing (a static pod's) reads started
// and ready, as the kubelet's first status after its restart; a container
// started since, or every container under ResetStatusOnRestart, starts over.
func TestManagerKeepsStatusAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(p time.Duration) time.Duration { return p - time.Second })
		pod := testPod("p", v1.Container{Name: "app", StartupProbe: execProbe("startup"), ReadinessProbe: execProbe("ready")})
		before := h.start.Add(-time.Minute)
		status := func(started *bool, ready bool, since time.Time) v1.PodStatus {
			st := runningStatus("c1", started)
			st.ContainerStatuses[0].Ready = ready
			st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(since)
			return st
		}
		h.status.set(pod.UID, status(nil, false, before))
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.setOutcomes("ready", OutcomeFailure)
		read := func(st v1.PodStatus) [2]bool {
			h.m.UpdatePodStatus(pod, &st)
			return [2]bool{*st.ContainerStatuses[0].Started, st.ContainerStatuses[0].Ready}
		}
		for _, tc := range []struct {
			name string
			st   v1.PodStatus
			want [2]bool
		}{
			{"shown started and ready", status(ptr.To(true), true, before), [2]bool{true, true}},
			{"shown started, not ready", status(ptr.To(true), false, before), [2]bool{true, false}},
			{"shown not started", status(ptr.To(false), false, before), [2]bool{false, false}},
			{"nothing shown (static pod)", status(nil, false, before), [2]bool{true, true}},
			{"started since the Manager: starts over", status(nil, false, h.start.Add(-5*time.Second)), [2]bool{false, false}},
		} {
			if got := read(tc.st); got != tc.want {
				t.Errorf("%s: started, ready = %v, want %v", tc.name, got, tc.want)
			}
		}
		// The readiness probe runs (UpdatePodStatus triggered it, then every
		// 10 s) and fails three times: from then on its result decides.
		h.status.set(pod.UID, status(ptr.To(true), true, before))
		h.advance(25 * time.Second)
		if n := len(h.callTimes("ready")); n != 3 {
			t.Fatalf("readiness ran %d times in 25 s, want 3", n)
		}
		if got := read(status(ptr.To(true), true, before)); got != [2]bool{true, false} {
			t.Errorf("after the readiness probe failed: started, ready = %v, want [true false]", got)
		}
		if calls := h.callTimes("startup"); len(calls) != 0 {
			t.Errorf("the startup probe of a started container ran at %v", calls)
		}
	})
}

func TestManagerResetStatusOnRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := New(Config{ResetStatusOnRestart: true}, Deps{Status: &fakeStatus{m: map[types.UID]v1.PodStatus{}}, Exec: RunnerFunc(func(context.Context, Target) (Outcome, string, error) {
			return OutcomeSuccess, "", nil
		})})
		if err != nil {
			t.Fatal(err)
		}
		pod := testPod("p", v1.Container{Name: "app", StartupProbe: execProbe("startup"), ReadinessProbe: execProbe("ready")})
		if err := m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		st := runningStatus("c1", ptr.To(true))
		st.ContainerStatuses[0].Ready = true
		st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(time.Now().Add(-time.Minute))
		m.UpdatePodStatus(pod, &st)
		if c := st.ContainerStatuses[0]; *c.Started || c.Ready {
			t.Errorf("started, ready = %v, %v; want both false under ResetStatusOnRestart", *c.Started, c.Ready)
		}
	})
}
