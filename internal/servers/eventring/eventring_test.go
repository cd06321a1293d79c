package eventring_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/events"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/servers/eventring"
)

func ev(name string) *v1.Event {
	return &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Reason: "R", Count: 1}
}

func names(es []v1.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name+"@"+e.ResourceVersion)
	}
	return out
}

// The ring keeps the last events written: the oldest goes first, a patched
// event counts as written anew, and one already dropped is not found (the
// recorder then creates it again).
func TestRingKeepsTheLastWritten(t *testing.T) {
	t.Parallel()
	r, err := eventring.New(2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := r.Create(ctx, ev(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Patch(ctx, ev("a"), nil); !apierrors.IsNotFound(err) {
		t.Errorf("patch of a dropped event: %v, want NotFound", err)
	}
	b := ev("b")
	b.Count, b.Message = 2, "again"
	out, err := r.Patch(ctx, b, nil)
	if err != nil || out.Count != 2 || out.ResourceVersion != "4" {
		t.Fatalf("patch: %+v, %v", out, err)
	}
	out.Message = "changed by the caller" // the ring's copy stays
	got := r.Events()
	if diff := cmp.Diff([]string{"c@3", "b@4"}, names(got)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got[1].Message != "again" || got[1].Count != 2 {
		t.Errorf("patched event %+v", got[1])
	}
	if _, err := eventring.New(0); err == nil {
		t.Error("New(0): no error")
	}
}

// Through the recorder a standalone node uses, the ring holds the events a
// cluster's API server would: a repeat counted on the first one (same name,
// count 2, first and last timestamps), at most the ring's size.
func TestRingAsRecorderSink(t *testing.T) {
	t.Parallel()
	// In a bubble: the recorder stamps events with the bubble's clock.
	synctest.Test(t, func(t *testing.T) {
		scheme, err := kubeclient.NewScheme()
		if err != nil {
			t.Fatal(err)
		}
		r, err := eventring.New(3)
		if err != nil {
			t.Fatal(err)
		}
		rec := events.New(r, events.Options{Source: v1.EventSource{Component: "kubelet", Host: "node-1"}, Scheme: scheme})
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}}
		rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q", "nowhere.invalid/x:1")
		time.Sleep(10 * time.Second)
		rec.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q", "nowhere.invalid/x:1")
		for i := range 3 {
			rec.Event(pod, v1.EventTypeNormal, "Other", fmt.Sprint("message ", i))
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // Run writes what is queued, then returns
		if err := rec.Run(ctx); err != nil {
			t.Fatal(err)
		}
		got := r.Events()
		if len(got) != 3 {
			t.Fatalf("%d events, want the ring's 3: %v", len(got), names(got))
		}
		// The counted repeat was dropped with the oldest; a fresh ring of one
		// shows it whole.
		r1, _ := eventring.New(10)
		rec1 := events.New(r1, events.Options{Source: v1.EventSource{Component: "kubelet", Host: "node-1"}, Scheme: scheme})
		rec1.Event(pod, v1.EventTypeWarning, "BackOff", "Back-off pulling image")
		time.Sleep(time.Minute)
		rec1.Event(pod, v1.EventTypeWarning, "BackOff", "Back-off pulling image")
		if err := rec1.Run(ctx); err != nil {
			t.Fatal(err)
		}
		got = r1.Events()
		if len(got) != 1 {
			t.Fatalf("%d events, want 1 counted twice: %v", len(got), names(got))
		}
		e := got[0]
		if e.Count != 2 || !e.LastTimestamp.Time.Equal(e.FirstTimestamp.Add(time.Minute)) || e.InvolvedObject.Name != "web" ||
			e.InvolvedObject.Kind != "Pod" || e.Type != v1.EventTypeWarning || e.Reason != "BackOff" || e.Source.Host != "node-1" {
			t.Errorf("event %+v", e)
		}
	})
}
