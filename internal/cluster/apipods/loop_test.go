package apipods

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStatusLoopTiming: the status loop writes at once when it starts and
// after the agent's table changed, and repairs a status someone else
// changed only at the next full pass, StatusPeriod later.
func TestStatusLoopTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag := newFakeAgent()
		web := apiPod("web", "u1")
		ag.pods = []*v1.Pod{withStatus(web, running())}
		s, client, _ := newTestSyncer(t, ag, web)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.runStatus(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		synctest.Wait()
		if diff := cmp.Diff([]string{"update pods/status default/web"}, actions(client)); diff != "" {
			t.Errorf("first pass (-want +got):\n%s", diff)
		}
		// Someone else changes the status; the cache shows it.
		client.ClearActions()
		other := web.DeepCopy()
		other.Status.Phase = v1.PodPending
		if _, err := client.CoreV1().Pods("default").UpdateStatus(t.Context(), other, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.informer.GetIndexer().Update(other); err != nil {
			t.Fatal(err)
		}
		client.ClearActions()
		time.Sleep(DefaultStatusPeriod - time.Second)
		synctest.Wait()
		if got := actions(client); len(got) != 0 {
			t.Errorf("before the full pass: %v", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]string{"update pods/status default/web"}, actions(client)); diff != "" {
			t.Errorf("full pass (-want +got):\n%s", diff)
		}
		// The agent's table changes: a prompt pass writes the new status.
		client.ClearActions()
		failed := running()
		failed.Phase, failed.Reason = v1.PodFailed, "Evicted"
		ag.setPods(withStatus(web, failed))
		synctest.Wait()
		if diff := cmp.Diff([]string{"update pods/status default/web"}, actions(client)); diff != "" {
			t.Errorf("after a change (-want +got):\n%s", diff)
		}
	})
}
