package podruntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/plan"
)

// fakeCRI is cri-api's fake runtime and image services as one Runtime.
type fakeCRI struct {
	*critest.FakeRuntimeService
	*critest.FakeImageService
}

// events records events as "Reason: message".
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) Event(_ runtime.Object, _, reason, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, reason+": "+msg)
}

func (e *events) Eventf(o runtime.Object, t, reason, f string, args ...any) {
	e.Event(o, t, reason, sprintf(f, args...))
}

func (e *events) AnnotatedEventf(o runtime.Object, _ map[string]string, t, reason, f string, args ...any) {
	e.Eventf(o, t, reason, f, args...)
}

func (e *events) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.got
	e.got = nil
	return g
}

// fakeCgroups records EnsurePod and RemovePod.
type fakeCgroups struct {
	mu      sync.Mutex
	ensured []types.UID
	removed []types.UID
}

func (f *fakeCgroups) EnsurePod(pod *v1.Pod) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, pod.UID)
	return "/kubepods/pod" + string(pod.UID), nil
}

func (f *fakeCgroups) RemovePod(uid types.UID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, uid)
	return nil
}

type fixture struct {
	m       *Manager
	rt      *critest.FakeRuntimeService
	img     *critest.FakeImageService
	events  *events
	cgroups *fakeCgroups
	dir     string
	pods
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{
		rt: critest.NewFakeRuntimeService(), img: critest.NewFakeImageService(),
		events: &events{}, cgroups: &fakeCgroups{}, dir: t.TempDir(),
	}
	f.img.SetFakeImages([]string{"img:1", "img:2"})
	resolv := filepath.Join(f.dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte(hostResolv), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{NodeName: "node1", PodsDir: filepath.Join(f.dir, "pods"), PodLogsDir: filepath.Join(f.dir, "logs"), HostIP: "192.168.1.2", MemoryCapacity: 4 << 30, CPUs: 2, DNS: resolv},
		Deps{Runtime: fakeCRI{f.rt, f.img}, Cgroups: f.cgroups, Logger: testLogger(t), Recorder: f.events})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// calls returns and clears the runtime calls made so far, without the
// read-only ones.
func (f *fixture) calls() []string {
	f.rt.Lock()
	defer f.rt.Unlock()
	var out []string
	for _, c := range f.rt.Called {
		switch c {
		case "ListPodSandbox", "ListContainers", "ContainerStatus", "PodSandboxStatus", "Version", "Status":
			continue
		}
		out = append(out, c)
	}
	f.rt.Called = nil
	return out
}

// status relists the runtime and returns the pod's status.
func (f *fixture) status(t *testing.T, uid types.UID) *PodStatus {
	t.Helper()
	all, err := f.m.Statuses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all[uid]
}

// exit marks the newest container named name (by creation, then attempt,
// as the relist orders them) exited with code, now.
func (f *fixture) exit(t *testing.T, name string, code int32) {
	t.Helper()
	f.rt.Lock()
	defer f.rt.Unlock()
	var newest *critest.FakeContainer
	for _, c := range f.rt.Containers {
		if c.Metadata.Name == name && (newest == nil || c.CreatedAt > newest.CreatedAt ||
			c.CreatedAt == newest.CreatedAt && c.Metadata.Attempt > newest.Metadata.Attempt) {
			newest = c
		}
	}
	if newest == nil {
		t.Fatalf("no container %s", name)
	}
	newest.State, newest.ExitCode, newest.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, code, time.Now().UnixNano()
}

func (f *fixture) sync(t *testing.T, pod *v1.Pod) Result {
	t.Helper()
	return f.syncPod(t.Context(), f.m, pod, f.status(t, pod.UID))
}

func stateOf(cs v1.ContainerStatus) string {
	switch {
	case cs.State.Running != nil:
		return "running"
	case cs.State.Terminated != nil:
		return "terminated:" + cs.State.Terminated.Reason
	case cs.State.Waiting != nil:
		return "waiting:" + cs.State.Waiting.Reason
	}
	return "?"
}

// TestSyncPodReportsWhatItStarted: a sync's Result names the sandbox it ran
// and the containers it started, the changes the next relist shows because
// of it; a sync that starts nothing names none.
func TestSyncPodReportsWhatItStarted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	res := f.sync(t, pod)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	st := f.status(t, pod.UID)
	if diff := cmp.Diff([]string{st.Sandboxes[0].Id, st.Containers[0].Id}, res.Started); diff != "" {
		t.Errorf("first sync: Result.Started (-want +got):\n%s", diff)
	}
	if res := f.sync(t, pod); res.Err != nil || len(res.Started) != 0 || len(res.Removed) != 0 {
		t.Errorf("second sync: %+v, want nothing started or removed", res)
	}
}

