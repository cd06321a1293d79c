package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	preemptionRunning  = "../../examples/preemption/running.json"
	preemptionCritical = "../../examples/preemption/critical-pod.yaml"
)

// runPreemption runs "nodekeeper explain preemption args..." and returns the exit
// code, stdout and stderr.
func runPreemption(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), append([]string{"explain", "preemption"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func preemptionJSONOut(t *testing.T, args ...string) preemptionDoc {
	t.Helper()
	code, out, errOut := runPreemption(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc preemptionDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return doc
}

// matchLine reports whether some line of s matches pattern.
func matchLine(s, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, line := range strings.Split(s, "\n") {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The example of docs/explain.md and examples/preemption/README.md: the static etcd pod does not fit; the kubelet would preempt
// the BestEffort batch-worker and the Burstable web-1.
func TestExplainPreemptionExample(t *testing.T) {
	t.Parallel()
	doc := preemptionJSONOut(t, "--pods", preemptionRunning, "--pod", preemptionCritical,
		"--allocatable", "cpu=4,memory=8Gi,ephemeral-storage=20Gi,pods=110")
	want := preemptionDoc{
		Critical: true,
		Admitted: true,
		Failures: []preemptFailureJSON{
			{Resource: "cpu", Requested: "1", Used: "3600m", Capacity: "4"},
			{Resource: "memory", Requested: "1Gi", Used: "7296Mi", Capacity: "8Gi"},
			{Resource: "ephemeral-storage", Requested: "5632Mi", Used: "16884Mi", Capacity: "20Gi"},
		},
		Victims: []victimJSON{
			{Namespace: "default", Name: "batch-worker", QOS: "BestEffort", Priority: 0},
			{Namespace: "default", Name: "web-1", QOS: "Burstable", Priority: 0},
		},
	}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Errorf("explain preemption (-want +got):\n%s", diff)
	}
}

func TestExplainPreemptionTable(t *testing.T) {
	t.Parallel()
	code, out, errOut := runPreemption(t, "--pods", preemptionRunning, "--pod", preemptionCritical,
		"--allocatable", "cpu=4,memory=8Gi,ephemeral-storage=20Gi,pods=110")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, pattern := range []string{
		`^Critical:\s+yes \(static pod, source file\)$`,
		`^Admitted:\s+yes, after preempting 2 pod\(s\)$`,
		`^cpu\s+1\s+3600m\s+4\s+600m$`,
		`^ephemeral-storage\s+5632Mi\s+16884Mi\s+20Gi\s+2036Mi$`,
		`^1\s+default\s+batch-worker\s+BestEffort\s+0\s+ephemeral-storage=10Gi$`,
		`^2\s+default\s+web-1\s+Burstable\s+0\s+cpu=1, memory=2Gi, ephemeral-storage=1Gi$`,
	} {
		if !matchLine(out, pattern) {
			t.Errorf("no line matches %q in:\n%s", pattern, out)
		}
	}
}

func TestExplainPreemptionCases(t *testing.T) {
	t.Parallel()
	plain := writeFile(t, "plain.yaml", `apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: default}
spec:
  containers:
  - name: c
    resources: {requests: {cpu: "1"}}
`)
	small := writeFile(t, "small.yaml", `apiVersion: v1
kind: Pod
metadata: {name: small, namespace: default, annotations: {kubernetes.io/config.source: file}}
spec:
  containers:
  - name: c
    resources: {requests: {cpu: 100m}}
`)
	huge := writeFile(t, "huge.yaml", `apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: kube-system}
spec:
  priority: 2000000000
  containers:
  - name: c
    resources: {requests: {cpu: "64"}}
`)
	errMsg := func(s string) *string { return &s }
	tests := []struct {
		name string
		args []string
		want preemptionDoc
	}{
		{
			name: "fits as is",
			args: []string{"--pod", small, "--allocatable", "cpu=4,memory=8Gi"},
			want: preemptionDoc{Critical: true, Admitted: true, Failures: []preemptFailureJSON{}, Victims: []victimJSON{}},
		},
		{
			name: "not critical",
			args: []string{"--pod", plain, "--allocatable", "cpu=4,memory=8Gi"},
			want: preemptionDoc{
				Admitted: false,
				Failures: []preemptFailureJSON{{Resource: "cpu", Requested: "1", Used: "3600m", Capacity: "4"}},
				Victims:  []victimJSON{},
				Error:    errMsg("OutOfcpu: Node didn't have enough resource: cpu, requested: 1000, used: 3600, capacity: 4000"),
			},
		},
		{
			name: "no set of pods suffices",
			args: []string{"--pod", huge, "--allocatable", "cpu=4,memory=8Gi"},
			want: preemptionDoc{
				Critical: true,
				Failures: []preemptFailureJSON{{Resource: "cpu", Requested: "64", Used: "3600m", Capacity: "4"}},
				Victims:  []victimJSON{},
				Error:    errMsg("UnexpectedAdmissionError: Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 60100), ]"),
			},
		},
		{
			name: "too many pods",
			args: []string{"--pod", small, "--allocatable", "cpu=4,memory=8Gi,pods=6"},
			want: preemptionDoc{
				Critical: true, Admitted: true,
				Failures: []preemptFailureJSON{{Resource: "pods", Requested: "1", Used: "6", Capacity: "6"}},
				// Every BestEffort pod frees a slot; the kubelet takes the last one.
				Victims: []victimJSON{{Namespace: "default", Name: "cache-warmer", QOS: "BestEffort"}},
			},
		},
		{
			name: "capacity with the kubelet's default reservations",
			// memory: 8Gi - 100Mi hard eviction threshold = 8092Mi < 7296Mi + 1Gi.
			args: []string{"--pod", preemptionCritical, "--capacity", "cpu=8,memory=8Gi,ephemeral-storage=200Gi"},
			want: preemptionDoc{
				Critical: true, Admitted: true,
				Failures: []preemptFailureJSON{{Resource: "memory", Requested: "1Gi", Used: "7296Mi", Capacity: "8092Mi"}},
				Victims:  []victimJSON{{Namespace: "default", Name: "web-2", QOS: "Burstable"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := preemptionJSONOut(t, append([]string{"--pods", preemptionRunning}, tc.args...)...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("explain preemption (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExplainPreemptionConfig(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "kubelet.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
kubeReserved: {cpu: 300m, memory: 1Gi}
systemReserved: {cpu: 200m, memory: 512Mi}
maxPods: 6
`)
	doc := preemptionJSONOut(t, "--pods", preemptionRunning, "--pod", preemptionCritical,
		"--config", cfg, "--capacity", "cpu=4,memory=10Gi,ephemeral-storage=100Gi")
	if !doc.Critical || !doc.Admitted || doc.Error != nil {
		t.Errorf("critical %v admitted %v error %v; want a critical pod admitted", doc.Critical, doc.Admitted, doc.Error)
	}
	// allocatable: cpu 4 - 300m - 200m; pods from maxPods; memory 10Gi - 1.5Gi -
	// the default 100Mi hard eviction threshold, which is enough.
	want := []preemptFailureJSON{
		{Resource: "pods", Requested: "1", Used: "6", Capacity: "6"},
		{Resource: "cpu", Requested: "1", Used: "3600m", Capacity: "3500m"},
	}
	if diff := cmp.Diff(want, doc.Failures); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	var victims []string
	for _, v := range doc.Victims {
		victims = append(victims, v.Name)
	}
	// 1100m of cpu is short (the node is already 100m over): web-1, then web-2.
	// They also free the pod slot, so no besteffort pod is needed.
	if diff := cmp.Diff([]string{"web-1", "web-2"}, victims); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}

func TestExplainPreemptionBadInput(t *testing.T) {
	t.Parallel()
	badQty := writeFile(t, "bad.yaml", `apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: default}
spec:
  containers:
  - name: c
    resources: {requests: {memory: 1Gb}}
`)
	badConfig := writeFile(t, "k.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: lots\n")
	negative := writeFile(t, "negative.json", `{"kind":"PodList","items":[{"metadata":{"name":"neg"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"-1"}}}]}}]}`)
	tests := []struct {
		name string
		args []string
		want string // a substring of the one-line error
	}{
		{"missing --pod", []string{"--pods", preemptionRunning, "--allocatable", "cpu=1"}, "--pod is required"},
		{"missing --pods", []string{"--pod", preemptionCritical, "--allocatable", "cpu=1"}, "--pods is required"},
		{"no node", []string{"--pods", preemptionRunning, "--pod", preemptionCritical}, "--allocatable or --capacity is required"},
		{"both node forms", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--allocatable", "cpu=1", "--capacity", "cpu=1"}, "not both"},
		{"bad allocatable quantity", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--allocatable", "cpu=4,memory=8XB"}, `--allocatable: memory: "8XB" is not a valid quantity`},
		{"bad allocatable entry", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--allocatable", "cpu"}, `--allocatable: entry "cpu": want NAME=QUANTITY`},
		{"negative allocatable", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--allocatable", "cpu=-1"}, `--allocatable: cpu: "-1" must not be negative`},
		{"allocatable beyond int64", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--allocatable", "cpu=1e30,memory=8Gi"}, `--allocatable: cpu: "1e30": too large`},
		{"bad capacity", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--capacity", "memory=lots"}, `--capacity: memory: "lots" is not a valid quantity`},
		{"malformed quantity in the pod", []string{"--pods", preemptionRunning, "--pod", badQty, "--allocatable", "cpu=1"}, `bad.yaml: pod default/bad: spec.containers[0].resources.requests.memory: "1Gb"`},
		{"negative request in running pods", []string{"--pods", negative, "--pod", preemptionCritical, "--allocatable", "cpu=1"}, `negative.json: pod neg: spec.containers[0].resources.requests.cpu: "-1": must not be negative`},
		{"bad config", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--config", badConfig, "--capacity", "cpu=1"}, "k.yaml"},
		{"missing file", []string{"--pods", "nope.json", "--pod", preemptionCritical, "--allocatable", "cpu=1"}, "nope.json"},
		{"bad output", []string{"--pods", preemptionRunning, "--pod", preemptionCritical, "--allocatable", "cpu=1", "-o", "yaml"}, "--output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runPreemption(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stdout %q", code, out)
			}
			if strings.Count(strings.TrimRight(errOut, "\n"), "\n") != 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr = %q, want one line containing %q", errOut, tc.want)
			}
		})
	}
}

// A resource the new pod requests but the node description leaves out counts as
// 0, and the user is told so.
func TestExplainPreemptionWarnsAboutMissingResources(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, "explain", "preemption", "--pods", "../../examples/preemption/running.json",
		"--pod", "../../examples/preemption/critical-pod.yaml", "--capacity", "cpu=4,memory=8Gi", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "has no ephemeral-storage; it counts as 0"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
}
