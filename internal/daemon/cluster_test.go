package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// TestClusterRecorder: an event reaches the API (as the kubelet component of
// this node) and the log.
func TestClusterRecorder(t *testing.T) {
	client := fake.NewClientset()
	w, err := client.CoreV1().Events("ns").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var logs bytes.Buffer
	rec, writer := eventRecorder(eventSink{clientgo.Wrap(client)}, "n1", config.Default().Cluster,
		nodeapi.LogRecorder{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- writer.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	rec.Eventf(pod, v1.EventTypeWarning, "Evicted", "The node was low on resource: %s.", "memory")
	var events []v1.Event
	select {
	case ev := <-w.ResultChan():
		events = append(events, *ev.Object.(*v1.Event))
	case <-time.After(10 * time.Second):
	}
	stop()
	if len(events) != 1 {
		t.Fatalf("events in the API: %d, want 1", len(events))
	}
	e := events[0]
	if e.Reason != "Evicted" || e.Message != "The node was low on resource: memory." || e.Type != v1.EventTypeWarning ||
		e.Source != (v1.EventSource{Component: "kubelet", Host: "n1"}) || e.InvolvedObject.UID != "u1" {
		t.Errorf("event = %+v", e)
	}
	if !strings.Contains(logs.String(), "reason=Evicted") {
		t.Errorf("the event was not logged: %q", logs.String())
	}
}
