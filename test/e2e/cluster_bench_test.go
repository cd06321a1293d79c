package e2e

// The cluster node's figures (docs/benchmarks.md, "In a cluster"): how long a
// pod created in the API server takes to show Running there, and what the
// agent costs the API server and the machine with 100 API pods running. Run
// them with
//
//	go test -run '^$' -bench Cluster -benchtime 1x ./test/e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// clusterPodSamples is how many pods BenchmarkClusterPods/CreateToRunning
// creates one at a time.
const clusterPodSamples = 20

// runningSeen watches the namespace's pods and sends the name of each pod the
// first time the API server holds it Running with its containers running.
func (c *cluster) runningSeen(ctx context.Context) <-chan string {
	c.t.Helper()
	w, err := c.admin.CoreV1().Pods(c.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	out := make(chan string, 256)
	go func() {
		defer w.Stop()
		seen := map[string]bool{}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok || ev.Type == watch.Deleted || seen[p.Name] || p.Status.Phase != v1.PodRunning {
				continue
			}
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
				continue
			}
			seen[p.Name] = true
			out <- p.Name
		}
	}()
	return out
}

// apiRequests is the API server's apiserver_request_total by label set.
func (c *cluster) apiRequests(b *testing.B) map[string]float64 {
	b.Helper()
	raw, err := c.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			b.Fatalf("metrics: %q: %v", line, err)
		}
		out[line[:strings.LastIndexByte(line, ' ')]] += v
	}
	return out
}

// requestDelta is the number of requests between two apiRequests readings,
// and the label sets that grew most, with their counts.
func requestDelta(r0, r1 map[string]float64) (float64, []string) {
	var sum float64
	var grew []string
	for k, v := range r1 {
		if d := v - r0[k]; d > 0 {
			sum += d
			grew = append(grew, fmt.Sprintf("%6.0f %s", d, k))
		}
	}
	slices.Sort(grew)
	slices.Reverse(grew)
	return sum, grew[:min(len(grew), 8)]
}

// BenchmarkClusterPods: CreateToRunning creates clusterPodSamples pods one at
// a time (after one warm-up), each only when the previous one ran, and takes
// the time from the create call to the API server's watch showing the pod
// Running (goal: p99 <= 1 s with a local image). Idle then runs 100 pods and
// measures, over 60 s, the API requests per minute the node makes (its
// identity's lines in the API server's audit log), and the agent's RSS and
// CPU.
func BenchmarkClusterPods(b *testing.B) {
	// The API server's audit log holds the node's requests, one line each.
	dir := b.TempDir()
	policy, audit := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:node:`+clusterNode+`"]
- level: None
`), 0o644); err != nil {
		b.Fatal(err)
	}
	c := startCluster(b, Options{}, "--audit-policy-file="+policy, "--audit-log-path="+audit)
	nodeRequests := func() []string {
		raw, err := os.ReadFile(audit)
		if err != nil {
			b.Fatal(err)
		}
		var kinds []string
		for line := range bytes.Lines(raw) {
			var e struct {
				Verb      string `json:"verb"`
				ObjectRef struct {
					Resource, Subresource, Name string
				} `json:"objectRef"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				b.Fatalf("audit log: %v", err)
			}
			kinds = append(kinds, fmt.Sprintf("%s %s/%s %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Name))
		}
		return kinds
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := c.runningSeen(ctx)
	wait := func(name string, timeout time.Duration) time.Time {
		for {
			select {
			case got := <-seen:
				if got == name {
					return time.Now()
				}
			case <-time.After(timeout):
				b.Fatalf("pod %s not Running in the API after %v", name, timeout)
			}
		}
	}
	var samples []time.Duration
	for i := range clusterPodSamples + 1 {
		name := fmt.Sprintf("one-%d", i)
		t0 := time.Now()
		c.create(c.apiPod(name, "sleep"))
		d := wait(name, 60*time.Second).Sub(t0)
		if i > 0 {
			samples = append(samples, d)
		}
	}
	b.Logf("create to Running in the API, %d pods one at a time: p50 %v, p99 %v", len(samples), percentile(samples, 50), percentile(samples, 99))
	b.ReportMetric(ms(percentile(samples, 50)), "create-to-running-p50-ms")
	b.ReportMetric(ms(percentile(samples, 99)), "create-to-running-p99-ms")

	for i := clusterPodSamples + 1; i < hundred; i++ {
		c.create(c.apiPod(fmt.Sprintf("one-%d", i), "sleep"))
	}
	for range hundred - clusterPodSamples - 1 {
		select {
		case <-seen:
		case <-time.After(5 * time.Minute):
			b.Fatal("100 pods not Running in the API after 5 min")
		}
	}
	time.Sleep(15 * time.Second) // the start's status writes settle: the API server's state
	pid := c.agent.PID()
	load0 := loadAverage(b)
	r0, n0, cpu0, t0 := c.apiRequests(b), nodeRequests(), procCPU(b, pid), time.Now()
	time.Sleep(time.Minute) // the measured steady state
	r1, n1, cpu1, t1 := c.apiRequests(b), nodeRequests(), procCPU(b, pid), time.Now()
	mem := procRSS(b, pid)
	all, top := requestDelta(r0, r1)
	perMin := float64(len(n1)-len(n0)) / t1.Sub(t0).Minutes()
	byKind := map[string]int{}
	for _, k := range n1[len(n0):] {
		byKind[k]++
	}
	var kinds []string
	for k, n := range byKind {
		kinds = append(kinds, fmt.Sprintf("%4d %s", n, k))
	}
	slices.Sort(kinds)
	slices.Reverse(kinds)
	b.Logf("the node's requests over the minute, by kind:\n%s", strings.Join(kinds[:min(len(kinds), 10)], "\n"))
	b.Logf("all API requests over the minute (%.0f, the API server's own and the benchmark's included), by kind:\n%s", all, strings.Join(top, "\n"))
	b.Logf("steady state with 100 API pods: %.1f API requests/min, agent RSS %.1f MB, CPU %.2f %% (load %.1f to %.1f)",
		perMin, mem.rss, 100*(cpu1-cpu0).Seconds()/t1.Sub(t0).Seconds(), load0, loadAverage(b))
	b.ReportMetric(perMin, "api-requests/min")
	b.ReportMetric(mem.rss, "agent-rss-MB")
	b.ReportMetric(100*(cpu1-cpu0).Seconds()/t1.Sub(t0).Seconds(), "agent-cpu-%")
}