func TestSyncPodInitThenContainers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod(func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "img:1"}} })

	res := f.sync(t, pod)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([]string{"RunPodSandbox", "CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("first sync calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]types.UID{"uid-1"}, f.cgroups.ensured); diff != "" {
		t.Errorf("pod cgroup (-want +got):\n%s", diff)
	}
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	if st.Phase != v1.PodPending || stateOf(st.InitContainerStatuses[0]) != "running" || stateOf(st.ContainerStatuses[0]) != "waiting:PodInitializing" {
		t.Errorf("while init runs: phase %s, init %s, app %s", st.Phase, stateOf(st.InitContainerStatuses[0]), stateOf(st.ContainerStatuses[0]))
	}
	if !strings.HasPrefix(st.InitContainerStatuses[0].ContainerID, critest.FakeRuntimeName+"://") {
		t.Errorf("container ID %q does not name the runtime", st.InitContainerStatuses[0].ContainerID)
	}

	// A second sync while init runs does nothing.
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := f.calls(); len(got) != 0 {
		t.Errorf("sync while init runs made calls %v", got)
	}
	if len(f.cgroups.ensured) != 1 {
		t.Errorf("a sync with nothing to do made the pod cgroup again (%d times in all)", len(f.cgroups.ensured))
	}

	f.exit(t, "init", 0)
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([]string{"CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("after init calls (-want +got):\n%s", diff)
	}
	st = f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	if st.Phase != v1.PodRunning || stateOf(st.ContainerStatuses[0]) != "running" || st.PodIP != critest.FakePodSandboxIPs[0] {
		t.Errorf("after init: phase %s, app %s, IP %q", st.Phase, stateOf(st.ContainerStatuses[0]), st.PodIP)
	}
	want := []string{
		`Pulled: Container image "img:1" already present on machine`, "Created: Created container init", "Started: Started container init",
		`Pulled: Container image "img:1" already present on machine`, "Created: Created container app", "Started: Started container app",
	}
	if diff := cmp.Diff(want, f.events.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// The container got the pod's labels, the kubelet's annotations and its log path.
	f.rt.Lock()
	c := f.rt.Containers[critest.BuildContainerName(&runtimeapi.ContainerMetadata{Name: "app"}, critest.BuildSandboxName(&runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1"}))]
	f.rt.Unlock()
	if c == nil || c.Labels[criconfig.LabelContainerName] != "app" || c.Labels["app"] != "web" || c.Annotations[criconfig.AnnotationContainerHash] == "" {
		t.Errorf("container labels %v annotations %v", c.GetLabels(), c.GetAnnotations())
	}
}

// A sync that starts a sidecar stops there and says the pod needs another
// once it runs (Result.More): the agent's relist then sees only the sync's
// own changes, which alone would ask for no sync. A regular init container
// (whose exit is the relist's news) and the regular containers say nothing.
func TestSyncPodSidecarAsksForMore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sidecar := v1.ContainerRestartPolicyAlways
	pod := testPod(func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "img:1"}, {Name: "side", Image: "img:1", RestartPolicy: &sidecar}}
	})
	if res := f.sync(t, pod); res.Err != nil || res.More {
		t.Fatalf("first sync (the regular init container): %+v, want no error and More false", res)
	}
	f.calls()
	f.exit(t, "init", 0)
	res := f.sync(t, pod)
	if res.Err != nil || !res.More {
		t.Fatalf("the sync that starts the sidecar: %+v, want More", res)
	}
	if diff := cmp.Diff([]string{"CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("the sidecar's sync calls (-want +got):\n%s", diff)
	}
	res = f.sync(t, pod)
	if res.Err != nil || res.More || len(res.Started) != 1 {
		t.Errorf("the sync after it: %+v, want the app started and More false", res)
	}
	if st := f.status(t, pod.UID); len(st.Containers) != 3 {
		t.Errorf("%d containers, want init, side and app", len(st.Containers))
	}
}

func TestSyncPodCrashLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		pod := testPod()
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		f.calls()
		// First exit: restarted at once.
		f.exit(t, "app", 1)
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("first restart: %+v", res)
		}
		if diff := cmp.Diff([]string{"CreateContainer", "StartContainer"}, f.calls()); diff != "" {
			t.Errorf("first restart (-want +got):\n%s", diff)
		}
		// Second exit 3s later: 10s back-off, 7s left after 3 more.
		time.Sleep(3 * time.Second)
		f.exit(t, "app", 1)
		time.Sleep(3 * time.Second)
		res := f.sync(t, pod)
		if res.Err != nil || res.RetryAfter != 7*time.Second {
			t.Fatalf("in back-off: %+v, want RetryAfter 7s", res)
		}
		// It starts nothing; it removes the older of the two exited containers.
		if diff := cmp.Diff([]string{"RemoveContainer"}, f.calls()); diff != "" {
			t.Errorf("in back-off (-want +got):\n%s", diff)
		}
		st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		cs := st.ContainerStatuses[0]
		want := "back-off 10s restarting failed container=app pod=web_ns(uid-1)"
		if stateOf(cs) != "waiting:CrashLoopBackOff" || cs.State.Waiting.Message != want || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
			t.Errorf("status %s %v restarts %d last %v, want CrashLoopBackOff %q, 1 restart, a last state", stateOf(cs), cs.State.Waiting, cs.RestartCount, cs.LastTerminationState, want)
		}
		if st.Phase != v1.PodRunning {
			t.Errorf("phase %s, want Running", st.Phase)
		}
		time.Sleep(time.Second)
		if res := f.sync(t, pod); res.RetryAfter != 6*time.Second {
			t.Errorf("still in back-off: %+v, want RetryAfter 6s", res)
		}
		if diff := cmp.Diff([]string{"BackOff: Back-off restarting failed container app in pod web_ns(uid-1)"}, backoffEvents(f.events.take())); diff != "" {
			t.Errorf("one BackOff event per back-off (-want +got):\n%s", diff)
		}
		// After the back-off: restarted, and the next back-off doubles.
		time.Sleep(6 * time.Second)
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("after back-off: %+v", res)
		}
		if diff := cmp.Diff([]string{"CreateContainer", "StartContainer"}, f.calls()); diff != "" {
			t.Errorf("after back-off (-want +got):\n%s", diff)
		}
		f.exit(t, "app", 1)
		res = f.sync(t, pod)
		if res.RetryAfter != 20*time.Second {
			t.Errorf("third exit: RetryAfter %v, want 20s", res.RetryAfter)
		}
		if st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now()); st.ContainerStatuses[0].RestartCount != 2 {
			t.Errorf("restart count %d, want 2", st.ContainerStatuses[0].RestartCount)
		}
		if diff := cmp.Diff([]string{"BackOff: Back-off restarting failed container app in pod web_ns(uid-1)"}, backoffEvents(f.events.take())); diff != "" {
			t.Errorf("the next back-off's event (-want +got):\n%s", diff)
		}
	})
}

