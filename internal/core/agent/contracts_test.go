package agent

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/prober"
)

// The table is the composition root's pod table, the managers' killer and the
// prober's status source.
var (
	_ node.Pods              = (*Table)(nil)
	_ prober.PodStatusGetter = (*Table)(nil)
	_                        = node.Collaborators{PodCleanedUp: (*Table)(nil).PodCleanedUp, Killer: (*Table)(nil)}
)

func TestReadersDuringChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, rt := newMem()
		a := newTestAgent(t, Config{}, Deps{Runtime: rt})
		stop := start(t, a)
		defer stop()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 100 {
					for _, p := range a.Pods() {
						_ = p.Status.Phase
						a.IsPodDeleted(string(p.UID))
						a.IsPodTerminated(string(p.UID))
						a.PodCleanedUp(p)
						a.GetPodStatus(p.UID)
					}
					_ = len(a.ActivePods())
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		pods := []*v1.Pod{testPod("a", "u1", 0), testPod("b", "u2", 1), testPod("c", "u3", 2)}
		for i := range 6 {
			if err := a.SetPods(t.Context(), "file", pods[:i%4]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(800 * time.Millisecond)
		}
		wg.Wait()
	})
}
