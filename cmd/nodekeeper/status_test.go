package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/syncbuf"
)

// TestPrintStatusOnChange: the live table is printed at start and again only
// when a published pod changed what it shows, whether the agent published
// the same pods or new ones.
func TestPrintStatusOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := func(phase v1.PodPhase) *v1.Pod {
			return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Status: v1.PodStatus{Phase: phase}}
		}
		var mu sync.Mutex
		pods := []*v1.Pod{pod(v1.PodPending)}
		publish := func(p []*v1.Pod) {
			mu.Lock()
			defer mu.Unlock()
			pods = p
		}
		var out syncbuf.Buffer
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go printStatus(ctx, &out, func() []*v1.Pod {
			mu.Lock()
			defer mu.Unlock()
			return pods
		}, time.Second)
		tables := func() int { return strings.Count(out.String(), "NAMESPACE") }

		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := tables(); n != 1 {
			t.Fatalf("%d tables printed with nothing changed, want 1:\n%s", n, out.String())
		}
		publish([]*v1.Pod{pod(v1.PodPending)}) // new pods, same table
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := tables(); n != 1 {
			t.Fatalf("%d tables printed after the same table was published again, want 1", n)
		}
		publish([]*v1.Pod{pod(v1.PodRunning)})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := tables(); n != 2 || !strings.Contains(out.String(), "Running") {
			t.Fatalf("%d tables printed after the pod started, want 2 (the last Running):\n%s", n, out.String())
		}
	})
}