// TestSyncPodCrashLoopPolicy: the node's crash-loop back-off
// (crashLoopBackOff.maxContainerRestartPeriod 2s) holds a crashing container
// at most 2s, not the default 10s and more.
func TestSyncPodCrashLoopPolicy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.m.cfg.CrashLoop = plan.CrashLoopPolicy(false, 2*time.Second)
		pod := testPod()
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		f.exit(t, "app", 1)
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("first restart: %+v, want at once", res)
		}
		for i := range 3 {
			f.exit(t, "app", 1)
			if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 2*time.Second {
				t.Fatalf("exit %d: %+v, want RetryAfter 2s", i+2, res)
			}
			time.Sleep(2 * time.Second)
			f.calls()
			if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
				t.Fatalf("after the back-off of exit %d: %+v", i+2, res)
			}
			if diff := cmp.Diff([]string{"CreateContainer", "StartContainer"}, f.calls()); diff != "" {
				t.Errorf("restart %d (-want +got):\n%s", i+2, diff)
			}
		}
	})
}

// TestSyncPodCrashLoopReset: as the kubelet's, the back-off starts over
// when the container ran more than 10 minutes since its restart; the time
// it waited in back-off before does not count.
func TestSyncPodCrashLoopReset(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		pod := testPod()
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		f.exit(t, "app", 1)
		f.sync(t, pod) // restarted at once: the next exit waits 10s
		f.exit(t, "app", 1)
		if res := f.sync(t, pod); res.RetryAfter != 10*time.Second {
			t.Fatalf("second exit: %+v, want RetryAfter 10s", res)
		}
		time.Sleep(10 * time.Second)
		f.sync(t, pod) // restarted: the next exit waits 20s
		// It runs 9m55s: 10m05s since the last exit, less than 10m since
		// the restart.
		time.Sleep(10*time.Minute - 5*time.Second)
		f.exit(t, "app", 1)
		if res := f.sync(t, pod); res.RetryAfter != 20*time.Second {
			t.Fatalf("exit after 9m55s: %+v, want RetryAfter 20s", res)
		}
		time.Sleep(20 * time.Second)
		f.sync(t, pod)
		// It runs 10m01s: the back-off starts over, restarted at once.
		time.Sleep(10*time.Minute + time.Second)
		f.exit(t, "app", 1)
		f.calls()
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("exit after 10m01s: %+v, want a restart at once", res)
		}
		if calls := f.calls(); !slices.Contains(calls, "StartContainer") {
			t.Errorf("exit after 10m01s: calls %v, want a StartContainer", calls)
		}
	})
}

func backoffEvents(ev []string) []string {
	var out []string
	for _, e := range ev {
		if strings.HasPrefix(e, "BackOff:") {
			out = append(out, e)
		}
	}
	return out
}

