package preemption

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// wantPreempted is the status the kubelet gives a preempted pod.
var wantPreempted = v1.PodStatus{
	Phase:   v1.PodFailed,
	Reason:  "Preempting",
	Message: "Preempted in order to admit critical pod",
	Conditions: []v1.PodCondition{{
		Type:    v1.DisruptionTarget,
		Status:  v1.ConditionTrue,
		Reason:  "TerminationByKubelet",
		Message: "Pod was preempted by Kubelet to accommodate a critical pod.",
	}},
}

// kills returns the kill requests for pods, as a plan holds them.
func kills(pods ...*v1.Pod) []nodeapi.KillRequest {
	var out []nodeapi.KillRequest
	for _, p := range pods {
		out = append(out, nodeapi.KillRequest{Pod: p, Status: wantPreempted})
	}
	return out
}

func TestHandleAdmissionFailure(t *testing.T) {
	t.Parallel()
	critical := newPod("critical", static())
	be := newPod("be")
	bu := newPod("bu", burstable("cpu", "500m", "memory", "256Mi"))
	g := newPod("g", guaranteed("cpu", "1", "memory", "1Gi"))
	running := []*v1.Pod{be, bu, g}
	cpuShort := &InsufficientResource{ResourceName: v1.ResourceCPU, Requested: 1000, Used: 1500, Capacity: 2000} // 500m short
	podsShort := &InsufficientResource{ResourceName: v1.ResourcePods, Requested: 1, Used: 3, Capacity: 3}        // 1 short
	memShort := &InsufficientResource{ResourceName: v1.ResourceMemory, Requested: 4 << 30, Used: 0, Capacity: 1} // impossible
	ports := errors.New("Predicate NodePorts failed")

	tests := []struct {
		name          string
		pod           *v1.Pod
		failures      []error
		wantRemaining []error
		wantPlan      *Plan
		wantErr       error
	}{
		{
			name:          "non-critical pod keeps its failures",
			pod:           newPod("plain"),
			failures:      []error{cpuShort},
			wantRemaining: []error{cpuShort},
		},
		{
			name:          "other failures are returned alone and nothing is planned",
			pod:           critical,
			failures:      []error{cpuShort, ports},
			wantRemaining: []error{ports},
		},
		{
			name:     "resource failures plan a preemption",
			pod:      critical,
			failures: []error{cpuShort, podsShort},
			wantPlan: &Plan{Preemptor: critical, Requirements: Requirements{{v1.ResourceCPU, 500}, {v1.ResourcePods, 1}}, Victims: kills(bu)},
		},
		{
			name:     "wrapped resource failures count",
			pod:      critical,
			failures: []error{errors.Join(podsShort)},
			wantPlan: &Plan{Preemptor: critical, Requirements: Requirements{{v1.ResourcePods, 1}}, Victims: kills(be)},
		},
		{
			name:     "victims in the kubelet's kill order",
			pod:      critical,
			failures: []error{&InsufficientResource{ResourceName: v1.ResourcePods, Requested: 1, Used: 3, Capacity: 1}},
			wantPlan: &Plan{Preemptor: critical, Requirements: Requirements{{v1.ResourcePods, 3}}, Victims: kills(be, bu, g)},
		},
		{
			name:     "no set of pods suffices",
			pod:      critical,
			failures: []error{cpuShort, memShort},
			wantErr:  ErrNoVictims,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return running }})
			if err != nil {
				t.Fatal(err)
			}
			remaining, plan, err := h.HandleAdmissionFailure(tc.pod, tc.failures)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantRemaining, remaining, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("remaining (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPlan, plan, cmp.Comparer(func(a, b *v1.Pod) bool { return a == b })); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandleAdmissionFailureErrorMessage(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = h.HandleAdmissionFailure(newPod("c", static()),
		[]error{&InsufficientResource{ResourceName: v1.ResourceCPU, Requested: 600, Used: 0, Capacity: 100}})
	want := "preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 500), ]"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestNewHandlerValidates(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(Deps{}); err == nil {
		t.Error("nil active pods accepted")
	}
}

func TestPlanSignal(t *testing.T) {
	t.Parallel()
	p := &Plan{Requirements: Requirements{{v1.ResourceMemory, 1}, {v1.ResourceCPU, 1}}}
	if got := p.Signal(); got != "memory" {
		t.Errorf("Signal = %q, want memory", got)
	}
	if got := (&Plan{}).Signal(); got != "" {
		t.Errorf("Signal of no requirements = %q, want empty", got)
	}
}

// recorder is a function-field nodeapi.Recorder that keeps Event calls.
type recorder struct {
	event func(object runtime.Object, eventtype, reason, message string)
}

