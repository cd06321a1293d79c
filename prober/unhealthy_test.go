package prober

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestUnhealthy(t *testing.T) {
	t.Parallel()
	probe := func(grace *int64) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(80)}}, TerminationGracePeriodSeconds: grace}
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: v1.PodSpec{Containers: []v1.Container{
			{Name: "live", LivenessProbe: probe(ptr.To[int64](7))},
			{Name: "start", StartupProbe: probe(nil)},
			{Name: "ready", ReadinessProbe: probe(nil)},
		}},
	}
	m, err := New(Config{}, Deps{Status: &fakeStatus{m: map[types.UID]v1.PodStatus{}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	set := func(pt ProbeType, id string, r Result) {
		m.results[pt].set(t.Context(), Update{ContainerID: id, Result: r, ProbeType: pt})
	}
	set(Liveness, "c://live", Failure)
	set(Liveness, "c://live-ok", Success)
	set(Startup, "c://start", Failure)
	set(Startup, "c://start-unknown", Unknown)
	set(Readiness, "c://ready", Failure)

	type verdict struct {
		Type  ProbeType
		Grace *int64
		Bad   bool
	}
	for _, tc := range []struct {
		name, id string
		want     verdict
	}{
		{"live", "c://live", verdict{Liveness, ptr.To[int64](7), true}},
		{"live", "c://live-ok", verdict{}},
		{"start", "c://start", verdict{Startup, nil, true}},
		{"start", "c://start-unknown", verdict{}},
		{"ready", "c://ready", verdict{}}, // readiness never restarts
		{"live", "c://unknown-id", verdict{}},
	} {
		pt, g, bad := m.Unhealthy("u1", tc.name, tc.id)
		if diff := cmp.Diff(tc.want, verdict{pt, g, bad}); diff != "" {
			t.Errorf("Unhealthy(%s, %s) (-want +got):\n%s", tc.name, tc.id, diff)
		}
	}
}
