package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// withExtraPods writes a copy of the List at path with the extra pods
// appended, and returns the copy's path.
func withExtraPods(t *testing.T, path string, extra ...string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	items := list["items"].([]any)
	for _, e := range extra {
		var pod any
		if err := json.Unmarshal([]byte(e), &pod); err != nil {
			t.Fatal(err)
		}
		items = append(items, pod)
	}
	list["items"] = items
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A cluster-wide snapshot: a pod of another node (no stats on this one: it
// would rank first) and a finished pod are left out, with a warning.
func TestExplainEvictionLeavesOutOtherNodesAndFinishedPods(t *testing.T) {
	t.Parallel()
	pods := withExtraPods(t, "../../examples/eviction/memory/pods.json",
		`{"kind":"Pod","metadata":{"name":"elsewhere","namespace":"default","uid":"u-else"},"spec":{"nodeName":"worker-2","containers":[{"name":"c"}]},"status":{"phase":"Running"}}`,
		`{"kind":"Pod","metadata":{"name":"done","namespace":"default","uid":"u-done"},"spec":{"nodeName":"worker-1","containers":[{"name":"c"}]},"status":{"phase":"Succeeded"}}`)
	code, out, errOut := runCLI(t, "explain", "eviction", "-o", "json", "--pods", pods, "--summary", "../../examples/eviction/memory/summary.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc evictionDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"pod-c", "pod-a", "pod-e", "pod-b", "pod-d", "pod-f"}, rankedNames(doc.Rankings[0])); diff != "" {
		t.Errorf("memory ranking (-want +got):\n%s", diff)
	}
	if want := "warning: left out 1 finished (Succeeded or Failed) and 1 on other nodes than worker-1 of 8 pods"; strings.TrimSpace(errOut) != want {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}
}

func TestExplainPreemptionNodes(t *testing.T) {
	t.Parallel()
	// A copy of db-0 on another node would make a third victim if counted.
	otherNode := withExtraPods(t, preemptionRunning,
		`{"kind":"Pod","metadata":{"name":"db-0","namespace":"other","uid":"u-db-elsewhere"},"spec":{"nodeName":"worker-9","containers":[{"name":"db","resources":{"requests":{"cpu":"2","memory":"4Gi"}}}]},"status":{"phase":"Running"}}`)
	alloc := "cpu=4,memory=8Gi,ephemeral-storage=20Gi,pods=110"
	victims := func(doc preemptionDoc) []string {
		var names []string
		for _, v := range doc.Victims {
			names = append(names, v.Name)
		}
		return names
	}

	// The new pod names worker-1: the pod of worker-9 is left out.
	doc := preemptionJSONOut(t, "--pods", otherNode, "--pod", preemptionCritical, "--allocatable", alloc)
	if diff := cmp.Diff([]string{"batch-worker", "web-1"}, victims(doc)); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}

	// A new pod bound to no node, with pods of two nodes: which node is meant?
	unbound := filepath.Join(t.TempDir(), "unbound.yaml")
	data, err := os.ReadFile(preemptionCritical)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unbound, []byte(strings.Replace(string(data), "nodeName: worker-1", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runPreemption(t, "--pods", otherNode, "--pod", unbound, "--allocatable", alloc)
	if code != exitUsage || !strings.Contains(errOut, "pods of 2 nodes (worker-1, worker-9); name the node with --node") {
		t.Errorf("exit %d, stderr %q; want exit %d naming both nodes", code, errOut, exitUsage)
	}
	doc = preemptionJSONOut(t, "--pods", otherNode, "--pod", unbound, "--node", "worker-1", "--allocatable", alloc)
	if diff := cmp.Diff([]string{"batch-worker", "web-1"}, victims(doc)); diff != "" {
		t.Errorf("victims with --node (-want +got):\n%s", diff)
	}

	// A node without pods: kubectl prints an empty List.
	doc = preemptionJSONOut(t, "--pods", "../../internal/offline/snapshot/testdata/emptylist.json", "--pod", preemptionCritical, "--allocatable", alloc)
	if !doc.Admitted || len(doc.Failures) != 0 || len(doc.Victims) != 0 {
		t.Errorf("on an empty node: %+v, want admitted with no failures or victims", doc)
	}
}
