package simulate

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden timelines of examples/scenarios")

// TestExampleScenarios plays every scenario under examples/scenarios and compares
// its JSON timeline with the golden file next to it (regenerate with -rewrite).
func TestExampleScenarios(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../examples/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			sc, err := Load(t.Context(), file)
			if err != nil {
				t.Fatal(err)
			}
			events, err := Run(t.Context(), sc, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := WriteJSON(&got, events); err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden.jsonl"
			if *rewrite {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/offline/simulate -rewrite)", err)
			}
			if diff := cmp.Diff(string(want), got.String()); diff != "" {
				t.Errorf("timeline of %s (-want +got):\n%s", file, diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"no until", `steps: []`, `until: ""`},
		{"bad until", `until: soon`, `until: "soon"`},
		{"unknown field", "until: 1m\nstepz: []", `unknown field "stepz"`},
		{"steps out of order", "until: 1m\nsteps: [{at: 30s}, {at: 10s}]", `steps[1].at: "10s": steps must be in time order`},
		{"step after until", "until: 1m\nsteps: [{at: 2m}]", `steps[0].at: "2m": after until`},
		{"bad action", "until: 1m\nsteps: [{at: 0s, do: [explode]}]", `steps[0].do[0]: "explode": unknown action`},
		{"bad free", "until: 1m\nsteps: [{at: 0s, do: [{freeImageSpace: -1}]}]", `steps[0].do[0]`},
		{"bad config", "until: 1m\nconfig: {evictionHard: {memory.available: abc}}", `evictionHard[memory.available]: "abc"`},
		{"bad capacity", "until: 1m\nnode: {capacity: {cpu: lots}}", `node.capacity[cpu]: "lots"`},
		{"pod without name", "until: 1m\nsteps: [{at: 0s, pods: [{spec: {}}]}]", `steps[0].pods`},
		{"image without id", "until: 1m\nsteps: [{at: 0s, images: [{size: 10}]}]", `steps[0].images[0]: image has no id`},
		{"summary without node", "until: 1m\nsteps: [{at: 0s, summary: {pods: []}}]", `no node stats`},
		{"not yaml", "until: [", `s.yaml`},
		{"unknown step field", "until: 1m\nsteps: [{at: 0s}, {at: 1s, bogus: 1}]", `steps[1]: unknown field "bogus"`},
		{"unknown imageFs field", "until: 1m\nsteps: [{at: 0s, imageFs: {capacityBytes: 1, bogus: 2}}]", `steps[0].imageFs: unknown field "bogus"`},
		{"imageFs available above capacity", "until: 1m\nsteps: [{at: 0s, imageFs: {capacityBytes: 1, availableBytes: 2}}]", `steps[0].imageFs: availableBytes 2 exceeds capacityBytes 1`},
		{"unknown pod field", "until: 1m\nsteps: [{at: 0s, pods: [{metadata: {name: p}, spec: {containers: [{name: c, bogusField: 1}]}}]}]", `steps[0].pods: pod p: unknown field "spec.containers[0].bogusField"`},
		{"unknown summary field", "until: 1m\nsteps: [{at: 0s}, {at: 1s, summary: {node: {nodeName: n1, memory: {availableByts: 1, workingSetBytes: 2}}}}]", `s.yaml: steps[1].summary: unknown field "node.memory.availableByts"`},
		{"unknown summary pod field", "until: 1m\nsteps: [{at: 0s, summary: {node: {nodeName: n1, memory: {}}, pods: [{podRef: {name: p}, memroy: {}}]}}]", `s.yaml: steps[0].summary: unknown field "pods[0].memroy"`},
		{"summary gauge beyond int64", "until: 1m\nsteps: [{at: 0s, summary: {node: {nodeName: n1, memory: {availableBytes: 18446744073709551615, workingSetBytes: 2}}}}]", `s.yaml: steps[0].summary: node.memory.availableBytes: 18446744073709551615: too large`},
		{"negative capacity", "until: 1m\nnode: {capacity: {memory: -8Gi}}", `s.yaml: node.capacity[memory]: "-8Gi": must not be negative`},
		{"capacity beyond int64", "until: 1m\nnode: {capacity: {memory: 16Ei}}", `s.yaml: node.capacity[memory]: "16Ei": too large`},
		{"cpu capacity beyond int64 millicores", "until: 1m\nnode: {capacity: {cpu: \"1e16\"}}", `s.yaml: node.capacity[cpu]: "1e16": too large`},
		{"negative until", "until: -1m", `s.yaml: until: "-1m": want a non-negative duration such as 10m`},
		{"pod quantity beyond int64", "until: 1m\nsteps: [{at: 0s, pods: [{metadata: {name: p}, spec: {containers: [{name: c}], overhead: {memory: 8Ei}}}]}]", `s.yaml: steps[0].pods: pod p: spec.overhead.memory: "8Ei": too large`},
		{"bad containerFs", "until: 1m\nnode: {dedicatedImageFs: true, containerFs: rootfs}", `s.yaml: node.containerFs: "rootfs": want nodefs or imagefs`},
		{"containerFs on a missing imagefs", "until: 1m\nnode: {containerFs: imagefs}", `s.yaml: node.containerFs: "imagefs": needs dedicatedImageFs: true`},
		{"bad stuck pod name", "until: 1m\nsteps: [{at: 0s, stuckTerminating: [/a]}]", `s.yaml: steps[0].stuckTerminating[0]: "/a": want a pod as namespace/name`},
		{"bad finished pod name", "until: 1m\nsteps: [{at: 0s, finishTerminating: [\"\"]}]", `s.yaml: steps[0].finishTerminating[0]: "": want a pod as namespace/name`},
		{"malformed pod quantity", "until: 1m\nsteps: [{at: 0s, admit: {metadata: {name: p}, spec: {containers: [{name: c, resources: {requests: {memory: 12x}}}]}}}]", `steps[0].admit: pod p: spec.containers[0].resources.requests.memory: "12x"`},
		{"until beyond the maximum", "until: 2562047h47m16.854775807s", `s.yaml: until: "2562047h47m16.854775807s": beyond the maximum of 87600h0m0s`},
		{"until just beyond the maximum", "until: 87600h1ns", `s.yaml: until: "87600h1ns": beyond the maximum`},
		{"step at beyond the maximum", "until: 87600h\nsteps: [{at: 87601h}]", `s.yaml: steps[0].at: "87601h": beyond the maximum of 87600h0m0s`},
		{"image size beyond int64", "until: 1m\nsteps: [{at: 0s, images: [{id: a, size: 1}, {id: b, size: 9223372036854775808}]}]", `s.yaml: steps[0].images[1].size: 9223372036854775808: too large`},
		{"imageFs capacity beyond int64", "until: 1m\nsteps: [{at: 0s, imageFs: {capacityBytes: 18446744073709551615}}]", `s.yaml: steps[0].imageFs.capacityBytes: 18446744073709551615: too large`},
		{"imageFs available beyond int64", "until: 1m\nsteps: [{at: 0s, imageFs: {capacityBytes: 1, availableBytes: 9223372036854775808}}]", `s.yaml: steps[0].imageFs.availableBytes: 9223372036854775808: too large`},
		{"duplicate image id", "until: 1m\nsteps: [{at: 0s, images: [{id: a, size: 1}, {id: b}, {id: a, size: 2}]}]", `s.yaml: steps[0].images[2].id: "a": duplicate of steps[0].images[0]`},
		{"duplicate image id after normalisation", "until: 1m\nsteps: [{at: 0s, images: [{id: 'sha256:a'}, {id: a}]}]", `s.yaml: steps[0].images[1].id: "a": duplicate of steps[0].images[0]`},
		{"name read as a YAML boolean", "until: 1m\nsteps: [{at: 0s, pods: [{metadata: {name: on}}]}]", `s.yaml: steps[0].pods[0].metadata.name: on (line 2) is read as the boolean true (YAML 1.1): quote it ("on") for a string, or write true`},
		{"summary time", "until: 1m\nsteps: [{at: 0s, summary: {node: {nodeName: node1, memory: {time: not-a-time}}}}]", `s.yaml: steps[0].summary: node.memory.time: "not-a-time": not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)`},
		{"duplicate container id", "until: 1m\nsteps: [{at: 0s}, {at: 1s, containers: [{id: c1}, {id: c1}]}]", `s.yaml: steps[1].containers[1].id: "c1": duplicate of steps[1].containers[0]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("s.yaml", []byte(tc.doc))
			if !errors.Is(err, ErrBadScenario) {
				t.Fatalf("err = %v, want ErrBadScenario", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "s.yaml") {
				t.Errorf("err = %q, want it to start with the file and contain %q", err, tc.want)
			}
		})
	}
}

// A scenario may last the maximum: the run ends without overflowing the clock.
func TestUntilAtTheMaximum(t *testing.T) {
	t.Parallel()
	sc, err := Parse("s.yaml", []byte("until: 87600h\nloops: false\nsteps: [{at: 87600h, do: [detectImages]}]"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].At != MaxDuration {
		t.Errorf("events = %+v, want one action result at %s", events, MaxDuration)
	}
}

// A ten-minute scenario with loops runs its eviction passes on the virtual clock,
// not in real time.
func TestLoopsRunOnVirtualClock(t *testing.T) {
	t.Parallel()
	sc, err := Parse("s.yaml", []byte(`
until: 10m
steps:
  - at: 0s
    summary:
      node: {memory: {availableBytes: 52428800, workingSetBytes: 4294967296}}
      pods: [{podRef: {name: a, namespace: d, uid: u1}, memory: {workingSetBytes: 4194304000}}]
    pods: [{metadata: {name: a, namespace: d, uid: u1}, spec: {containers: [{name: c}]}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.At.String()+" "+e.Event)
	}
	// The eviction gives the pod's memory back; MemoryPressure was last seen at 0s
	// and clears at the first pass 5m (the default transition period) later: the
	// passes run at 0s, 1s (after the eviction), then every 10s. With no imageFs
	// given, periodic image GC fails at 0s (logged once), then at 5m and 10m
	// again, which the kubelet reports as ImageGCFailed.
	want := []string{"0s ThresholdMet", "0s ConditionChanged", "0s Evicted", "5m0s ImageGCFailed", "5m1s ConditionChanged", "10m0s ImageGCFailed"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Explicit actions run the real collectors; with loops off nothing else runs.
func TestExplicitActions(t *testing.T) {
	t.Parallel()
	sc, err := Parse("s.yaml", []byte(`
loops: false
config: {imageMinimumGCAge: 1m, containerGC: {maxPerPodContainer: 0}}
until: 5m
steps:
  - at: 0s
    imageFs: {capacityBytes: 1000, availableBytes: 100}
    images:
      - {id: old, size: "300"}
      - {id: older, size: "200"}
    containers:
      - {id: dead, imageRef: old, state: CONTAINER_EXITED, createdAt: "1", labels: {io.kubernetes.pod.uid: gone, io.kubernetes.container.name: c}}
    do: [detectImages, {freeImageSpace: 250}]
  - at: 2m
    do: [garbageCollectContainers, {freeImageSpace: 250}, deleteUnusedImages, evictionPass]
`))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		line := e.At.String() + " " + e.Event + " " + e.Action + e.ID
		if e.Freed != nil {
			line += fmt.Sprintf(" freed=%d", *e.Freed)
		}
		if e.Error != nil {
			line += " error"
		}
		got = append(got, line)
	}
	want := []string{
		// The first detection dates images "in the past", so they are old enough at
		// once; "old" is kept while the dead container that used it exists.
		"0s ActionResult detectImages freed=0",
		"0s ImageRemoved older",
		"0s ActionResult freeImageSpace freed=200", // wanted 250: only 200 could go, not an error
		"2m0s ContainerRemoved dead",
		"2m0s ActionResult garbageCollectContainers freed=0",
		"2m0s ImageRemoved old",
		"2m0s ActionResult freeImageSpace freed=300",
		"2m0s ActionResult deleteUnusedImages freed=0",
		"2m0s ActionResult evictionPass freed=0 error", // no summary given
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// garbageCollectImages runs the real image GC pass: at 90% usage it frees down to
// the low threshold (80%), least recently used first; a pinned image stays.
func TestGarbageCollectImagesAction(t *testing.T) {
	t.Parallel()
	sc, err := Parse("s.yaml", []byte(`
loops: false
until: 1m
steps:
  - at: 0s
    imageFs: {capacityBytes: 1000, availableBytes: 100}
    images:
      - {id: pause, size: "10", pinned: true}
      - {id: a, size: "60"}
      - {id: b, size: "60"}
      - {id: c, size: "60"}
    do: [detectImages, garbageCollectImages]
`))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		line := e.Event + " " + e.ID + e.Action
		if e.Freed != nil {
			line += fmt.Sprintf(" freed=%d", *e.Freed)
		}
		if e.Error != nil {
			line += " error: " + *e.Error
		}
		got = append(got, line)
	}
	// The first detection dates the images "in the past" (without it, GC's own
	// detection would find them new, too young to remove). 900 of 1000 bytes are
	// used; 80% needs 100 bytes freed: a and b (never used, tied, by ID).
	want := []string{"ActionResult detectImages freed=0", "ImageRemoved a", "ImageRemoved b", "ActionResult garbageCollectImages freed=120"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// An evicted pod is reported with the final status the eviction manager asked
// for, as the kubelet records it: phase Failed, reason Evicted, the message, a
// true DisruptionTarget condition, and the grace period (1 s for a hard
// threshold, whatever the pod's own).
func TestEvictedPodStatus(t *testing.T) {
	t.Parallel()
	sc, err := Parse("s.yaml", []byte(`
until: 0s
steps:
  - at: 0s
    summary:
      node: {memory: {availableBytes: 52428800, workingSetBytes: 4294967296}}
      pods: [{podRef: {name: a, namespace: d, uid: u1}, memory: {workingSetBytes: 4194304000}}]
    pods: [{metadata: {name: a, namespace: d, uid: u1}, spec: {terminationGracePeriodSeconds: 90, containers: [{name: c}]}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Run(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	for _, e := range events {
		if e.Event == EventEvicted {
			got = append(got, e)
		}
	}
	msg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
	want := []Event{{Event: EventEvicted, Signal: "memory.available", Namespace: "d", Name: "a", UID: "u1",
		Reason: "Evicted", Message: msg, Phase: "Failed", GracePeriodSeconds: ptr(int64(1)),
		Conditions: []PodCondition{{Type: "DisruptionTarget", Status: "True", Reason: "TerminationByKubelet", Message: msg}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("evicted (-want +got):\n%s", diff)
	}
	var text bytes.Buffer
	if err := WriteText(&text, got); err != nil {
		t.Fatal(err)
	}
	wantText := "      0s  Evicted             d/a (memory.available): " + strings.TrimSpace(msg) + " [phase Failed, grace period 1s, DisruptionTarget]\n"
	if diff := cmp.Diff(wantText, text.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
}
