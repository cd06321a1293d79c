package podruntime

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/prober"
)

// fakeProbes fails the probes of containers by name and reports readiness
// by name; it records the container IDs it was asked about.
type fakeProbes struct {
	mu     sync.Mutex
	failed map[string]prober.ProbeType // by container name
	grace  map[string]*int64
	ready  map[string]bool
	asked  []string
}

func (f *fakeProbes) UpdatePodStatus(_ *v1.Pod, st *v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range l {
			r, ok := f.ready[l[i].Name]
			l[i].Ready = !ok || r
		}
	}
}

func (f *fakeProbes) Unhealthy(_ types.UID, name, id string) (prober.ProbeType, *int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, id)
	pt, ok := f.failed[name]
	return pt, f.grace[name], ok
}

func (f *fakeProbes) set(fn func(*fakeProbes)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// takeTimeouts returns and clears the recorded StopContainer timeouts.
func takeTimeouts(s *stopRecorder) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.timeouts
	s.timeouts = nil
	return t
}

// newProbeFixture is newFixture with probes and a StopContainer recorder.
func newProbeFixture(t *testing.T, probes *fakeProbes) (*fixture, *stopRecorder) {
	t.Helper()
	f := newFixture(t)
	rec := &stopRecorder{fakeCRI: fakeCRI{f.rt, f.img}}
	m, err := New(Config{NodeName: "node1", PodsDir: filepath.Join(f.dir, "pods"), PodLogsDir: filepath.Join(f.dir, "logs"),
		HostIP: "192.168.1.2", MemoryCapacity: 4 << 30, CPUs: 2, DNS: filepath.Join(f.dir, "resolv.conf")},
		Deps{Runtime: rec, Cgroups: f.cgroups, Logger: testLogger(t), Recorder: f.events, Probes: probes})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f, rec
}

func TestSyncPodRestartsOnProbeFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		policy     v1.RestartPolicy
		probe      prober.ProbeType
		probeGrace *int64
		deletion   *int64
		wantMsg    string
		wantStop   []int64
		wantCalls  []string
		wantCount  int32
	}{{
		name: "liveness, probe grace", policy: v1.RestartPolicyAlways, probe: prober.Liveness, probeGrace: ptr.To[int64](5),
		wantMsg: "Killing: Container app failed liveness probe, will be restarted", wantStop: []int64{5},
		wantCalls: []string{"StopContainer", "CreateContainer", "StartContainer"}, wantCount: 1,
	}, {
		name: "startup, pod grace", policy: v1.RestartPolicyOnFailure, probe: prober.Startup,
		wantMsg: "Killing: Container app failed startup probe, will be restarted", wantStop: []int64{30},
		wantCalls: []string{"StopContainer", "CreateContainer", "StartContainer"}, wantCount: 1,
	}, {
		name: "deletion grace wins", policy: v1.RestartPolicyAlways, probe: prober.Liveness, probeGrace: ptr.To[int64](50), deletion: ptr.To[int64](3),
		wantMsg: "Killing: Container app failed liveness probe, will be restarted", wantStop: []int64{3},
		wantCalls: []string{"StopContainer", "CreateContainer", "StartContainer"}, wantCount: 1,
	}, {
		name: "never: killed, not restarted", policy: v1.RestartPolicyNever, probe: prober.Liveness,
		wantMsg: "Killing: Container app failed liveness probe", wantStop: []int64{30},
		wantCalls: []string{"StopContainer"}, wantCount: 0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			probes := &fakeProbes{failed: map[string]prober.ProbeType{}, grace: map[string]*int64{}}
			f, rec := newProbeFixture(t, probes)
			pod := testPod(func(p *v1.Pod) {
				p.Spec.RestartPolicy = tc.policy
				p.DeletionGracePeriodSeconds = tc.deletion
			})
			if res := f.sync(t, pod); res.Err != nil {
				t.Fatal(res.Err)
			}
			f.calls()
			f.events.take()
			probes.set(func(p *fakeProbes) { p.failed["app"], p.grace["app"] = tc.probe, tc.probeGrace })
			if res := f.sync(t, pod); res.Err != nil {
				t.Fatal(res.Err)
			}
			if diff := cmp.Diff(tc.wantCalls, f.calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStop, takeTimeouts(rec)); diff != "" {
				t.Errorf("StopContainer grace (-want +got):\n%s", diff)
			}
			if got := f.events.take(); !slices.Contains(got, tc.wantMsg) {
				t.Errorf("events %q lack %q", got, tc.wantMsg)
			}
			st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
			if got := st.ContainerStatuses[0].RestartCount; got != tc.wantCount {
				t.Errorf("restart count %d, want %d", got, tc.wantCount)
			}
			probes.mu.Lock()
			asked := slices.Clone(probes.asked)
			probes.mu.Unlock()
			if len(asked) == 0 || !strings.HasPrefix(asked[0], critest.FakeRuntimeName+"://") {
				t.Errorf("Unhealthy asked about %q, want IDs as the pod status carries them", asked)
			}
		})
	}
}

func TestSyncPodProbeRestartBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		probes := &fakeProbes{failed: map[string]prober.ProbeType{}}
		f, _ := newProbeFixture(t, probes)
		pod := testPod()
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		probes.set(func(p *fakeProbes) { p.failed["app"] = prober.Liveness })
		// First probe kill: restarted at once (no earlier exit).
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("first probe restart: %+v", res)
		}
		f.calls()
		// Second, right away: the earlier exit has no back-off entry yet, so
		// it starts, and the back-off (10s) begins.
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("second probe restart: %+v", res)
		}
		if diff := cmp.Diff([]string{"StopContainer", "CreateContainer", "StartContainer"}, f.calls()); diff != "" {
			t.Errorf("second probe restart (-want +got):\n%s", diff)
		}
		// Third, within the back-off: killed, but not started.
		res := f.sync(t, pod)
		if res.Err != nil || res.RetryAfter <= 0 {
			t.Fatalf("third probe restart in back-off: %+v, want a RetryAfter", res)
		}
		if diff := cmp.Diff([]string{"StopContainer", "RemoveContainer"}, f.calls()); diff != "" {
			t.Errorf("third probe restart (-want +got):\n%s", diff)
		}
		st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if got := stateOf(st.ContainerStatuses[0]); got != "waiting:CrashLoopBackOff" {
			t.Errorf("state %s, want waiting:CrashLoopBackOff", got)
		}
		// After the back-off the ordinary exited-container restart starts it.
		probes.set(func(p *fakeProbes) { delete(p.failed, "app") })
		time.Sleep(time.Minute)
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		st = f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if got, n := stateOf(st.ContainerStatuses[0]), st.ContainerStatuses[0].RestartCount; got != "running" || n != 3 {
			t.Errorf("after back-off: %s, restart count %d; want running, 3", got, n)
		}
	})
}

func TestPodStatusReadinessFromProbes(t *testing.T) {
	t.Parallel()
	probes := &fakeProbes{ready: map[string]bool{"app": false}}
	f, _ := newProbeFixture(t, probes)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "side", Image: "img:1"})
	})
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	conds := func() map[v1.PodConditionType]string {
		st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		out := map[v1.PodConditionType]string{}
		for _, c := range st.Conditions {
			if c.Type == v1.PodReady || c.Type == v1.ContainersReady {
				out[c.Type] = string(c.Status) + " " + c.Message
			}
		}
		return out
	}
	want := map[v1.PodConditionType]string{
		v1.PodReady: "False containers with unready status: [app]", v1.ContainersReady: "False containers with unready status: [app]",
	}
	if diff := cmp.Diff(want, conds()); diff != "" {
		t.Errorf("not ready (-want +got):\n%s", diff)
	}
	probes.set(func(p *fakeProbes) { p.ready["app"] = true })
	want = map[v1.PodConditionType]string{v1.PodReady: "True ", v1.ContainersReady: "True "}
	if diff := cmp.Diff(want, conds()); diff != "" {
		t.Errorf("ready (-want +got):\n%s", diff)
	}
}

