package containergc

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	created = runtimeapi.ContainerState_CONTAINER_CREATED
	unknown = runtimeapi.ContainerState_CONTAINER_UNKNOWN
)

// ctr is a container of pod uid, named name, created ago before t0.
func ctr(id, uid, name string, st runtimeapi.ContainerState, ago time.Duration) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: "sb-" + uid, State: st, CreatedAt: t0.Add(-ago).UnixNano(),
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Labels:   map[string]string{LabelPodUID: uid, LabelContainerName: name},
	}
}

type pods struct{ deleted, terminated map[string]bool }

func (p pods) IsPodDeleted(uid string) bool    { return p.deleted[uid] }
func (p pods) IsPodTerminated(uid string) bool { return p.terminated[uid] }

func ids(rs []Removal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID+" ("+r.Why+")")
	}
	return out
}

func TestPlanContainers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		containers      []*runtimeapi.Container
		sandboxes       []*runtimeapi.PodSandbox
		p               Policy
		pods            PodState
		evictNonDeleted bool
		want            []string
	}{
		{
			name: "default policy keeps the newest dead container per pod container",
			containers: []*runtimeapi.Container{
				ctr("run", "p1", "app", running, 10*time.Minute),
				ctr("d1", "p1", "app", exited, 9*time.Minute),
				ctr("d2", "p1", "app", exited, 8*time.Minute),
				ctr("d3", "p1", "app", exited, 7*time.Minute),
				ctr("s1", "p1", "sidecar", exited, 9*time.Minute),
			},
			p:    DefaultPolicy(),
			want: []string{"d1 (over maxPerPodContainer)", "d2 (over maxPerPodContainer)"},
		},
		{
			name: "minimum age protects young dead containers",
			containers: []*runtimeapi.Container{
				ctr("old", "p1", "app", exited, 2*time.Hour),
				ctr("mid", "p1", "app", exited, time.Hour),
				ctr("young", "p1", "app", exited, time.Minute),
			},
			p:    Policy{MinAge: 30 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1},
			want: []string{"old (over maxPerPodContainer)"},
		},
		{
			name: "created-but-never-started and unknown containers are dead too",
			containers: []*runtimeapi.Container{
				ctr("c", "p1", "app", created, 2*time.Minute),
				ctr("u", "p1", "app", unknown, time.Minute),
			},
			p:    Policy{MaxPerPodContainer: 0, MaxContainers: -1},
			want: []string{"c (over maxPerPodContainer)", "u (over maxPerPodContainer)"},
		},
		{
			name: "deleted pods lose all dead containers; terminated only on eviction",
			containers: []*runtimeapi.Container{
				ctr("gone1", "gone", "app", exited, 3*time.Minute),
				ctr("gone2", "gone", "app", exited, 2*time.Minute),
				ctr("term1", "term", "app", exited, 2*time.Minute),
			},
			p:    DefaultPolicy(),
			pods: pods{deleted: map[string]bool{"gone": true}, terminated: map[string]bool{"term": true}},
			want: []string{"gone2 (pod deleted)", "gone1 (pod deleted)"},
		},
		{
			name: "eviction reclaim also empties terminated pods",
			containers: []*runtimeapi.Container{
				ctr("term1", "term", "app", exited, 2*time.Minute),
				ctr("live", "live", "app", exited, 2*time.Minute),
			},
			p:               DefaultPolicy(),
			pods:            pods{terminated: map[string]bool{"term": true}},
			evictNonDeleted: true,
			want:            []string{"term1 (pod terminated)"},
		},
		{
			name: "max containers: groups cut evenly, then the oldest overall",
			containers: []*runtimeapi.Container{
				ctr("a1", "p1", "a", exited, 10*time.Minute),
				ctr("a2", "p1", "a", exited, 9*time.Minute),
				ctr("a3", "p1", "a", exited, 1*time.Minute),
				ctr("b1", "p2", "b", exited, 8*time.Minute),
				ctr("b2", "p2", "b", exited, 7*time.Minute),
				ctr("c1", "p3", "c", exited, 6*time.Minute),
			},
			// 6 dead, max 2 over 3 groups: 2/3 = 0 → 1 each (a3, b2, c1), then
			// the oldest of those (b2) goes.
			p: Policy{MaxPerPodContainer: -1, MaxContainers: 2},
			want: []string{"a1 (over maxContainers)", "a2 (over maxContainers)", "b1 (over maxContainers)",
				"b2 (over maxContainers)"},
		},
		{
			name: "max containers zero removes every dead container",
			containers: []*runtimeapi.Container{
				ctr("a1", "p1", "a", exited, 10*time.Minute),
				ctr("b1", "p2", "b", exited, 8*time.Minute),
			},
			p:    Policy{MaxPerPodContainer: -1, MaxContainers: 0},
			want: []string{"a1 (over maxContainers)", "b1 (over maxContainers)"},
		},
		{
			name: "pod UID from the sandbox when the label is missing",
			containers: []*runtimeapi.Container{
				{Id: "x1", PodSandboxId: "sbx", State: exited, CreatedAt: t0.Add(-2 * time.Minute).UnixNano(), Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
			},
			sandboxes: []*runtimeapi.PodSandbox{{Id: "sbx", Metadata: &runtimeapi.PodSandboxMetadata{Uid: "gone"}}},
			p:         DefaultPolicy(),
			pods:      pods{deleted: map[string]bool{"gone": true}},
			want:      []string{"x1 (pod deleted)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ids(PlanContainers(tc.containers, tc.sandboxes, tc.p, tc.pods, tc.evictNonDeleted, t0))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PlanContainers (-want +got):\n%s", diff)
			}
		})
	}
}

func sandbox(id, uid string, ready bool, ago time.Duration) *runtimeapi.PodSandbox {
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandbox{Id: id, State: st, CreatedAt: t0.Add(-ago).UnixNano(), Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid}}
}

func TestPlanSandboxes(t *testing.T) {
	t.Parallel()
	sbs := []*runtimeapi.PodSandbox{
		sandbox("live-new", "live", false, time.Minute),
		sandbox("live-old", "live", false, time.Hour),
		sandbox("live-oldest-has-ctr", "live", false, 2*time.Hour),
		sandbox("gone-ready", "gone", true, time.Hour),
		sandbox("gone-old", "gone", false, time.Hour),
		sandbox("term-old", "term", false, time.Hour),
	}
	ctrs := []*runtimeapi.Container{{Id: "c", PodSandboxId: "live-oldest-has-ctr"}}
	ps := pods{deleted: map[string]bool{"gone": true}, terminated: map[string]bool{"term": true}}
	tests := []struct {
		name            string
		evictNonDeleted bool
		want            []string
	}{
		{"periodic", false, []string{"gone-old (pod deleted)", "live-old (older sandbox of the pod)"}},
		{"eviction reclaim", true, []string{"gone-old (pod deleted)", "live-old (older sandbox of the pod)", "term-old (pod terminated)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, ids(PlanSandboxes(sbs, ctrs, ps, tc.evictNonDeleted))); diff != "" {
				t.Errorf("PlanSandboxes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	if err := (Policy{MinAge: -time.Second}).Validate(); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("negative MinAge: %v, want ErrInvalidPolicy", err)
	}
}
