package apipods

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/podsource"
	"github.com/nodekeeper/nodekeeper/qos"
)

const node = "node1"

// fakeAgent is an Agent whose table the test sets; it records the sets the
// source hands it.
type fakeAgent struct {
	mu sync.Mutex // guards the fields below
	// pods is what Pods returns.
	pods []*v1.Pod
	// terminated, cleaned and deleted answer the predicates, by UID.
	terminated, cleaned, deleted map[string]bool
	// sets gets every SetPods set (buffered; the test drains it).
	sets    chan []*v1.Pod
	changes chan struct{}
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{terminated: map[string]bool{}, cleaned: map[string]bool{}, deleted: map[string]bool{},
		sets: make(chan []*v1.Pod, 100), changes: make(chan struct{}, 1)}
}

func (f *fakeAgent) SetPods(ctx context.Context, source string, pods []*v1.Pod) error {
	if source != Source {
		panic("source " + source)
	}
	select {
	case f.sets <- pods:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (f *fakeAgent) Pods() []*v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods
}

func (f *fakeAgent) Changes() <-chan struct{} { return f.changes }

func (f *fakeAgent) IsPodTerminated(uid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminated[uid]
}

func (f *fakeAgent) PodCleanedUp(p *v1.Pod) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cleaned[string(p.UID)]
}

func (f *fakeAgent) IsPodDeleted(uid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deleted[uid]
}

// setPods replaces the table and signals a change.
func (f *fakeAgent) setPods(pods ...*v1.Pod) {
	f.mu.Lock()
	f.pods = pods
	f.mu.Unlock()
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

var _ Agent = (*fakeAgent)(nil)

// logBuffer is a goroutine-safe log sink that also copies to the test log.
type logBuffer struct {
	t  *testing.T
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	b := &logBuffer{t: t}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

var created = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// apiPod is a pod as the API server returns it, bound to node.
func apiPod(name, uid string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid), ResourceVersion: "1", CreationTimestamp: created},
		Spec:       v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "img"}}},
		Status:     v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBestEffort},
	}
}

// withStatus is p as the agent holds it: config.source set, status st.
func withStatus(p *v1.Pod, st v1.PodStatus) *v1.Pod {
	c := p.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[qos.ConfigSourceAnnotation] = Source
	c.Status = st
	return c
}

// staticPod is a static pod of the agent (source file) with hash uid.
func staticPod(name, uid string, st v1.PodStatus) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID(uid), Labels: map[string]string{"tier": "control"},
			Annotations: map[string]string{qos.ConfigSourceAnnotation: "file", podsource.ConfigHashAnnotation: uid}},
		Spec:   v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "img"}}},
		Status: st,
	}
}

// mirror is the API server's mirror pod of a static pod with hash.
func mirror(name, uid, hash string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, UID: types.UID(uid), ResourceVersion: "1",
			Annotations: map[string]string{qos.ConfigSourceAnnotation: "file", podsource.ConfigHashAnnotation: hash, qos.ConfigMirrorAnnotation: hash}},
		Spec:   v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "img"}}},
		Status: v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBestEffort},
	}
}

func running() v1.PodStatus {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 1, 500, time.UTC))
	return v1.PodStatus{
		Phase: v1.PodRunning, QOSClass: v1.PodQOSBestEffort, HostIP: "10.0.0.1", HostIPs: []v1.HostIP{{IP: "10.0.0.1"}},
		PodIP: "10.88.0.5", PodIPs: []v1.PodIP{{IP: "10.88.0.5"}}, StartTime: &start,
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: start}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Image: "img", Ready: true,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: start}}}},
	}
}