func TestPostStartHook(t *testing.T) {
	t.Parallel()
	hook := func(p *v1.Pod) {
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"touch", "/started"}}}}
	}
	t.Run("success", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		pod := testPod(hook)
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		if diff := cmp.Diff([]string{"RunPodSandbox", "CreateContainer", "StartContainer", "ExecSync"}, f.calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("failure kills the container", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		pod := testPod(hook)
		f.rt.InjectError("ExecSync", errors.New("exit 1"))
		res := f.sync(t, pod)
		if res.Err == nil || !strings.Contains(res.Err.Error(), "post-start hook of container app") {
			t.Fatalf("sync error %v, want the post-start hook's", res.Err)
		}
		if diff := cmp.Diff([]string{"RunPodSandbox", "CreateContainer", "StartContainer", "ExecSync", "StopContainer"}, f.calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		got := f.events.take()
		for _, want := range []string{"FailedPostStartHook: PostStartHook failed", "Killing: FailedPostStartHook"} {
			if !slices.Contains(got, want) {
				t.Errorf("events %q lack %q", got, want)
			}
		}
		st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if got := stateOf(st.ContainerStatuses[0]); got != "waiting:"+reasonPostStartHookError {
			t.Errorf("state %s, want waiting:%s", got, reasonPostStartHookError)
		}
		// The next sync restarts it (restartPolicy Always).
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		st = f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if cs := st.ContainerStatuses[0]; stateOf(cs) != "running" || cs.RestartCount != 1 {
			t.Errorf("after restart: %s, restart count %d", stateOf(cs), cs.RestartCount)
		}
	})
}

// A failing pre-stop hook is reported without its error (which may hold
// secrets) and the container is stopped regardless.
func TestPreStopHookFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain", "--token=secret"}}}}
	})
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.calls()
	f.events.take()
	f.rt.InjectError("ExecSync", errors.New("exit 1: token=secret rejected"))
	if err := f.m.KillPod(t.Context(), pod, f.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ExecSync", "StopContainer", "StopPodSandbox"}, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	want := []string{"Killing: Stopping container app", "FailedPreStopHook: PreStopHook failed"}
	if diff := cmp.Diff(want, f.events.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// A sidecar (restartable init container) failing its liveness probe is
// restarted even in a Never pod, as sidecars always are.
func TestSyncPodRestartsSidecarOnProbeFailure(t *testing.T) {
	t.Parallel()
	probes := &fakeProbes{failed: map[string]prober.ProbeType{}}
	f, _ := newProbeFixture(t, probes)
	always := v1.ContainerRestartPolicyAlways
	pod := testPod(func(p *v1.Pod) {
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.InitContainers = []v1.Container{{Name: "side", Image: "img:1", RestartPolicy: &always}}
	})
	for range 2 { // the sidecar, then the app
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	f.calls()
	f.events.take()
	probes.set(func(p *fakeProbes) { p.failed["side"] = prober.Liveness })
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([]string{"StopContainer", "CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if got := f.events.take(); !slices.Contains(got, "Killing: Container side failed liveness probe, will be restarted") {
		t.Errorf("events %q", got)
	}
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	if n := st.InitContainerStatuses[0].RestartCount; n != 1 {
		t.Errorf("sidecar restart count %d, want 1", n)
	}
}

// TestSyncPodBackoffKeyedBySpec: a container whose spec changed while it was
// in back-off starts at once.
func TestSyncPodBackoffKeyedBySpec(t *testing.T) {
	t.Parallel()
	probes := &fakeProbes{failed: map[string]prober.ProbeType{}}
	f, _ := newProbeFixture(t, probes)
	pod := testPod()
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	probes.set(func(p *fakeProbes) { p.failed["app"] = prober.Liveness })
	// First probe kill: restarted at once (no earlier exit).
	if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
		t.Fatalf("first probe restart: %+v", res)
	}
	f.calls()
	// Second, right away: the earlier exit has no back-off entry yet, so
	// it starts, and the back-off (10s) begins.
	if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
		t.Fatalf("second probe restart: %+v", res)
	}
	if diff := cmp.Diff([]string{"StopContainer", "CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("second probe restart (-want +got):\n%s", diff)
	}
	// Third, within the back-off: killed, but not started.
	res := f.sync(t, pod)
	if res.Err != nil || res.RetryAfter <= 0 {
		t.Fatalf("third probe restart in back-off: %+v, want a RetryAfter", res)
	}
	if diff := cmp.Diff([]string{"StopContainer", "RemoveContainer"}, f.calls()); diff != "" {
		t.Errorf("third probe restart (-want +got):\n%s", diff)
	}
	// The same container with another spec (a new image) is a new back-off,
	// as the kubelet keys its back-off by the container's hash: it starts at
	// once; the old spec is still in its back-off.
	updated := pod.DeepCopy()
	updated.Spec.Containers[0].Env = append(updated.Spec.Containers[0].Env, v1.EnvVar{Name: "NEW", Value: "1"})
	probes.set(func(p *fakeProbes) { delete(p.failed, "app") })
	if res := f.sync(t, updated); res.Err != nil || res.RetryAfter != 0 {
		t.Fatalf("changed spec in the old spec's back-off: %+v, want a start", res)
	}
	if calls := f.calls(); !slices.Contains(calls, "StartContainer") {
		t.Errorf("changed spec in the old spec's back-off: calls %v, want a start", calls)
	}
}
