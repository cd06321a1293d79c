package simulate

import (
	"context"
	"fmt"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodekeeper/nodekeeper/containergc"
	"github.com/nodekeeper/nodekeeper/imagegc"
)

// imageCollector is what the simulator drives of image GC (*imagegc.Manager).
type imageCollector interface {
	Detect(ctx context.Context) error
	GarbageCollect(ctx context.Context) error
	PeriodicGC(ctx context.Context) error
	DeleteUnusedImages(ctx context.Context) error
	FreeSpace(ctx context.Context, bytes int64) (int64, error)
}

// containerCollector is what the simulator drives of container GC
// (*containergc.Collector).
type containerCollector interface {
	GarbageCollect(ctx context.Context, evictNonDeleted bool) error
	DeleteAllUnusedContainers(ctx context.Context) error
}

type collectors struct {
	images     imageCollector
	containers containerCollector
	// imagePeriodic is false when the policy disables periodic image GC
	// (imageGCHighThresholdPercent 100 and no maximum age), as in the kubelet.
	imagePeriodic bool
}

// newCollectors builds the real garbage collectors over the scripted node, with
// the virtual clock.
func newCollectors(s *sim) (collectors, error) {
	clk := passiveClock{n: s.n}
	rec := recorder{s}
	policy := imagegc.PolicyFromKubelet(&s.sc.Config.Kubelet)
	images, err := imagegc.New(imagegc.Config{Policy: policy}, imagegc.Deps{
		Images:  s.n,
		ImageFs: s.n,
		InUse:   imagegc.ContainerImages(s.n),
		Statfs: func(string) (imagegc.FsStats, error) {
			c, a, err := s.n.statfs()
			return imagegc.FsStats{CapacityBytes: int64(c), AvailableBytes: int64(a)}, err
		},
		Recorder: rec,
		Clock:    clk,
		Logger:   s.log,
	})
	if err != nil {
		return collectors{}, bad(err)
	}
	gc := s.sc.Container
	containers, err := containergc.New(containergc.Policy{
		MinAge: gc.MinAge, MaxPerPodContainer: gc.MaxPerPodContainer, MaxContainers: gc.MaxContainers,
	}, 0, containergc.Deps{Runtime: s.n, Pods: podState{s.n}, Recorder: rec, Clock: clk, Logger: s.log})
	if err != nil {
		return collectors{}, bad(err)
	}
	return collectors{images: images, containers: containers, imagePeriodic: policy.PeriodicEnabled()}, nil
}

// passiveClock is the simulation's clock. The simulator calls the collectors'
// passes itself and never their Run loops, so the timer methods (the embedded
// nil WithTicker) are never called.
type passiveClock struct {
	n *node
	clock.WithTicker
}

func (c passiveClock) Now() time.Time                  { return c.n.now }
func (c passiveClock) Since(t time.Time) time.Duration { return c.n.now.Sub(t) }

// recorder turns the collectors' node events into timeline records.
type recorder struct{ s *sim }

func (r recorder) Event(_ k8sruntime.Object, _, reason, message string) {
	switch reason {
	case EventImageGCFailed, EventFreeDiskSpaceFailed, EventInvalidDiskCapacity:
		r.s.emit(Event{Event: reason, Message: message})
	}
}

func (r recorder) Eventf(object k8sruntime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r recorder) AnnotatedEventf(object k8sruntime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Eventf(object, eventtype, reason, messageFmt, args...)
}

// podState answers container GC's questions from the active pods: a pod that is
// not active is deleted.
type podState struct{ n *node }

func (p podState) IsPodDeleted(uid string) bool {
	for _, pod := range p.n.pods {
		if string(pod.UID) == uid {
			return false
		}
	}
	return true
}

func (p podState) IsPodTerminated(uid string) bool { return p.IsPodDeleted(uid) }

// The rest of container GC's CRI subset: the scenario has no sandboxes.

func (n *node) StopContainer(context.Context, string, int64) error { return nil }

func (n *node) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, nil
}

func (n *node) RemovePodSandbox(context.Context, string) error { return nil }
