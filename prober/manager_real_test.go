package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// TestManagerHTTPOverLoopback runs the whole stack against a real server:
// readiness goes ready, then unready when the server starts failing.
func TestManagerHTTPOverLoopback(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" || r.Header.Get("User-Agent") != UserAgent {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "web-uid"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:  "app",
			Ports: []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
			ReadinessProbe: &v1.Probe{
				ProbeHandler:     v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
				PeriodSeconds:    1,
				FailureThreshold: 1,
			},
		}}},
	}
	status := &fakeStatus{m: map[types.UID]v1.PodStatus{pod.UID: {
		Phase: v1.PodRunning, PodIP: "127.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", ContainerID: "c1", Started: ptr.To(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}}}},
	}}}
	m, err := New(Config{}, Deps{Status: status, Jitter: func(time.Duration) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	next := func() Result {
		select {
		case u := <-m.Results(Readiness).Updates():
			return u.Result
		case <-ctx.Done():
			t.Fatal("no readiness update")
		}
		return Unknown
	}
	if got := next(); got != Failure {
		t.Fatalf("initial readiness %v, want Failure", got)
	}
	if got := next(); got != Success {
		t.Fatalf("readiness %v, want Success", got)
	}
	failing.Store(true)
	if got := next(); got != Failure {
		t.Fatalf("readiness %v after the server failed, want Failure", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUpdatePodStatusInitContainers(t *testing.T) {
	t.Parallel()
	status := &fakeStatus{m: map[types.UID]v1.PodStatus{}}
	m, err := New(Config{}, Deps{Status: status})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "p-uid"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{
				{Name: "setup"},
				{Name: "sidecar", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), StartupProbe: execProbe("start")},
				{Name: "proxy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)},
			},
			Containers: []v1.Container{{Name: "app", ReadinessProbe: execProbe("ready")}, {Name: "idle"}},
		},
	}
	m.runners[handlerExec] = RunnerFunc(func(context.Context, Target) (Outcome, string, error) { return OutcomeSuccess, "", nil })
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	st := v1.PodStatus{
		InitContainerStatuses: []v1.ContainerStatus{
			{Name: "setup", ContainerID: "i1", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}},
			{Name: "sidecar", ContainerID: "i2", State: running},
			{Name: "proxy", ContainerID: "i3", State: running},
		},
		ContainerStatuses: []v1.ContainerStatus{
			{Name: "app", ContainerID: "c1", State: running},
			{Name: "idle", ContainerID: "c2", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}},
		},
	}
	m.UpdatePodStatus(pod, &st)
	type sr struct{ Started, Ready bool }
	got := map[string]sr{}
	for _, c := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
		got[c.Name] = sr{*c.Started, c.Ready}
	}
	want := map[string]sr{
		"setup":   {false, true},  // exited 0
		"sidecar": {false, false}, // startup probe has not passed
		"proxy":   {true, true},   // sidecar without probes
		"app":     {true, false},  // readiness probe has not passed
		"idle":    {false, false}, // not running
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v", name, got[name], w)
		}
	}
}

// eventSink records events as client-go's recorder would receive them.
type eventSink chan recordedEvent

type recordedEvent struct {
	ref                        v1.ObjectReference
	eventType, reason, message string
}

// Event never blocks, as the Recorder contract asks: past the buffer it drops.
func (s eventSink) Event(obj runtime.Object, eventType, reason, message string) {
	select {
	case s <- recordedEvent{*obj.(*v1.ObjectReference), eventType, reason, message}:
	default:
	}
}

// Eventf records the formatted event as Event does.
func (s eventSink) Eventf(obj runtime.Object, eventType, reason, messageFmt string, args ...any) {
	s.Event(obj, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf records the formatted event as Event does; the prober sets
// no annotations.
func (s eventSink) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, messageFmt string, args ...any) {
	s.Eventf(obj, eventType, reason, messageFmt, args...)
}

var _ nodeapi.Recorder = eventSink(nil)

type erroringRunner struct{}

func (erroringRunner) Probe(context.Context, Target) (Outcome, string, error) {
	return OutcomeFailure, "", errors.New("socket gone")
}

// TestManagerEvents: a real server that fails gives Unhealthy, one that
// redirects to another host gives ProbeWarning, a mechanism that errors gives
// Unhealthy with the kubelet's "errored" wording; each names its container.
func TestManagerEvents(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "http://elsewhere.example/", http.StatusMovedPermanently)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	port := intstr.FromInt(srv.Listener.Addr().(*net.TCPAddr).Port)
	httpProbe := func(path string) *v1.Probe {
		return &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: port}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
	}
	always := v1.ContainerRestartPolicyAlways
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "web-uid"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "sidecar", RestartPolicy: &always, LivenessProbe: httpProbe("/broken")}},
			Containers: []v1.Container{
				{Name: "moved", ReadinessProbe: httpProbe("/moved")},
				{Name: "flaky", StartupProbe: &v1.Probe{
					ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: port}},
					PeriodSeconds: 1, FailureThreshold: 1,
				}},
			},
		},
	}
	running := func(name, id string) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, ContainerID: id, Started: ptr.To(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	}
	status := &fakeStatus{m: map[types.UID]v1.PodStatus{pod.UID: {
		Phase: v1.PodRunning, PodIP: "127.0.0.1",
		InitContainerStatuses: []v1.ContainerStatus{running("sidecar", "c0")},
		ContainerStatuses:     []v1.ContainerStatus{running("moved", "c1"), {Name: "flaky", ContainerID: "c2", Started: ptr.To(false), State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}}}},
	}}}
	sink := make(eventSink, 64)
	m, err := New(Config{}, Deps{Status: status, Recorder: sink, TCP: erroringRunner{},
		Jitter: func(time.Duration) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	want := map[string]recordedEvent{
		"spec.initContainers{sidecar}": {eventType: v1.EventTypeWarning, reason: ReasonUnhealthy,
			message: "Liveness probe failed: HTTP probe failed with statuscode: 500"},
		"spec.containers{moved}": {eventType: v1.EventTypeWarning, reason: ReasonProbeWarning,
			message: "Readiness probe warning: Probe terminated redirects, Response body: <a href=\"http://elsewhere.example/\">Moved Permanently</a>.\n\n"},
		"spec.containers{flaky}": {eventType: v1.EventTypeWarning, reason: ReasonUnhealthy,
			message: "Startup probe errored and resulted in unknown state: socket gone"},
	}
	for len(want) > 0 {
		var e recordedEvent
		select {
		case e = <-sink:
		case <-ctx.Done():
			t.Fatalf("no event yet for %v", want)
		}
		if e.ref.Kind != "Pod" || e.ref.Namespace != "ns" || e.ref.Name != "web" || e.ref.UID != pod.UID {
			t.Fatalf("event object = %+v, want pod ns/web", e.ref)
		}
		field := e.ref.FieldPath
		w, ok := want[field]
		if !ok {
			continue // a repeat of one already seen
		}
		e.ref = v1.ObjectReference{}
		if e != w {
			t.Errorf("event for %s = %+v, want %+v", field, e, w)
		}
		delete(want, field)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
