package apipods

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/qos"
)

// summary names a set's pods with their config.source and resourceVersion.
func summary(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name+" source="+p.Annotations[qos.ConfigSourceAnnotation]+" rv="+p.ResourceVersion)
	}
	return out
}

// waitSet drains the agent's sets until one matches want, or fails after
// a deadline.
func waitSet(t *testing.T, ag *fakeAgent, want []string) []*v1.Pod {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var last []string
	for {
		select {
		case set := <-ag.sets:
			last = summary(set)
			if cmp.Diff(want, last) == "" {
				return set
			}
		case <-deadline:
			t.Fatalf("no set %v; last %v", want, last)
		}
	}
}

// TestSourceDeliversTheNodesPods runs the informer against a fake
// clientset: the agent gets the node's pods (no mirror pod, no malformed
// pod, which is logged by name) after each change.
func TestSourceDeliversTheNodesPods(t *testing.T) {
	t.Parallel()
	noCtrs := apiPod("empty", "u3")
	noCtrs.Spec.Containers = nil
	other := apiPod("elsewhere", "u4")
	other.Spec.NodeName = "node2" // the fake ignores the field selector
	client := fake.NewClientset(apiPod("web", "u1"), mirror("etcd-node1", "m1", "h1"), noCtrs, other)
	ag := newFakeAgent()
	log, logs := testLogger(t)
	s, err := New(Config{NodeName: node}, Deps{Client: clientgo.Wrap(client), Agent: ag, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	set := waitSet(t, ag, []string{"default/web source=api rv="})
	if set[0].Spec.NodeName != node || set[0].UID != "u1" {
		t.Errorf("delivered pod %+v", set[0].ObjectMeta)
	}
	for _, want := range []string{`pod=default/empty podUID=u3 err="spec.containers: empty"`, `pod=default/elsewhere`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}

	// A new pod, then a deletion: each gives a new complete set.
	if _, err := client.CoreV1().Pods("default").Create(t.Context(), apiPod("db", "u2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ag, []string{"default/db source=api rv=", "default/web source=api rv="})
	if err := client.CoreV1().Pods("default").Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ag, []string{"default/db source=api rv="})
	if n := strings.Count(logs.String(), "pod=default/empty"); n != 1 {
		t.Errorf("malformed pod logged %d times, want once", n)
	}
	// Once the malformed pod is gone, it is forgotten.
	if err := client.CoreV1().Pods("default").Delete(t.Context(), "empty", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("default").Delete(t.Context(), "elsewhere", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ag, []string{"default/db source=api rv="})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.skipped)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d malformed pods still remembered", n)
		}
		select {
		case <-ag.sets:
		case <-time.After(time.Second):
		}
	}
}

func TestCheckPod(t *testing.T) {
	t.Parallel()
	mod := func(f func(p *v1.Pod)) *v1.Pod { p := apiPod("web", "u1"); f(p); return p }
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"valid", apiPod("web", "u1"), ""},
		{"no uid", mod(func(p *v1.Pod) { p.UID = "" }), "metadata.uid: empty"},
		{"no name", mod(func(p *v1.Pod) { p.Name = "" }), "metadata.name: empty"},
		{"other node", mod(func(p *v1.Pod) { p.Spec.NodeName = "x" }), `spec.nodeName "x": not this node ("node1")`},
		{"no image", mod(func(p *v1.Pod) { p.Spec.Containers[0].Image = "" }), "spec.containers[0].image: empty"},
		{"repeated name", mod(func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "c", Image: "i"}}
		}), `spec.containers[0].name "c": repeated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ""
			if err := checkPod(tc.pod, node); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("checkPod = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAgentPodsDoesNotModifyTheCache: the delivered pods are copies.
func TestAgentPodsDoesNotModifyTheCache(t *testing.T) {
	t.Parallel()
	log, _ := testLogger(t)
	s, err := New(Config{NodeName: node}, Deps{Client: clientgo.Wrap(fake.NewClientset()), Agent: newFakeAgent(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	p := apiPod("web", "u1")
	dup := apiPod("web2", "u1")
	out := s.agentPods([]*v1.Pod{p, dup})
	if p.Annotations != nil || p.ResourceVersion != "1" {
		t.Errorf("cached pod modified: %+v", p.ObjectMeta)
	}
	if got := summary(out); !slices.Equal(got, []string{"default/web source=api rv="}) {
		t.Errorf("agentPods = %v", got)
	}
	var _ runtime.Object = p
}
