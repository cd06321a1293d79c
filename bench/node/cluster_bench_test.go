package node

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// clusterNS is the namespace of the API pods.
const clusterNS = "bench"

// nodeUser is the node identity's user name, as the audit log names it.
const nodeUser = "system:node:" + nodeName

// BenchmarkCluster joins each agent to one real kube-apiserver as the node
// nkbench (its client certificate) and measures (3): the time from a pod
// created in the API server with spec.nodeName set to the API server holding
// it Running, one at a time and then 100 created at once; and, with the 100
// running and settled, the API requests per minute the node makes (its
// user's lines in the API server's audit log) over two minutes. Between the
// agents the pods, the Node and its Lease are deleted and every sandbox is
// removed.
func BenchmarkCluster(b *testing.B) {
	e := setup(b)
	w := workload()
	dir := b.TempDir()
	policy, audit := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["`+nodeUser+`"]
- level: None
`), 0o644); err != nil {
		b.Fatal(err)
	}
	api := apiservertest.Start(b, apiservertest.Options{ExtraArgs: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + audit}})
	api.Namespace(b, clusterNS)
	guard := snapshotCgroups(b)
	type result struct {
		single, many []time.Duration
		perMin       float64
	}
	res := map[string]result{}
	for _, name := range agentsToRun() {
		if err := e.clearPods(); err != nil {
			b.Fatal(err)
		}
		removeCgroups(b, e.cgroup)
		a := e.start(b, name, "", "--kubeconfig", api.NodeKubeconfig(b, nodeName), "--node-ip", api.AdvertiseAddress().String())
		c := &clusterRun{b: b, a: a, admin: api.Admin()}
		var r result
		r.single, r.many = c.startPods(w)
		time.Sleep(w.settle) // the start's status writes settle
		n0, t0 := auditLines(b, audit), time.Now()
		time.Sleep(2 * w.window) // the measured steady state
		n1, t1 := auditLines(b, audit), time.Now()
		r.perMin = float64(len(n1)-len(n0)) / t1.Sub(t0).Minutes()
		b.Logf("%s: the node's requests in the window, by kind:\n%s", name, byKind(n1[len(n0):]))
		c.deletePods()
		a.stop(b)
		c.forgetNode()
		guard.check(b, name)
		res[name] = r
		b.Logf("%s: create→Running one at a time %v; %d at once p50 %v p99 %v; %.1f requests/min",
			name, r.single, w.pods, Percentile(r.many, 50), Percentile(r.many, 99), r.perMin)
	}
	if len(res) < len(agentNames) {
		return // one agent: its figures are in the log above
	}
	k, n := res["kubelet"], res["nodekeeper"]
	figs := []Figure{
		{"api1-p50-ms", ms(Percentile(k.single, 50)), ms(Percentile(n.single, 50))},
		{"api1-p99-ms", ms(Percentile(k.single, 99)), ms(Percentile(n.single, 99))},
		{fmt.Sprintf("api%d-p50-ms", w.pods), ms(Percentile(k.many, 50)), ms(Percentile(n.many, 50))},
		{fmt.Sprintf("api%d-p99-ms", w.pods), ms(Percentile(k.many, 99)), ms(Percentile(n.many, 99))},
		{fmt.Sprintf("api-requests-per-min-%d", w.pods), k.perMin, n.perMin},
	}
	for _, f := range figs {
		for unit, v := range f.Metrics() {
			b.ReportMetric(v, unit)
		}
	}
	b.Logf("load average %s\n%s", loadAverage(), Table(figs))
}

// auditLines lists the node's requests in the audit log (the policy logs
// only the node's user, one line per request) as "VERB RESOURCE/SUBRESOURCE".
func auditLines(b *testing.B, path string) []string {
	b.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for line := range bytes.Lines(raw) {
		var ev struct {
			User      struct{ Username string } `json:"user"`
			Verb      string                    `json:"verb"`
			ObjectRef struct{ Resource, Subresource string }
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			b.Fatalf("audit log %s: %v", path, err)
		}
		if ev.User.Username == nodeUser {
			out = append(out, ev.Verb+" "+ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource)
		}
	}
	return out
}

// byKind counts requests by kind, most first, one "N KIND" per line.
func byKind(reqs []string) string {
	n := map[string]int{}
	for _, r := range reqs {
		n[r]++
	}
	kinds := slices.Collect(maps.Keys(n))
	slices.SortFunc(kinds, func(x, y string) int { return cmp.Or(n[y]-n[x], strings.Compare(x, y)) })
	var sb strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&sb, "%6d %s\n", n[k], k)
	}
	return sb.String()
}

// clusterRun is one agent's run against the API server.
type clusterRun struct {
	b     *testing.B
	a     *agent
	admin kubernetes.Interface
}

// apiPod is a BestEffort pod bound to the node, serving testbox's HTTP
// endpoints. It mounts no service account token: the figures are the
// agent's pod work, not the token and CA volume's.
func apiPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusterNS},
		Spec: v1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: new(int64(2)),
			AutomountServiceAccountToken:  new(false),
			Containers: []v1.Container{{
				Name: "main", Image: ocibuild.TestboxRef, ImagePullPolicy: v1.PullIfNotPresent, Args: []string{"serve"},
			}},
		},
	}
}

// startPods creates one pod at a time (after a warm-up, which also waits
// for the node to register), deleting each before the next, then w.pods at
// once, and returns the create → Running times.
func (c *clusterRun) startPods(w sizes) (single, many []time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := c.runningSeen(ctx)
	for i := range w.singles + 1 {
		name := fmt.Sprintf("one%d", i)
		t0 := time.Now()
		c.create(apiPod(name))
		d := c.wait(seen, name, 3*time.Minute).Sub(t0)
		if i > 0 {
			single = append(single, d)
		}
		c.deletePods()
	}
	created := map[string]time.Time{}
	for i := range w.pods {
		name := fmt.Sprintf("many%d", i)
		created[name] = time.Now()
		c.create(apiPod(name))
	}
	deadline := time.After(10 * time.Minute)
	for range w.pods {
		select {
		case s := <-seen:
			many = append(many, s.at.Sub(created[s.name]))
		case <-deadline:
			c.b.Fatalf("%s: %d of %d pods Running in the API after 10 min\nlog (tail):\n%s", c.a.name, len(many), w.pods, c.a.tail(30))
		}
	}
	return single, many
}

// seenPod is a pod the API server first showed Running at.
type seenPod struct {
	name string
	at   time.Time
}

// runningSeen watches the namespace and sends each pod the first time the
// API server holds it Running with its container running.
func (c *clusterRun) runningSeen(ctx context.Context) <-chan seenPod {
	w, err := c.admin.CoreV1().Pods(clusterNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		c.b.Fatal(err)
	}
	out := make(chan seenPod, 1024)
	go func() {
		defer w.Stop()
		seen := map[string]bool{}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok || ev.Type == watch.Deleted || seen[string(p.UID)] || p.Status.Phase != v1.PodRunning {
				continue
			}
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
				continue
			}
			seen[string(p.UID)] = true
			out <- seenPod{p.Name, time.Now()}
		}
	}()
	return out
}

func (c *clusterRun) wait(seen <-chan seenPod, name string, timeout time.Duration) time.Time {
	deadline := time.After(timeout)
	for {
		select {
		case s := <-seen:
			if s.name == name {
				return s.at
			}
		case <-deadline:
			c.b.Fatalf("%s: pod %s not Running in the API after %v\nlog (tail):\n%s", c.a.name, name, timeout, c.a.tail(30))
		}
	}
}

func (c *clusterRun) create(p *v1.Pod) {
	if _, err := c.admin.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		c.b.Fatalf("create pod %s: %v", p.Name, err)
	}
}

// deletePods deletes the namespace's pods and waits until the agent
// finished them (the API objects gone).
func (c *clusterRun) deletePods() {
	ctx := context.Background()
	if err := c.admin.CoreV1().Pods(clusterNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		c.b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		l, err := c.admin.CoreV1().Pods(clusterNS).List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.b.Fatalf("%s: pods still in the API 10 min after their deletion\nlog (tail):\n%s", c.a.name, c.a.tail(30))
		}
		time.Sleep(100 * time.Millisecond) // polling the API server, an outside process
	}
}

// forgetNode deletes the Node and its Lease, so the next agent registers
// afresh.
func (c *clusterRun) forgetNode() {
	ctx := context.Background()
	err := c.admin.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.b.Fatal(err)
	}
	err = c.admin.CoordinationV1().Leases("kube-node-lease").Delete(ctx, nodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.b.Fatal(err)
	}
}