func (r recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.event(object, eventtype, reason, message)
}

func (r recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r recorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func TestExecute(t *testing.T) {
	t.Parallel()
	critical := newPod("critical", static())
	a, b, c := newPod("a"), newPod("b"), newPod("c")
	plan := &Plan{Preemptor: critical, Requirements: Requirements{{v1.ResourcePods, 3}}, Victims: kills(a, b, c)}
	grace := int64(7)
	plan.Victims[2].GracePeriodOverride = &grace // passed through as planned

	var steps []string
	var got []nodeapi.KillRequest
	killer := nodeapi.PodKillerFunc(func(_ context.Context, req nodeapi.KillRequest) error {
		steps = append(steps, "kill "+req.Pod.Name)
		got = append(got, req)
		if req.Pod == b {
			return errors.New("runtime down")
		}
		return nil
	})
	rec := recorder{event: func(o runtime.Object, typ, reason, msg string) {
		steps = append(steps, fmt.Sprintf("event %s %s %s %q", o.(*v1.Pod).Name, typ, reason, msg))
	}}
	var logs strings.Builder
	reg := prometheus.NewPedanticRegistry()
	e, err := NewExecutor(ExecutorDeps{Killer: killer, Recorder: rec, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	killed, err := e.Execute(t.Context(), plan)
	if err != nil {
		t.Fatal(err)
	}
	// A failed kill is skipped: the others go ahead and it is not reported.
	if diff := cmp.Diff([]string{"a", "c"}, names(killed)); diff != "" {
		t.Errorf("killed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(plan.Victims, got, cmp.Comparer(func(x, y *v1.Pod) bool { return x == y })); diff != "" {
		t.Errorf("kill requests (-want +got):\n%s", diff)
	}
	wantSteps := []string{
		`event a Warning Preempting "Preempted in order to admit critical pod"`, "kill a",
		`event b Warning Preempting "Preempted in order to admit critical pod"`, "kill b",
		`event c Warning Preempting "Preempted in order to admit critical pod"`, "kill c",
	}
	if diff := cmp.Diff(wantSteps, steps); diff != "" {
		t.Errorf("events and kills (-want +got):\n%s", diff)
	}
	for _, want := range []string{
		`msg="Preempting pod to free up resources" subsystem=preemption pod=default/a podUID=uid-a insufficientResources="[(res: pods, q: 3), ]" requestingPod=default/critical`,
		`level=ERROR msg="Failed to evict pod" subsystem=preemption pod=default/b err="runtime down"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
	if diff := cmp.Diff([]string{`kubelet_preemptions{preemption_signal="pods"} 2`}, gather(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

func TestExecuteStopsWithContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var calls []string
	e, err := NewExecutor(ExecutorDeps{Killer: nodeapi.PodKillerFunc(func(_ context.Context, req nodeapi.KillRequest) error {
		calls = append(calls, req.Pod.Name)
		cancel() // the agent is shutting down
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	killed, err := e.Execute(ctx, &Plan{Preemptor: newPod("c", static()), Victims: kills(newPod("a"), newPod("b"))})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if diff := cmp.Diff([]string{"a"}, calls); diff != "" {
		t.Errorf("kills (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(calls, names(killed)); diff != "" {
		t.Errorf("killed reported (-want +got):\n%s", diff)
	}
	if killed, err := e.Execute(ctx, nil); err != nil || killed != nil {
		t.Errorf("nil plan: killed %v, err %v", names(killed), err)
	}
}

func TestNewExecutorValidates(t *testing.T) {
	t.Parallel()
	if _, err := NewExecutor(ExecutorDeps{}); err == nil {
		t.Error("nil killer accepted")
	}
}

func TestExecutorMetricsShared(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	ok := nodeapi.PodKillerFunc(func(context.Context, nodeapi.KillRequest) error { return nil })
	plan := &Plan{Preemptor: newPod("x", static()), Requirements: Requirements{{v1.ResourceCPU, 1}, {v1.ResourcePods, 2}}, Victims: kills(newPod("a"), newPod("b"))}
	for range 2 { // a second executor on the same registry shares the counter
		e, err := NewExecutor(ExecutorDeps{Killer: ok, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Execute(t.Context(), plan); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{`kubelet_preemptions{preemption_signal="cpu"} 4`}, gather(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// gather renders reg's counters as name{label="value"} count.
func gather(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				got = append(got, fmt.Sprintf("%s{%s=%q} %v", f.GetName(), l.GetName(), l.GetValue(), m.GetCounter().GetValue()))
			}
		}
	}
	return got
}
