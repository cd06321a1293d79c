package preemption

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// fakeKiller is a function-field PodKiller.
type fakeKiller struct {
	kill func(ctx context.Context, pod *v1.Pod, status v1.PodStatus, grace *int64) error
}

func (f fakeKiller) KillPod(ctx context.Context, pod *v1.Pod, status v1.PodStatus, grace *int64) error {
	return f.kill(ctx, pod, status, grace)
}

type killCall struct {
	Pod    string
	Status v1.PodStatus
	Grace  *int64
}

func TestHandleAdmissionFailure(t *testing.T) {
	t.Parallel()
	critical := newPod("critical", static())
	running := []*v1.Pod{
		newPod("be"),
		newPod("bu", burstable("cpu", "500m", "memory", "256Mi")),
		newPod("g", guaranteed("cpu", "1", "memory", "1Gi")),
	}
	cpuShort := &InsufficientResource{ResourceName: v1.ResourceCPU, Requested: 1000, Used: 1500, Capacity: 2000} // 500m short
	podsShort := &InsufficientResource{ResourceName: v1.ResourcePods, Requested: 1, Used: 3, Capacity: 3}        // 1 short
	memShort := &InsufficientResource{ResourceName: v1.ResourceMemory, Requested: 4 << 30, Used: 0, Capacity: 1} // impossible
	ports := errors.New("Predicate NodePorts failed")

	tests := []struct {
		name          string
		pod           *v1.Pod
		failures      []error
		failKill      string // name of a pod whose kill fails
		wantRemaining []error
		wantVictims   []string
		wantKills     []string
		wantErr       error
	}{
		{
			name:          "non-critical pod keeps its failures",
			pod:           newPod("plain"),
			failures:      []error{cpuShort},
			wantRemaining: []error{cpuShort},
		},
		{
			name:          "other failures are returned alone and nothing is killed",
			pod:           critical,
			failures:      []error{cpuShort, ports},
			wantRemaining: []error{ports},
		},
		{
			name:        "resource failures preempt",
			pod:         critical,
			failures:    []error{cpuShort, podsShort},
			wantVictims: []string{"bu"},
			wantKills:   []string{"bu"},
		},
		{
			name:        "wrapped resource failures count",
			pod:         critical,
			failures:    []error{errors.Join(podsShort)},
			wantVictims: []string{"be"},
			wantKills:   []string{"be"},
		},
		{
			name:     "no set of pods suffices",
			pod:      critical,
			failures: []error{cpuShort, memShort},
			wantErr:  ErrNoVictims,
		},
		{
			name:        "a failed kill is skipped and the pod admitted",
			pod:         critical,
			failures:    []error{&InsufficientResource{ResourceName: v1.ResourcePods, Requested: 1, Used: 2, Capacity: 1}},
			failKill:    "be",
			wantVictims: []string{"bu"},
			wantKills:   []string{"be", "bu"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var kills []killCall
			killer := fakeKiller{kill: func(_ context.Context, p *v1.Pod, st v1.PodStatus, grace *int64) error {
				kills = append(kills, killCall{Pod: p.Name, Status: st, Grace: grace})
				if p.Name == tc.failKill {
					return errors.New("runtime down")
				}
				return nil
			}}
			h, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return running }, Killer: killer, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
			if err != nil {
				t.Fatal(err)
			}
			remaining, victims, err := h.HandleAdmissionFailure(t.Context(), tc.pod, tc.failures)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantRemaining, remaining, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("remaining (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantVictims, names(victims)); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
			var want []killCall
			for _, n := range tc.wantKills {
				want = append(want, killCall{Pod: n, Status: v1.PodStatus{
					Phase:   v1.PodFailed,
					Reason:  "Preempting",
					Message: "Preempted in order to admit critical pod",
					Conditions: []v1.PodCondition{{
						Type:    v1.DisruptionTarget,
						Status:  v1.ConditionTrue,
						Reason:  "TerminationByKubelet",
						Message: "Pod was preempted by Kubelet to accommodate a critical pod.",
					}},
				}})
			}
			if diff := cmp.Diff(want, kills); diff != "" {
				t.Errorf("kills (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandleAdmissionFailureErrorMessage(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return nil }, Killer: fakeKiller{}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = h.HandleAdmissionFailure(t.Context(), newPod("c", static()),
		[]error{&InsufficientResource{ResourceName: v1.ResourceCPU, Requested: 600, Used: 0, Capacity: 100}})
	want := "preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 500), ]"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestHandleAdmissionFailureStopsWithContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	running := []*v1.Pod{newPod("a"), newPod("b")}
	var killed []string
	h, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return running }, Killer: fakeKiller{kill: func(_ context.Context, p *v1.Pod, _ v1.PodStatus, _ *int64) error {
		killed = append(killed, p.Name)
		cancel() // the agent is shutting down
		return nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	_, victims, err := h.HandleAdmissionFailure(ctx, newPod("c", static()),
		[]error{&InsufficientResource{ResourceName: v1.ResourcePods, Requested: 1, Used: 2, Capacity: 1}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(killed, names(victims)); diff != "" || len(killed) != 1 {
		t.Errorf("killed %v, victims %v; want one pod reported as killed", killed, names(victims))
	}
}

func TestNewHandlerValidates(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(Deps{Killer: fakeKiller{}}); err == nil {
		t.Error("nil active pods accepted")
	}
	if _, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return nil }}); err == nil {
		t.Error("nil killer accepted")
	}
}

func TestHandlerMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	running := []*v1.Pod{newPod("a"), newPod("b"), newPod("c")}
	ok := fakeKiller{kill: func(context.Context, *v1.Pod, v1.PodStatus, *int64) error { return nil }}
	for range 2 { // a second handler on the same registry shares the counter
		h, err := NewHandler(Deps{ActivePods: func() []*v1.Pod { return running }, Killer: ok, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		_, victims, err := h.HandleAdmissionFailure(t.Context(), newPod("x", static()), []error{
			&InsufficientResource{ResourceName: v1.ResourcePods, Requested: 1, Used: 3, Capacity: 2},
		})
		if err != nil || len(victims) != 2 {
			t.Fatalf("victims %v, err %v; want 2 victims", names(victims), err)
		}
	}
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
	if diff := cmp.Diff([]string{`kubelet_preemptions{preemption_signal="pods"} 4`}, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
