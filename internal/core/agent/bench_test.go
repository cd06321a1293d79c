package agent

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
)

// BenchmarkStart100Pods measures the loop's own cost of taking 100 new pods
// from a source to their first SyncPod (admission, snapshots, dispatch), with
// a runtime that does nothing.
func BenchmarkStart100Pods(b *testing.B) {
	pods := make([]*v1.Pod, 100)
	for i := range pods {
		pods[i] = testPod(fmt.Sprintf("p%03d", i), fmt.Sprintf("u%03d", i), i)
	}
	for b.Loop() {
		mem, rt := newMem()
		synced := make(chan struct{}, len(pods))
		sync := rt.syncPodF
		rt.syncPodF = func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result {
			r := sync(ctx, pod, st)
			select {
			case synced <- struct{}{}:
			default: // a later sync
			}
			return r
		}
		_ = mem
		a, err := New(Config{}, Deps{Table: newTable(b, "file"), Runtime: rt, Admit: admitFunc(admitAll)})
		if err != nil {
			b.Fatal(err)
		}
		a.derive = rt.derive
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		if err := a.SetPods(ctx, "file", pods); err != nil {
			b.Fatal(err)
		}
		for range pods {
			<-synced
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
