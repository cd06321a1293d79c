package simulate

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A pod whose shutdown does not complete: the eviction loop's kill waits for it
// 10 s (the kubelet's least kill timeout; 1.5 × its 1 s grace period is less),
// then records ExceededGracePeriod; the eviction manager then waits for the
// pod's cleanup, polling every second, and after 30 s gives up and runs its next
// pass. The pod kept its memory, so that pass evicts the next pod. Finished
// early, the kill returns at once and the next pass comes one poll later.
func TestStuckTerminatingPod(t *testing.T) {
	t.Parallel()
	const doc = `
until: 45s
steps:
  - at: 0s
    stuckTerminating: [d/a]
    summary:
      node: {memory: {availableBytes: 52428800, workingSetBytes: 4294967296}}
      pods:
        - {podRef: {name: a, namespace: d, uid: u1}, memory: {workingSetBytes: 3221225472}}
        - {podRef: {name: b, namespace: d, uid: u2}, memory: {workingSetBytes: 1073741824}}
    pods:
      - {metadata: {name: a, namespace: d, uid: u1}, spec: {containers: [{name: c}]}}
      - {metadata: {name: b, namespace: d, uid: u2}, spec: {containers: [{name: c}]}}
`
	for _, tc := range []struct {
		name   string
		finish string // a step finishing a's shutdown
		want   []string
		checks int // PodCleanedUp calls
	}{
		{"never finishes", "", []string{
			"0s ThresholdMet", "0s ConditionChanged", "0s Evicted d/a",
			"10s ExceededGracePeriod d/a",
			"40s Evicted d/b", // 30 polls (11 s to 40 s) found a not cleaned up
		}, 30 + 1},
		{"finishes while the kill waits", "\n  - at: 5s\n    finishTerminating: [d/a]", []string{
			"0s ThresholdMet", "0s ConditionChanged", "0s Evicted d/a",
			"5s Terminated d/a", // its memory comes back: no further eviction
		}, 1},
		{"finishes while the manager waits for cleanup", "\n  - at: 20s\n    finishTerminating: [d/a]", []string{
			"0s ThresholdMet", "0s ConditionChanged", "0s Evicted d/a",
			"10s ExceededGracePeriod d/a",
			"20s Terminated d/a",
		}, 10}, // 11 s to 20 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc, err := Parse("s.yaml", []byte(doc+tc.finish))
			if err != nil {
				t.Fatal(err)
			}
			s := newSim(sc, nil)
			events, err := s.run(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range events {
				line := e.At.String() + " " + e.Event
				if e.Name != "" {
					line += " " + e.Namespace + "/" + e.Name
				}
				got = append(got, line)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if s.n.cleanupChecks != tc.checks {
				t.Errorf("%d cleanup checks, want %d", s.n.cleanupChecks, tc.checks)
			}
		})
	}
}

// A preemption victim that is stuck terminating: admission, a step, cannot let
// time pass, so the kill gives up at once; the critical pod is admitted and the
// record says whose shutdown did not complete.
func TestStuckPreemptionVictim(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../../examples/scenarios/critical-preemption.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(data), "\n  - at: 0s\n", "\n  - at: 0s\n    stuckTerminating: [shop/api-1]\n", 1)
	if doc == string(data) {
		t.Fatal("critical-preemption.yaml has no step at 0s")
	}
	sc, err := Parse("s.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events[:3] {
		got = append(got, e.At.String()+" "+e.Event+" "+e.Name+" "+e.Message)
	}
	want := []string{
		"20s Preempted api-1 Preempted in order to admit critical pod",
		"20s ExceededGracePeriod api-1 Container runtime did not kill the pod within specified grace period.",
		"20s Admitted etcd-worker-1 The pod fits the node after preempting shop/api-1. The shutdown of shop/api-1 did not complete.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
