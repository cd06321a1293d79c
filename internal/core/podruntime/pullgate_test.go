package podruntime

import (
	"context"
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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPullGate: n slots let n holders in at once and the next waits for a
// release, in the order they asked; no slots bound nothing; a waiter whose
// context ends takes nothing.
func TestPullGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		slots    int
		waiters  int
		wantLive []int // holders after each release of the first holder (the first: before any)
	}{
		{name: "serialized", slots: 1, waiters: 3, wantLive: []int{1, 1, 1}},
		{name: "two at once", slots: 2, waiters: 3, wantLive: []int{2, 2, 1}},
		{name: "no bound", slots: 0, waiters: 3, wantLive: []int{3, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := newPullGate(tc.slots)
				var mu sync.Mutex
				var live []int // holders, in the order they got in
				var order []int
				releases := make([]chan struct{}, tc.waiters)
				for i := range tc.waiters {
					releases[i] = make(chan struct{})
					go func() {
						release, err := g.acquire(t.Context())
						if err != nil {
							t.Errorf("waiter %d: %v", i, err)
							return
						}
						mu.Lock()
						live = append(live, i)
						order = append(order, i)
						mu.Unlock()
						<-releases[i]
						mu.Lock()
						live = slices.DeleteFunc(live, func(j int) bool { return j == i })
						mu.Unlock()
						release()
					}()
					synctest.Wait() // waiter i asks before waiter i+1
				}
				var got []int
				for range tc.waiters {
					synctest.Wait()
					mu.Lock()
					got = append(got, len(live))
					first := live[0]
					mu.Unlock()
					close(releases[first])
				}
				synctest.Wait()
				if diff := cmp.Diff(tc.wantLive, got); diff != "" {
					t.Errorf("holders at once (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]int{0, 1, 2}, order); diff != "" {
					t.Errorf("order of entry (-want +got):\n%s", diff)
				}
			})
		})
	}

	t.Run("context ends while waiting", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			g := newPullGate(1)
			release, err := g.acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() {
				_, err := g.acquire(ctx)
				done <- err
			}()
			synctest.Wait()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("acquire with its context ended: %v, want context.Canceled", err)
			}
			release()
			// The cancelled waiter took no slot: the next gets in at once.
			r2, err := g.acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			r2()
		})
	})
}

func TestPulledMessage(t *testing.T) {
	t.Parallel()
	got := pulledMessage("busybox:1.28", 39356789*time.Microsecond, 49356123456*time.Nanosecond, 41901587)
	want := `Successfully pulled image "busybox:1.28" in 39.356s (49.356s including waiting). Image size: 41901587 bytes.`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// The upstream node e2e specs (image_pull_test.go,
	// getDurationsFromPulledEventMsg) split it on spaces into 13 words and
	// parse the 6th and the 7th without its "(".
	words := strings.Split(got, " ")
	if len(words) != 13 {
		t.Fatalf("%d words, want 13", len(words))
	}
	pull, err1 := time.ParseDuration(words[5])
	total, err2 := time.ParseDuration(words[6][1:])
	if err1 != nil || err2 != nil || pull != 39356*time.Millisecond || total != 49356*time.Millisecond {
		t.Errorf("parsed %v, %v (%v, %v); want 39.356s and 49.356s", pull, total, err1, err2)
	}
}

// slowPulls is the fake runtime whose pulls take pullTime each, and which
// counts the pulls running at once.
type slowPulls struct {
	fakeCRI
	pullTime time.Duration
	mu       sync.Mutex
	running  int
	most     int
}

func (s *slowPulls) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	time.Sleep(s.pullTime) // the pull's own time, on the bubble's clock
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	return s.fakeCRI.PullImage(ctx, image, auth, sb)
}

// TestSyncPodPullSlots: two pods synced at once, each pulling its own
// image (imagePullPolicy Always) for 20 s: with one pull slot (serialized,
// the kubelet's default) the second pull waits for the first, and its
// Pulled event says so: "in 20s (40s including waiting)", as the upstream
// spec "serialize image pull should be waiting more" finds the kubelet's;
// with two slots or no bound both pull at once, "in 20s (20s including
// waiting)" ("parallel image pull ... should pull immediately").
func TestSyncPodPullSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		slots     int
		wantMost  int
		wantTimes []string // the Pulled events' durations, sorted
	}{
		{name: "serialized", slots: 1, wantMost: 1, wantTimes: []string{"in 20s (20s including waiting).", "in 20s (40s including waiting)."}},
		{name: "maxParallelImagePulls 2", slots: 2, wantMost: 2, wantTimes: []string{"in 20s (20s including waiting).", "in 20s (20s including waiting)."}},
		{name: "no bound", slots: 0, wantMost: 2, wantTimes: []string{"in 20s (20s including waiting).", "in 20s (20s including waiting)."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				rt := &slowPulls{fakeCRI: fakeCRI{f.rt, f.img}, pullTime: 20 * time.Second}
				m, err := New(Config{NodeName: "node1", PodsDir: filepath.Join(f.dir, "pods"), PodLogsDir: filepath.Join(f.dir, "logs"),
					MemoryCapacity: 4 << 30, CPUs: 2, DNS: filepath.Join(f.dir, "resolv.conf"), MaxParallelImagePulls: tc.slots},
					Deps{Runtime: rt, Logger: testLogger(t), Recorder: f.events})
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for i, image := range []string{"img:1", "img:2"} {
					pod := testPod(func(p *v1.Pod) {
						p.Name, p.UID = "pod"+itoa(i), types.UID("uid-"+itoa(i))
						p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = image, v1.PullAlways
					})
					wg.Go(func() {
						if res := f.syncPod(t.Context(), m, pod, nil); res.Err != nil {
							t.Errorf("sync %s: %v", pod.Name, res.Err)
						}
					})
				}
				wg.Wait()
				if rt.most != tc.wantMost {
					t.Errorf("%d pulls at once, want %d", rt.most, tc.wantMost)
				}
				var pulling int
				var times []string
				for _, e := range f.events.take() {
					switch {
					case strings.HasPrefix(e, "Pulling: "):
						pulling++
					case strings.HasPrefix(e, "Pulled: "):
						_, after, _ := strings.Cut(e, `" `)
						times = append(times, strings.TrimSuffix(after, " Image size: 0 bytes."))
					}
				}
				slices.Sort(times)
				if pulling != 2 {
					t.Errorf("%d Pulling events, want 2", pulling)
				}
				if diff := cmp.Diff(tc.wantTimes, times); diff != "" {
					t.Errorf("Pulled events (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestNewRefusesNegativePullSlots(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := New(Config{PodsDir: filepath.Join(f.dir, "pods"), PodLogsDir: filepath.Join(f.dir, "logs"), MemoryCapacity: 1 << 30,
		MaxParallelImagePulls: -1}, Deps{Runtime: fakeCRI{f.rt, f.img}})
	if err == nil || !strings.Contains(err.Error(), "MaxParallelImagePulls -1") {
		t.Errorf("New with MaxParallelImagePulls -1: %v, want an error naming it", err)
	}
}
