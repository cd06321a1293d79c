package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
)

// failingPulls is cri-api's fake runtime whose every image pull fails, as
// the upstream node e2e specs' CRI proxy makes them fail.
type failingPulls struct {
	*critest.FakeRuntimeService
	*critest.FakeImageService
}

func (failingPulls) PullImage(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig, *runtimeapi.PodSandboxConfig) (string, error) {
	return "", errors.New("PullImage failed")
}

// timedEvents records each event's reason and message with its time.
type timedEvents struct {
	mu  sync.Mutex // guards got
	got []timedEvent
}

type timedEvent struct {
	at              time.Time
	reason, message string
}

func (e *timedEvents) Event(_ runtime.Object, _, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, timedEvent{at: time.Now(), reason: reason, message: message})
}
func (e *timedEvents) Eventf(o runtime.Object, eventtype, reason, f string, args ...any) {
	e.Event(o, eventtype, reason, fmt.Sprintf(f, args...))
}
func (e *timedEvents) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, f string, args ...any) {
	e.Eventf(o, eventtype, reason, f, args...)
}

// TestImagePullBackoffRetries: through the sync loop and the real pod
// runtime, a pull that always fails is tried again after the kubelet's
// image back-off, 10 s doubling (10, 20, 40 s: pulls at 0, 10, 30, 70 s), so
// that 90 s on, as the upstream spec "Image pull retry backs off on error"
// looks, there were 4 pulls (it wants 3 to 7); each failure is a Failed
// event with the runtime's error, and meanwhile the container waits in
// ImagePullBackOff with the failed pull's error in its message, as the
// kubelet's.
func TestImagePullBackoffRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		img := critest.NewFakeImageService()
		img.SetFakeImages([]string{"img"})
		ev := &timedEvents{}
		pr, err := podruntime.New(podruntime.Config{PodsDir: filepath.Join(dir, "pods"), PodLogsDir: filepath.Join(dir, "logs"),
			MemoryCapacity: 1 << 30, DNS: filepath.Join(dir, "resolv.conf"), MaxParallelImagePulls: 1},
			podruntime.Deps{Runtime: failingPulls{critest.NewFakeRuntimeService(), img}, Logger: testLogger(t), Recorder: ev})
		if err != nil {
			t.Fatal(err)
		}
		a := newTestAgent(t, Config{}, Deps{Runtime: pr, Recorder: ev})
		stop := start(t, a)
		defer stop()
		pod := testPod("web", "u1", 0)
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
		began := time.Now()
		if err := a.SetPods(t.Context(), "file", []*v1.Pod{pod}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(90 * time.Second)
		synctest.Wait()

		var pulls []time.Duration
		var failed []string
		ev.mu.Lock()
		for _, e := range ev.got {
			switch e.reason {
			case "Pulling":
				pulls = append(pulls, e.at.Sub(began))
			case "Failed":
				failed = append(failed, e.message)
			}
		}
		ev.mu.Unlock()
		want := []time.Duration{0, 10 * time.Second, 30 * time.Second, 70 * time.Second}
		if len(pulls) != len(want) {
			t.Fatalf("pulls at %v, want at %v", pulls, want)
		}
		for i := range want {
			// The loop may take up to its next tick to start a sync due.
			if pulls[i] < want[i] || pulls[i] > want[i]+time.Second {
				t.Errorf("pulls at %v, want at %v (each up to 1s later)", pulls, want)
				break
			}
		}
		wantFailed := `Failed to pull image "img": PullImage failed`
		if diff := cmp.Diff([]string{wantFailed, wantFailed, wantFailed, wantFailed}, failed); diff != "" {
			t.Errorf("Failed events (-want +got):\n%s", diff)
		}
		st, _ := a.GetPodStatus("u1")
		if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Waiting == nil {
			t.Fatalf("container statuses %+v, want one waiting", st.ContainerStatuses)
		}
		w := st.ContainerStatuses[0].State.Waiting
		if want := (v1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "img": ErrImagePull: PullImage failed`}); *w != want {
			t.Errorf("waiting %+v, want %+v", *w, want)
		}
	})
}
