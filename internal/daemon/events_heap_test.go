package daemon

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/servers/eventring"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// BenchmarkStandaloneEventsHeap measures the heap a standalone agent's
// events hold once N pods have started (four events each, as a started
// pod records: Scheduled is the API server's, so Pulled, Created, Started
// and one more): the ring of the last eventring.DefaultSize events and the
// recorder's aggregation caches. docs/benchmarks.md, "Density".
//
//	go test -run '^$' -bench StandaloneEventsHeap -benchtime 1x ./internal/daemon
func BenchmarkStandaloneEventsHeap(b *testing.B) {
	for _, n := range []int{100, 250, 500} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for b.Loop() {
				before := liveHeap()
				ring, err := eventring.New(eventring.DefaultSize)
				if err != nil {
					b.Fatal(err)
				}
				rec, r := eventRecorder(ring, "node-1", config.Cluster{}, nodeapi.LogRecorder{})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- r.Run(ctx) }()
				for i := range n {
					p := &v1.Pod{
						TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
						ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("density-%d-node-1", i), UID: types.UID(fmt.Sprintf("0123456789abcdef0123456789ab%04d", i))},
					}
					rec.Event(p, v1.EventTypeNormal, "Pulled", `Container image "testbox:latest" already present on machine`)
					rec.Event(p, v1.EventTypeNormal, "Created", "Created container: serve")
					rec.Event(p, v1.EventTypeNormal, "Started", "Started container serve")
					rec.Event(p, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: connection refused")
				}
				cancel() // Run writes what is queued before it returns
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				kept := len(ring.Events())
				if want := min(4*n, eventring.DefaultSize); kept != want {
					b.Fatalf("%d events kept, want %d", kept, want)
				}
				after := liveHeap()
				runtime.KeepAlive(rec)
				runtime.KeepAlive(ring)
				b.ReportMetric(float64(after-before)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(kept), "events")
			}
		})
	}
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
