package kubenode

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// counter counts the requests through a client, by method and path.
type counter struct {
	mu   sync.Mutex // guards reqs
	reqs []string
	next http.RoundTripper
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// take returns the requests counted since the last take, counted by kind.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, r := range c.reqs {
		out[r]++
	}
	c.reqs = nil
	return out
}

// nodeClient is a client with the node's identity (system:node:NAME), a
// request timeout as the kubelet's heartbeat client has, and a counter.
func nodeClient(t *testing.T, srv *apiservertest.Server, name string) (nodeClients, *counter) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.NodeKubeconfig(t, name))
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { c.next = rt; return c })
	watch, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = DefaultStatusUpdateFrequency
	heartbeat, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return nodeClients{heartbeat, watch}, c
}

// nodeClients are the agent's two clients as the node: the heartbeat one,
// whose requests time out, and the one without a timeout its watches use.
type nodeClients struct{ heartbeat, watch kubernetes.Interface }

// runController runs a controller until the returned stop is called.
func runController(t *testing.T, cfg Config, client nodeClients, src *source) (*Controller, func()) {
	t.Helper()
	c, err := New(cfg, Deps{Client: clientgo.Wrap(client.heartbeat), WatchClient: clientgo.Wrap(client.watch), Status: src.status,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return 30 s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

// poll calls f every 100 ms until it returns true or the deadline passes.
func poll(t *testing.T, within time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAgainstAPIServer runs the controller as the node (Node,RBAC
// authorization, NodeRestriction admission) against a real kube-apiserver:
// the Node is registered with its capacity, conditions and taints, the Lease
// is created owned by the Node and renewed, a Poke writes a pressure change
// at once, the steady state's requests are counted, a restarted controller
// adopts the Node, and the Lease resumes after the API server is stopped
// and started again.
func TestAgainstAPIServer(t *testing.T) {
	t.Parallel()
	srv := apiservertest.Start(t, apiservertest.Options{})
	admin := srv.Admin()
	ctx := t.Context()
	const name = "nk-int"
	cfg := testConfig()
	cfg.NodeName = name
	cfg.Labels = map[string]string{"node.kubernetes.io/exclude-from-external-load-balancers": "true"}
	client, count := nodeClient(t, srv, name)
	src := &source{}
	c, stop := runController(t, cfg, client, src)

	var node *v1.Node
	poll(t, 30*time.Second, "Node registered", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		node = n
		return err == nil
	})
	if got := node.Labels["node.kubernetes.io/exclude-from-external-load-balancers"]; got != "true" {
		t.Errorf("configured label = %q", got)
	}
	if node.Labels[v1.LabelHostname] != name || node.Labels[v1.LabelOSStable] == "" {
		t.Errorf("labels %v", node.Labels)
	}
	wantTaints := []string{"example.com/dedicated=x:NoSchedule", "node.kubernetes.io/not-ready:NoSchedule"}
	var taints []string
	for _, tt := range node.Spec.Taints {
		taints = append(taints, tt.ToString())
	}
	sort.Strings(taints)
	if diff := cmp.Diff(wantTaints, taints); diff != "" {
		t.Errorf("taints (the registration taint and the admission's not-ready) (-want +got):\n%s", diff)
	}
	wantCap := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods: resource.MustParse("110")}
	if diff := cmp.Diff(wantCap, node.Status.Capacity, quantities); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	var conds []string
	for _, cd := range node.Status.Conditions {
		conds = append(conds, string(cd.Type)+"="+string(cd.Status)+" "+cd.Reason)
	}
	if diff := cmp.Diff([]string{"MemoryPressure=False KubeletHasSufficientMemory", "Ready=True KubeletReady"}, conds); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if node.Status.NodeInfo.KubeletVersion != cfg.Version || node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("nodeInfo %+v, daemon endpoints %+v", node.Status.NodeInfo, node.Status.DaemonEndpoints)
	}

	leases := admin.CoordinationV1().Leases(v1.NamespaceNodeLease)
	var first time.Time
	poll(t, 30*time.Second, "Lease created", func() bool {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != node.UID || l.OwnerReferences[0].Kind != "Node" {
			t.Fatalf("Lease owners %+v, want the Node %s", l.OwnerReferences, node.UID)
		}
		if *l.Spec.HolderIdentity != name || *l.Spec.LeaseDurationSeconds != 40 {
			t.Fatalf("Lease spec %+v", l.Spec)
		}
		first = l.Spec.RenewTime.Time
		return true
	})
	poll(t, 20*time.Second, "Lease renewed", func() bool {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(first)
	})

	// A label another client sets reaches Node() through the watch within
	// seconds (the status writes are 10 s apart and carry no labels).
	labeled, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labeled.Labels["example.com/set-by"] = "admin"
	if _, err := admin.CoreV1().Nodes().Update(ctx, labeled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 3*time.Second, "the admin's label in Node()", func() bool {
		return c.Node().Labels["example.com/set-by"] == "admin"
	})

	// A pressure change with a Poke is on the Node at once.
	src.set(func(s *source) { s.pressure = true })
	c.Poke()
	poll(t, 3*time.Second, "MemoryPressure written after the Poke", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Status.Conditions[0].Status == v1.ConditionTrue
	})

	// The steady state: one minute with nothing changing.
	count.take()
	began := time.Now()
	time.Sleep(time.Minute)
	reqs := count.take()
	total := 0
	for _, n := range reqs {
		total += n
	}
	perMin := float64(total) / time.Since(began).Minutes()
	t.Logf("steady state: %.1f API requests per minute: %v", perMin, reqs)
	if perMin > 8 {
		t.Errorf("steady state: %.1f requests per minute, want about 6 (the lease renewals)", perMin)
	}

	// A restarted controller adopts the Node: same UID, status written at
	// once (the heartbeat moves), no error.
	stop()
	before, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	client2, count2 := nodeClient(t, srv, name)
	_, _ = runController(t, cfg, client2, src)
	poll(t, 10*time.Second, "status written by the restarted controller", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Status.Conditions[1].LastHeartbeatTime.Time.After(restartedAt.Add(-time.Second))
	})
	after, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Errorf("Node UID %s after the restart, was %s: not adopted", after.UID, before.UID)
	}
	if tr := after.Status.Conditions[0].LastTransitionTime; !tr.Equal(&before.Status.Conditions[0].LastTransitionTime) {
		t.Errorf("MemoryPressure transition moved from %v to %v across the restart", before.Status.Conditions[0].LastTransitionTime, tr)
	}
	t.Logf("requests of the restarted controller's start: %v", count2.take())

	// The API server goes away for 15 s and comes back: the Lease resumes.
	srv.Stop(t)
	time.Sleep(15 * time.Second)
	srv.Restart(t)
	back := time.Now()
	poll(t, 40*time.Second, "Lease renewed after the API server came back", func() bool {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(back)
	})
	t.Logf("Lease renewed %v after the API server was ready again", time.Since(back).Round(100*time.Millisecond))
	if got := count2.take(); !slices.ContainsFunc(keys(got), func(k string) bool { return strings.HasPrefix(k, "PUT /apis/coordination.k8s.io") }) {
		t.Errorf("no lease update through the outage: %v", got)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