func TestSyncPodSpecChangeRestarts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.calls()
	changed := testPod(func(p *v1.Pod) { p.Spec.Containers[0].Args = []string{"--new"} })
	if res := f.sync(t, changed); res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([]string{"StopContainer", "CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	st := f.podStatus(f.m, changed, f.status(t, pod.UID), time.Now())
	if cs := st.ContainerStatuses[0]; stateOf(cs) != "running" || cs.RestartCount != 1 {
		t.Errorf("after the change: %s, %d restarts", stateOf(cs), cs.RestartCount)
	}
}

func TestSyncPodSandboxRecreated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.calls()
	f.rt.Lock()
	for _, s := range f.rt.Sandboxes {
		s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	f.rt.Unlock()
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([]string{"StopContainer", "RunPodSandbox", "CreateContainer", "StartContainer"}, f.calls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	st := f.status(t, pod.UID)
	if len(st.Sandboxes) != 2 || st.Sandboxes[0].Metadata.Attempt != 1 {
		t.Errorf("sandboxes %v, want a new one with attempt 1", st.Sandboxes)
	}
	if ev := f.events.take(); !slices.Contains(ev, "SandboxChanged: Pod sandbox changed, it will be killed and re-created.") {
		t.Errorf("no SandboxChanged event in %v", ev)
	}
}

func TestSyncPodImages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		never := testPod(func(p *v1.Pod) {
			p.UID = "uid-never"
			p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = "absent:1", v1.PullNever
		})
		res := f.sync(t, never)
		if !errors.Is(res.Err, ErrImageNeverPull) {
			t.Errorf("Never policy: err %v, want ErrImageNeverPull", res.Err)
		}
		if st := f.podStatus(f.m, never, f.status(t, never.UID), time.Now()); stateOf(st.ContainerStatuses[0]) != "waiting:ErrImageNeverPull" {
			t.Errorf("Never policy: %s", stateOf(st.ContainerStatuses[0]))
		}

		pull := testPod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "registry.example/absent:1" })
		f.img.InjectError("PullImage", errors.New("no registry"))
		f.img.SetFakeImageSize(41901587)
		f.events.take()
		res = f.sync(t, pull)
		if res.Err == nil || res.RetryAfter != 10*time.Second {
			t.Errorf("failed pull: %+v, want an error and RetryAfter 10s", res)
		}
		if st := f.podStatus(f.m, pull, f.status(t, pull.UID), time.Now()); stateOf(st.ContainerStatuses[0]) != "waiting:ErrImagePull" {
			t.Errorf("failed pull: %s", stateOf(st.ContainerStatuses[0]))
		}
		time.Sleep(4 * time.Second)
		res = f.sync(t, pull)
		if res.Err != nil || res.RetryAfter != 6*time.Second {
			t.Errorf("pull in back-off: %+v, want no error and RetryAfter 6s", res)
		}
		if st := f.podStatus(f.m, pull, f.status(t, pull.UID), time.Now()); stateOf(st.ContainerStatuses[0]) != "waiting:ImagePullBackOff" {
			t.Errorf("pull in back-off: %s", stateOf(st.ContainerStatuses[0]))
		} else if msg, want := st.ContainerStatuses[0].State.Waiting.Message, `Back-off pulling image "registry.example/absent:1": ErrImagePull: no registry`; msg != want {
			// The kubelet's: the back-off repeats the failed pull's error.
			t.Errorf("pull in back-off: message %q, want %q", msg, want)
		}
		time.Sleep(time.Second)
		if res := f.sync(t, pull); res.RetryAfter != 5*time.Second {
			t.Errorf("pull still in back-off: %+v, want RetryAfter 5s", res)
		}
		time.Sleep(5 * time.Second)
		if res := f.sync(t, pull); res.Err != nil {
			t.Errorf("pull after back-off: %v", res.Err)
		}
		want := []string{
			`Pulling: Pulling image "registry.example/absent:1"`,
			`Failed: Failed to pull image "registry.example/absent:1": no registry`,
			`BackOff: Back-off pulling image "registry.example/absent:1"`,
			`Pulling: Pulling image "registry.example/absent:1"`,
			`Pulled: Successfully pulled image "registry.example/absent:1" in 0s (0s including waiting). Image size: 41901587 bytes.`,
			"Created: Created container app", "Started: Started container app",
		}
		if diff := cmp.Diff(want, f.events.take()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestKillAndRemovePod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sidecar := v1.ContainerRestartPolicyAlways
	grace := int64(20)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.InitContainers = []v1.Container{{Name: "side", Image: "img:1", RestartPolicy: &sidecar}}
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
		p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "v", MountPath: "/v"}}
	})
	for range 2 { // the sidecar, then (once it runs) the container
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	f.calls()
	f.events.take()
	st := f.status(t, pod.UID)
	if err := f.m.KillPod(t.Context(), pod, st, nil); err != nil {
		t.Fatal(err)
	}
	// The pre-stop hook, then the container, then its sidecar, then the sandbox.
	if diff := cmp.Diff([]string{"ExecSync", "StopContainer", "StopContainer", "StopPodSandbox"}, f.calls()); diff != "" {
		t.Errorf("kill calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Killing: Stopping container app", "Killing: Stopping container side"}, f.events.take(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("kill events (-want +got):\n%s", diff)
	}
	podDir := filepath.Join(f.dir, "pods", "uid-1")
	if _, err := os.Stat(filepath.Join(podDir, "volumes")); err != nil {
		t.Fatalf("the pod's volumes were not made: %v", err)
	}
	if err := f.m.RemovePod(t.Context(), f.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"RemoveContainer", "RemoveContainer", "RemovePodSandbox"}, f.calls()); diff != "" {
		t.Errorf("remove calls (-want +got):\n%s", diff)
	}
	for _, p := range []string{podDir, filepath.Join(f.dir, "logs", "ns_web_uid-1")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
	if diff := cmp.Diff([]types.UID{"uid-1"}, f.cgroups.removed); diff != "" {
		t.Errorf("cgroups removed (-want +got):\n%s", diff)
	}
	if all, _ := f.m.Statuses(t.Context()); len(all) != 0 {
		t.Errorf("after RemovePod the runtime still holds %v", all)
	}
}

func TestKillOrphanUsesRecordedGraceAndHook(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	grace := int64(9)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
	})
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	st := f.status(t, pod.UID)
	if got := podGrace(nil, st, nil); got != 9 {
		t.Errorf("orphan grace %d, want the recorded 9", got)
	}
	if h := preStopHook(nil, st.Containers[0]); h == nil || h.Exec == nil || h.Exec.Command[0] != "drain" {
		t.Errorf("orphan pre-stop hook %v", h)
	}
	f.calls()
	if err := f.m.KillPod(t.Context(), nil, st, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ExecSync", "StopContainer", "StopPodSandbox"}, f.calls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestStatusesGroupsOurObjects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := testPod()
	b := testPod(func(p *v1.Pod) { p.Name, p.UID = "other", "uid-2" })
	for _, p := range []*v1.Pod{a, b} {
		if res := f.sync(t, p); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	// A sandbox and a container that are not ours.
	if _, err := f.rt.RunPodSandbox(context.Background(), &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "foreign", Uid: "x"}}, ""); err != nil {
		t.Fatal(err)
	}
	all, err := f.m.Statuses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[types.UID]string{}
	for uid, p := range all {
		got[uid] = p.Namespace + "/" + p.Name + " " + strings.Join(p.IPs, ",") + " " + itoa(len(p.Sandboxes)) + "sb " + itoa(len(p.Containers)) + "c"
	}
	want := map[types.UID]string{"uid-1": "ns/web 192.168.192.168 1sb 1c", "uid-2": "ns/other 192.168.192.168 1sb 1c"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	rt := fakeCRI{critest.NewFakeRuntimeService(), critest.NewFakeImageService()}
	tests := []struct {
		name string
		cfg  Config
		deps Deps
		want string
	}{
		{"no runtime", Config{MemoryCapacity: 1, PodsDir: "/p", PodLogsDir: "/l"}, Deps{}, "podruntime: Deps.Runtime is nil"},
		{"no memory", Config{PodsDir: "/p", PodLogsDir: "/l"}, Deps{Runtime: rt}, "podruntime: Config.MemoryCapacity 0 is not positive"},
		{"relative pods dir", Config{MemoryCapacity: 1, PodsDir: "p", PodLogsDir: "/l"}, Deps{Runtime: rt}, `podruntime: Config.PodsDir "p" is not an absolute path`},
	}
	for _, tc := range tests {
		if _, err := New(tc.cfg, tc.deps); err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestStatusesAskOnlyAboutChanges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	relist := func() []string {
		t.Helper()
		f.rt.Lock()
		f.rt.Called = nil
		f.rt.Unlock()
		st := f.status(t, pod.UID)
		if len(st.Containers) != 1 || len(st.Sandboxes) != 1 {
			t.Fatalf("status %v", st)
		}
		f.rt.Lock()
		defer f.rt.Unlock()
		return f.rt.Called
	}
	relist()
	if diff := cmp.Diff([]string{"ListPodSandbox", "ListContainers"}, relist()); diff != "" {
		t.Errorf("a relist of a running pod (-want +got):\n%s", diff)
	}
	f.exit(t, "app", 0)
	if diff := cmp.Diff([]string{"ListPodSandbox", "ListContainers", "ContainerStatus"}, relist()); diff != "" {
		t.Errorf("a relist after an exit (-want +got):\n%s", diff)
	}
	if err := f.m.KillPod(t.Context(), pod, f.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ListPodSandbox", "ListContainers", "PodSandboxStatus"}, relist()); diff != "" {
		t.Errorf("a relist after the sandbox stopped (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ListPodSandbox", "ListContainers"}, relist()); diff != "" {
		t.Errorf("a relist of a stopped pod (-want +got):\n%s", diff)
	}
}

// TestStatusesReadAKilledContainerAgain: a container killed by SIGKILL
// (exit code 137) whose reason is not OOMKilled is read again at every relist
// for oomReasonWait after a relist first saw it, since containerd sets
// OOMKilled once its event loop has handled the OOM event (CI saw two relists
// in a row read Error, milliseconds apart, and e2e TestOOMKilled failed);
// then it is cached like any exited container, whatever its reason.
func TestStatusesReadAKilledContainerAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		pod := testPod(func(p *v1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "other", Image: "img:1"})
		})
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		f.exit(t, "app", 137)
		f.exit(t, "other", 137)
		setReason := func(name, r string) {
			f.rt.Lock()
			defer f.rt.Unlock()
			for _, c := range f.rt.Containers {
				if c.Metadata.Name == name {
					c.Reason = r
				}
			}
		}
		setReason("app", "Error")
		setReason("other", "Error")
		// relist returns each container's reason and how many times the
		// relist asked the runtime about a container.
		relist := func() (map[string]string, int) {
			t.Helper()
			f.rt.Lock()
			f.rt.Called = nil
			f.rt.Unlock()
			st := f.status(t, pod.UID)
			reasons := map[string]string{}
			for _, c := range st.Containers {
				reasons[c.GetMetadata().GetName()] = c.Reason
			}
			f.rt.Lock()
			defer f.rt.Unlock()
			n := 0
			for _, c := range f.rt.Called {
				if c == "ContainerStatus" {
					n++
				}
			}
			return reasons, n
		}
		for i := range 3 { // relists in a burst: each reads both again
			if r, n := relist(); r["app"] != "Error" || n != 2 {
				t.Fatalf("relist %d right after the kill: reasons %v, %d container reads; want Error, 2", i, r, n)
			}
		}
		time.Sleep(oomReasonWait - time.Second)
		setReason("app", "OOMKilled") // the runtime handled app's OOM event
		if r, n := relist(); r["app"] != "OOMKilled" || r["other"] != "Error" || n != 2 {
			t.Errorf("relist %v after the first: reasons %v, %d container reads; want app OOMKilled, other Error, 2", oomReasonWait-time.Second, r, n)
		}
		if r, n := relist(); r["app"] != "OOMKilled" || n != 1 {
			t.Errorf("next relist: reasons %v, %d container reads; want app OOMKilled and cached, other read again", r, n)
		}
		time.Sleep(time.Second)
		if r, n := relist(); r["other"] != "Error" || n != 1 {
			t.Errorf("relist %v after the first: reasons %v, %d container reads; want other Error, read a last time", oomReasonWait, r, n)
		}
		if r, n := relist(); r["other"] != "Error" || n != 0 {
			t.Errorf("relist past %v: reasons %v, %d container reads; want Error kept, nothing read", oomReasonWait, r, n)
		}
	})
}

func TestAdoptionRestartsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sidecar := v1.ContainerRestartPolicyAlways
	pod := testPod(func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "img:1"}, {Name: "side", Image: "img:1", RestartPolicy: &sidecar}}
	})
	f.sync(t, pod)
	f.exit(t, "init", 0)
	f.sync(t, pod)
	f.sync(t, pod)
	// A new manager, as after an agent restart, over the same runtime.
	m2, err := New(f.m.cfg, Deps{Runtime: fakeCRI{f.rt, f.img}, Logger: testLogger(t), Recorder: f.events})
	if err != nil {
		t.Fatal(err)
	}
	f.calls()
	var adopter pods // a new agent: nothing kept
	all, err := m2.Statuses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res := adopter.syncPod(t.Context(), m2, pod, all[pod.UID]); res.Err != nil || res.RetryAfter != 0 {
		t.Fatalf("adopting sync: %+v", res)
	}
	if got := f.calls(); len(got) != 0 {
		t.Errorf("adopting a running pod made calls %v", got)
	}
	st := adopter.podStatus(m2, pod, all[pod.UID], time.Now())
	if st.Phase != v1.PodRunning || st.ContainerStatuses[0].RestartCount != 0 || !st.ContainerStatuses[0].Ready {
		t.Errorf("adopted pod: phase %s, app %+v", st.Phase, st.ContainerStatuses[0])
	}
}

func TestConditionTransitionTimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	t1 := time.Now()
	f.podStatus(f.m, pod, nil, t1) // nothing yet: not ready
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	t2 := t1.Add(time.Minute)
	f.podStatus(f.m, pod, f.status(t, pod.UID), t2)
	t3 := t2.Add(time.Minute)
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), t3)
	got := map[v1.PodConditionType]time.Time{}
	for _, c := range st.Conditions {
		got[c.Type] = c.LastTransitionTime.Time
	}
	want := map[v1.PodConditionType]time.Time{
		v1.PodReadyToStartContainers: t2, // became true at t2
		v1.PodInitialized:            t1, // true from the start
		v1.ContainersReady:           t2,
		v1.PodReady:                  t2,
		v1.PodScheduled:              t1, // true from the start
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApproxTime(time.Second)); diff != "" {
		t.Errorf("transition times (-want +got):\n%s", diff)
	}
}

// TestConditionTransitionTimesFromThePod: the first status of a pod keeps
// the transition times of the conditions the pod came with where their
// status is the same (the scheduler's PodScheduled), as the kubelet does
// with the API server's status of a pod it has not seen.
func TestConditionTransitionTimesFromThePod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now()
	scheduled := metav1.NewTime(now.Add(-time.Hour))
	pod := testPod(func(p *v1.Pod) {
		p.Status.Conditions = []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: scheduled},
			{Type: v1.PodInitialized, Status: v1.ConditionFalse, LastTransitionTime: scheduled},
		}
	})
	st := f.podStatus(f.m, pod, nil, now)
	got := map[v1.PodConditionType]time.Time{}
	for _, c := range st.Conditions {
		got[c.Type] = c.LastTransitionTime.Time
	}
	want := map[v1.PodConditionType]time.Time{
		v1.PodReadyToStartContainers: now,
		v1.PodInitialized:            now, // False on the server, True here
		v1.ContainersReady:           now,
		v1.PodReady:                  now,
		v1.PodScheduled:              scheduled.Time,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("transition times (-want +got):\n%s", diff)
	}
}

func TestRemoveOldRemovesItsFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	logFile := filepath.Join(f.m.cfg.PodLogsDir, "ns_web_uid-1", "app", "0.log")
	termFile := filepath.Join(f.m.cfg.PodsDir, "uid-1", "containers", "app", "abcd")
	outside := filepath.Join(f.dir, "elsewhere.log")
	for _, p := range []string{logFile, termFile, outside} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := &runtimeapi.ContainerStatus{Id: "old", LogPath: logFile, Annotations: map[string]string{criconfig.AnnotationTermMsgPath: "/dev/termination-log"},
		Mounts: []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: termFile}}}
	other := &runtimeapi.ContainerStatus{Id: "other", LogPath: outside}
	var res Result
	f.m.removeOld(t.Context(), &PodStatus{UID: "uid-1", Containers: []*runtimeapi.ContainerStatus{old, other}}, []string{"old", "other"}, &res)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([]string{"old", "other"}, res.Removed); diff != "" {
		t.Errorf("Result.Removed (-want +got):\n%s", diff)
	}
	for _, p := range []string{logFile, termFile} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a log file outside PodLogsDir was removed: %v", err)
	}
}

// stopRecorder is fakeCRI recording StopContainer's timeouts.
type stopRecorder struct {
	fakeCRI
	mu       sync.Mutex
	timeouts []int64
}

