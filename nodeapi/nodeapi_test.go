package nodeapi

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAmount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name v1.ResourceName
		q    string
		want int64
	}{
		{v1.ResourceCPU, "1500m", 1500},
		{v1.ResourceCPU, "2", 2000},
		{v1.ResourceMemory, "1Gi", 1 << 30},
		{v1.ResourceMemory, "-1", 0},
		{v1.ResourceCPU, "9223372036854775807", math.MaxInt64}, // millicores beyond int64
		{v1.ResourceMemory, "16Ei", math.MaxInt64},
		{"example.com/gpu", "3", 3},
	} {
		if got := Amount(tc.name, resource.MustParse(tc.q)); got != tc.want {
			t.Errorf("Amount(%s, %s) = %d, want %d", tc.name, tc.q, got, tc.want)
		}
	}
}

func TestPodRequestSumsSaturate(t *testing.T) {
	t.Parallel()
	big := v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Ei")}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Resources: v1.ResourceRequirements{Requests: big}},
		{Name: "b", Resources: v1.ResourceRequirements{Requests: big}},
	}}}
	if got := PodRequest(pod, v1.ResourceMemory); got != math.MaxInt64 {
		t.Errorf("16Ei of requests = %d, want MaxInt64", got)
	}
	if got := PodRequest(pod, v1.ResourcePods); got != 1 {
		t.Errorf("pods = %d, want 1", got)
	}
	if got := PodRequest(pod, v1.ResourceCPU); got != 0 {
		t.Errorf("cpu = %d, want 0", got)
	}
}

func TestIsExtendedResourceName(t *testing.T) {
	t.Parallel()
	for name, want := range map[v1.ResourceName]bool{
		"example.com/gpu":         true,
		"vendor/dev":              true,
		"cpu":                     false,
		"kubernetes.io/foo":       false,
		"requests.example.com/x":  false,
		"example.com/has space":   false,
		"hugepages-2Mi":           false,
		"nvidia.com/gpu.shared-1": true,
	} {
		if got := IsExtendedResourceName(name); got != want {
			t.Errorf("IsExtendedResourceName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestKeysAndNames(t *testing.T) {
	t.Parallel()
	a := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	b := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u2"}}
	c := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	if KeyOf(a) == KeyOf(b) || KeyOf(a) == KeyOf(c) || KeyOf(c) != KeyOf(c.DeepCopy()) {
		t.Errorf("keys: %q %q %q", KeyOf(a), KeyOf(b), KeyOf(c))
	}
	if PodName(a) != "ns/p" || PodName(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}}) != "x" {
		t.Errorf("names: %q", PodName(a))
	}
}

func TestGracePeriod(t *testing.T) {
	t.Parallel()
	ten, one, neg := int64(10), int64(1), int64(-5)
	pod := &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: &ten}}
	for _, tc := range []struct {
		req  KillRequest
		want time.Duration
	}{
		{KillRequest{Pod: &v1.Pod{}}, 30 * time.Second},
		{KillRequest{Pod: pod}, 10 * time.Second},
		{KillRequest{Pod: pod, GracePeriodOverride: &one}, time.Second},
		{KillRequest{Pod: pod, GracePeriodOverride: &neg}, 0},
	} {
		if got := tc.req.GracePeriod(); got != tc.want {
			t.Errorf("GracePeriod() = %v, want %v", got, tc.want)
		}
	}
}

func TestLogRecorder(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := LogRecorder{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	var rec Recorder = r
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	rec.AnnotatedEventf(pod, map[string]string{"k": "v"}, v1.EventTypeWarning, "Evicted", "low on %s", "memory")
	rec.Event(NodeRef("n1"), v1.EventTypeNormal, "NodeReady", "ready")
	out := buf.String()
	for _, want := range []string{`level=WARN`, `reason=Evicted`, `object="Pod ns/p"`, `message="low on memory"`, `annotations=map[k:v]`,
		`level=INFO`, `object="Node n1"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	LogRecorder{}.Event(pod, v1.EventTypeNormal, "x", "y") // zero value discards
}
