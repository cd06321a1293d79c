package podruntime

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
)

// testPod is a pod named web in ns with one container app (image img:1).
func testPod(mut ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "n"}},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			Containers:    []v1.Container{{Name: "app", Image: "img:1"}},
		},
	}
	for _, f := range mut {
		f(p)
	}
	return p
}

func rl(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func sprintf(f string, args ...any) string { return fmt.Sprintf(f, args...) }

func itoa(n int) string { return strconv.Itoa(n) }

var resourceMi = resource.MustParse("1Mi")

// pods keeps what the agent keeps of each pod between its syncs: the State
// of its last SyncPod and its last status.
type pods struct {
	mu     sync.Mutex // guards the maps
	states map[types.UID]SyncState
	last   map[types.UID]*v1.PodStatus
	// done: the pod's last status said its containers are done (the
	// agent then kills it).
	done map[types.UID]bool
}

// syncPod runs m.SyncPod with the pod's last State and keeps the new one.
func (p *pods) syncPod(ctx context.Context, m *Manager, pod *v1.Pod, status *PodStatus) Result {
	p.mu.Lock()
	prev := p.states[pod.UID]
	p.mu.Unlock()
	res := m.SyncPod(ctx, pod, status, prev)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.states == nil {
		p.states = map[types.UID]SyncState{}
	}
	p.states[pod.UID] = res.State
	return res
}

// podStatus derives the pod's status as the agent does (podstatus.Derive)
// from its runtime status, m's StatusNode, the pod's last waiting reasons
// and its last status; it keeps the status.
func (p *pods) podStatus(m *Manager, pod *v1.Pod, status *PodStatus, now time.Time) v1.PodStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, done := podstatus.Derive(podstatus.Input{Pod: pod, Runtime: status, Node: m.StatusNode(),
		Waiting: p.states[pod.UID].Waiting, Previous: p.last[pod.UID]}, now)
	if p.last == nil {
		p.last, p.done = map[types.UID]*v1.PodStatus{}, map[types.UID]bool{}
	}
	p.last[pod.UID], p.done[pod.UID] = &st, done
	return st
}

// condSummary is "Type=Status(Reason)" per condition.
func condSummary(cs []v1.PodCondition) []string {
	var out []string
	for _, c := range cs {
		s := string(c.Type) + "=" + string(c.Status)
		if c.Reason != "" {
			s += "(" + c.Reason + ")"
		}
		out = append(out, s)
	}
	return out
}

// hostResolv is the host's resolv.conf in the fixtures.
const hostResolv = `# generated
nameserver 10.0.0.2
nameserver 10.0.0.3
search corp.example example
options ndots:2 edns0
`