func (s *stopRecorder) StopContainer(ctx context.Context, id string, timeout int64) error {
	s.mu.Lock()
	s.timeouts = append(s.timeouts, timeout)
	s.mu.Unlock()
	return s.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

func TestKillPodGrace(t *testing.T) {
	t.Parallel()
	zero, twenty := int64(0), int64(20)
	tests := []struct {
		name     string
		podGrace *int64
		override *int64
		orphan   bool
		want     int64
	}{
		{name: "pod default", want: 30},
		{name: "pod's own", podGrace: &twenty, want: 20},
		{name: "override", podGrace: &twenty, override: &zero, want: minGracePeriod},
		{name: "orphan: recorded on the container", podGrace: &twenty, orphan: true, want: 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			rec := &stopRecorder{fakeCRI: fakeCRI{f.rt, f.img}}
			m, err := New(f.m.cfg, Deps{Runtime: rec, Logger: testLogger(t), Recorder: f.events})
			if err != nil {
				t.Fatal(err)
			}
			pod := testPod(func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = tc.podGrace })
			all, _ := m.Statuses(t.Context())
			if res := f.syncPod(t.Context(), m, pod, all[pod.UID]); res.Err != nil {
				t.Fatal(res.Err)
			}
			all, _ = m.Statuses(t.Context())
			kill := pod
			if tc.orphan {
				kill = nil
			}
			if err := m.KillPod(t.Context(), kill, all[pod.UID], tc.override); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int64{tc.want}, rec.timeouts); diff != "" {
				t.Errorf("StopContainer timeouts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncPodFQDNTooLong: a pod whose FQDN, which setHostnameAsFQDN makes
// its hostname, is longer than the kernel's 64 bytes gets no sandbox but a
// FailedCreatePodSandBox event with the kubelet's message at each sync, and
// stays Pending (node e2e "a pod configured to set FQDN as hostname will
// remain in Pending state generating FailedCreatePodSandBox events").
func TestSyncPodFQDNTooLong(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod(func(p *v1.Pod) {
		p.Name = "hostfqdnveryveryveryverylongforfqdntobemorethan64bytes-123456"
		p.Spec.Subdomain = "t"
		p.Spec.SetHostnameAsFQDN = new(true)
	})
	for range 2 {
		if res := f.sync(t, pod); res.Err == nil {
			t.Fatal("sync succeeded")
		}
		if got := f.calls(); slices.Contains(got, "RunPodSandbox") {
			t.Errorf("calls %v: a sandbox was made", got)
		}
		want := "FailedCreatePodSandBox: Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN " +
			"hostfqdnveryveryveryverylongforfqdntobemorethan64bytes-123456.t.ns.svc. is too long (64 characters is the max, 71 characters requested)"
		if diff := cmp.Diff([]string{want}, f.events.take()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	}
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	if st.Phase != v1.PodPending {
		t.Errorf("phase %s, want Pending", st.Phase)
	}
	if !slices.ContainsFunc(st.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue
	}) {
		t.Errorf("conditions %v: no PodScheduled=True", condSummary(st.Conditions))
	}
}

// rroCRI is fakeCRI whose Status lists the default runtime handler with
// recursive read-only mounts, and which keeps the mounts of every container
// it creates.
type rroCRI struct {
	fakeCRI
	mu     sync.Mutex
	mounts map[string][]*runtimeapi.Mount
}

func (r *rroCRI) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{RuntimeHandlers: []*runtimeapi.RuntimeHandler{
		{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{}},
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
	}}, nil
}

func (r *rroCRI) CreateContainer(ctx context.Context, sb string, cfg *runtimeapi.ContainerConfig, sbCfg *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.mounts[cfg.GetMetadata().GetName()] = cfg.GetMounts()
	r.mu.Unlock()
	return r.fakeCRI.CreateContainer(ctx, sb, cfg, sbCfg)
}

// rroPod has a container mounting an emptyDir read-only with
// recursiveReadOnly mode.
func rroPod(mode v1.RecursiveReadOnlyMode) *v1.Pod {
	return testPod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "mnt", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "mnt", MountPath: "/mnt", ReadOnly: true, RecursiveReadOnly: &mode}}
	})
}

// TestRecursiveReadOnlyUnsupported: on a runtime that lists no handler with
// recursive read-only mounts (containerd 1.6), a container asking for them
// is not created: it waits with CreateContainerConfigError and the
// kubelet's message, and a Failed event says so.
func TestRecursiveReadOnlyUnsupported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := rroPod(v1.RecursiveReadOnlyEnabled)
	if res := f.sync(t, pod); res.Err == nil {
		t.Fatal("sync succeeded")
	}
	if diff := cmp.Diff([]string{"RunPodSandbox"}, f.calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	const msg = `failed to resolve recursive read-only mode: volume "mnt" requested recursive read-only mode, but it is not supported by the runtime`
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	w := st.ContainerStatuses[0].State.Waiting
	if st.Phase != v1.PodPending || w == nil || w.Reason != "CreateContainerConfigError" || w.Message != msg {
		t.Errorf("phase %s, waiting %+v; want Pending, CreateContainerConfigError %q", st.Phase, w, msg)
	}
	if ev := f.events.take(); !slices.Contains(ev, "Failed: Error: "+msg) {
		t.Errorf("events %q lack the Failed event", ev)
	}
	disabled := v1.RecursiveReadOnlyDisabled
	want := []v1.VolumeMountStatus{{Name: "mnt", MountPath: "/mnt", ReadOnly: true, RecursiveReadOnly: &disabled}}
	if diff := cmp.Diff(want, st.ContainerStatuses[0].VolumeMounts); diff != "" {
		t.Errorf("volume mount status (-want +got):\n%s", diff)
	}
	// IfPossible runs, plain read-only.
	pod = rroPod(v1.RecursiveReadOnlyIfPossible)
	pod.UID = "uid-2"
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestRecursiveReadOnlySupported: a runtime whose default handler has the
// feature gets the mount recursively read-only, for Enabled and IfPossible.
func TestRecursiveReadOnlySupported(t *testing.T) {
	t.Parallel()
	for _, mode := range []v1.RecursiveReadOnlyMode{v1.RecursiveReadOnlyEnabled, v1.RecursiveReadOnlyIfPossible} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			rt := &rroCRI{fakeCRI: fakeCRI{f.rt, f.img}, mounts: map[string][]*runtimeapi.Mount{}}
			m, err := New(f.m.cfg, Deps{Runtime: rt, Logger: testLogger(t), Recorder: f.events})
			if err != nil {
				t.Fatal(err)
			}
			pod := rroPod(mode)
			all, err := m.Statuses(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if res := f.syncPod(t.Context(), m, pod, all[pod.UID]); res.Err != nil {
				t.Fatal(res.Err)
			}
			rt.mu.Lock()
			mounts := rt.mounts["app"]
			rt.mu.Unlock()
			i := slices.IndexFunc(mounts, func(m *runtimeapi.Mount) bool { return m.ContainerPath == "/mnt" })
			if i < 0 || !mounts[i].Readonly || !mounts[i].RecursiveReadOnly {
				t.Errorf("mounts %v: want /mnt read-only and recursively so", mounts)
			}
			st := f.podStatus(m, pod, nil, time.Now())
			if vm := st.ContainerStatuses[0].VolumeMounts; len(vm) != 1 || vm[0].RecursiveReadOnly == nil || *vm[0].RecursiveReadOnly != v1.RecursiveReadOnlyEnabled {
				t.Errorf("volume mount status %+v, want Enabled", vm)
			}
		})
	}
}

// TestSyncPodOOMGroup: Config.OOMGroup (cgroup v2 without
// singleProcessOOMKill) reaches the runtime as memory.oom.group=1 in the
// container's unified resources, beside the swap limit there; without it
// there is none.
func TestSyncPodOOMGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		on   bool
		swap Swap
		want map[string]string
	}{
		{"on", true, Swap{}, map[string]string{"memory.oom.group": "1"}},
		{"off", false, Swap{}, nil},
		{"on, with NoSwap on v2", true, Swap{Controller: true, CgroupV2: true}, map[string]string{"memory.oom.group": "1", "memory.swap.max": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.m.cfg.OOMGroup, f.m.cfg.Swap = tc.on, tc.swap
			if res := f.sync(t, testPod()); res.Err != nil {
				t.Fatal(res.Err)
			}
			want := tc.want
			f.rt.Lock()
			defer f.rt.Unlock()
			if len(f.rt.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(f.rt.Containers))
			}
			for _, c := range f.rt.Containers {
				if diff := cmp.Diff(want, c.LinuxResources.GetUnified()); diff != "" {
					t.Errorf("unified resources (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// sandboxStatusFails is the fake runtime, but PodSandboxStatus of one
// sandbox fails (as containerd 1.6's did when it could not remove a netns
// file).
type sandboxStatusFails struct {
	fakeCRI
	id string
}

func (r sandboxStatusFails) PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	if id == r.id {
		return nil, errors.New("failed to remove netns file")
	}
	return r.fakeCRI.PodSandboxStatus(ctx, id, verbose)
}

// TestStatusesSurviveOnePodsFailure: one sandbox whose status the runtime
// cannot give does not fail the relist (it failed the whole relist, so the
// agent never counted the runtime as listed and stayed unhealthy): the other
// pods are listed, the failing one shows its previous relist's status with
// InspectErr, a pod first seen failing shows what was seen, and once the
// runtime answers again the pod is listed as usual.
func TestStatusesSurviveOnePodsFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := testPod()
	b := testPod(func(p *v1.Pod) { p.Name, p.UID = "other", "uid-2" })
	for _, p := range []*v1.Pod{a, b} {
		if res := f.sync(t, p); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	before := f.status(t, a.UID)
	failing := before.Sandboxes[0].Id
	m, err := New(f.m.cfg, Deps{Runtime: sandboxStatusFails{fakeCRI{f.rt, f.img}, failing}, Logger: testLogger(t), Recorder: f.events})
	if err != nil {
		t.Fatal(err)
	}
	// A manager that never listed the pod: what it saw, with the error.
	all, err := m.Statuses(t.Context())
	if err != nil {
		t.Fatalf("Statuses failed for one pod's sandbox: %v", err)
	}
	if got := all[a.UID]; got == nil || got.InspectErr == nil || !strings.Contains(got.InspectErr.Error(), "sandbox "+failing+": failed to remove netns file") || len(got.Sandboxes) != 0 {
		t.Errorf("failing pod first seen: %+v", got)
	}
	if got := all[b.UID]; got == nil || got.InspectErr != nil || len(got.Sandboxes) != 1 || len(got.Containers) != 1 {
		t.Errorf("the other pod: %+v", got)
	}
	// The manager that listed it before: the previous relist's status.
	f.m.rt = sandboxStatusFails{fakeCRI{f.rt, f.img}, failing}
	f.m.mu.Lock()
	delete(f.m.sbCache, failing) // asked again, as after a state change
	f.m.mu.Unlock()
	all, err = f.m.Statuses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := all[a.UID]
	if got == nil || got.InspectErr == nil || len(got.Sandboxes) != 1 || got.Sandboxes[0].Id != failing ||
		len(got.Containers) != 1 || got.Containers[0].State != before.Containers[0].State {
		t.Errorf("failing pod, listed before: %+v (before: %+v)", got, before)
	}
	// The runtime answers again.
	f.m.rt = fakeCRI{f.rt, f.img}
	all, err = f.m.Statuses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := all[a.UID]; got == nil || got.InspectErr != nil || len(got.Sandboxes) != 1 || len(got.Containers) != 1 {
		t.Errorf("after the runtime recovered: %+v", got)
	}
}
