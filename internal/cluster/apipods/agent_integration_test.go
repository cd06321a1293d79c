package apipods

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/agent"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
)

// memRuntime is an in-memory agent.Runtime: a synced pod runs (a ready
// sandbox, its containers running), a killed one has its containers exited
// with code 0. It records the kills' grace periods.
type memRuntime struct {
	mu     sync.Mutex // guards pods and graces
	pods   map[types.UID]*podruntime.PodStatus
	graces map[string]int64 // by pod name; -1: the pod's own
}

func (m *memRuntime) Statuses(context.Context) (map[types.UID]*podruntime.PodStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[types.UID]*podruntime.PodStatus{}
	for uid, st := range m.pods {
		c := *st
		c.Sandboxes, c.Containers = slices.Clone(st.Sandboxes), slices.Clone(st.Containers)
		out[uid] = &c
	}
	return out, nil
}

func (m *memRuntime) SyncPod(_ context.Context, pod *v1.Pod, _ *podruntime.PodStatus, _ podruntime.SyncState) podruntime.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[pod.UID]; ok {
		return podruntime.Result{}
	}
	st := &podruntime.PodStatus{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, IPs: []string{"10.88.0.9"},
		Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb-" + string(pod.UID), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Now().UnixNano()}}}
	for _, c := range pod.Spec.Containers {
		st.Containers = append(st.Containers, &runtimeapi.ContainerStatus{Id: "c-" + c.Name + "-" + string(pod.UID),
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{Name: c.Name}})
	}
	m.pods[pod.UID] = st
	return podruntime.Result{}
}

func (m *memRuntime) KillPod(_ context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := int64(-1)
	if grace != nil {
		g = *grace
	}
	m.graces[st.Name] = g
	if p := m.pods[st.UID]; p != nil {
		p.Sandboxes = []*runtimeapi.PodSandboxStatus{{Id: p.Sandboxes[0].Id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: p.Sandboxes[0].CreatedAt}}
		var ctrs []*runtimeapi.ContainerStatus
		for _, c := range p.Containers {
			ctrs = append(ctrs, &runtimeapi.ContainerStatus{Id: c.Id, State: runtimeapi.ContainerState_CONTAINER_EXITED, Metadata: c.Metadata})
		}
		p.Containers, p.IPs = ctrs, nil
	}
	return nil
}

// exit makes the containers of the pod named name exit (behind the
// agent's back, as a crash would).
func (m *memRuntime) exit(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pods {
		if p.Name != name {
			continue
		}
		var ctrs []*runtimeapi.ContainerStatus
		for _, c := range p.Containers {
			ctrs = append(ctrs, &runtimeapi.ContainerStatus{Id: c.Id, State: runtimeapi.ContainerState_CONTAINER_EXITED, Metadata: c.Metadata})
		}
		p.Containers = ctrs
	}
}

// TearDownVolumes: the in-memory runtime has no volumes.
func (m *memRuntime) TearDownVolumes(types.UID) error { return nil }

func (m *memRuntime) RemovePod(_ context.Context, st *podruntime.PodStatus) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pods, st.UID)
	return nil
}

// StatusNode: the agent derives the pods' statuses from the in-memory
// runtime's sandboxes and containers (podstatus.Derive), as on a node.
func (m *memRuntime) StatusNode() podstatus.Node {
	return podstatus.Node{HostIP: "10.0.0.1", RuntimeName: "mem"}
}

type admitAll struct{}

func (admitAll) Start(context.Context, *v1.Pod) admission.Response {
	return admission.Response{Admit: true}
}

// TestWithTheAgent runs the real agent (on an in-memory runtime) fed by the
// syncer against a real kube-apiserver as the node: a pod created for the
// node runs and shows Running to the admin; the API server stopped and
// restarted, the pod keeps running and its status catches up; deleted with a grace period, it
// is killed with that grace period and its object goes away; the agent then
// removes it from the runtime.
func TestWithTheAgent(t *testing.T) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	const nodeName = "h3-agent-node"
	admin := srv.Admin()
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.NodeKubeconfig(t, nodeName))
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := nodeClient.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register node: %v", err)
	}
	rt := &memRuntime{pods: map[types.UID]*podruntime.PodStatus{}, graces: map[string]int64{}}
	log, _ := testLogger(t)
	table, err := agent.NewTable([]string{Source})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{NodeName: nodeName}, agent.Deps{Table: table, Runtime: rt, Admit: admitAll{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{NodeName: nodeName}, Deps{Client: clientgo.Wrap(nodeClient), Agent: table, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ag.Run(runCtx); err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	wg.Go(func() {
		if err := s.Run(runCtx); err != nil {
			t.Errorf("syncer: %v", err)
		}
	})
	defer func() { cancel(); wg.Wait() }()

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "c", Image: "img"}},
			AutomountServiceAccountToken: new(false)},
	}
	createdAt := time.Now()
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "web running", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning || p.Status.PodIP != "10.88.0.9" || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
	t.Logf("pod created to Running in the API server: %v (in-memory runtime, 100ms polling)", time.Since(createdAt).Round(time.Millisecond))
	// The API server goes away; the pod keeps running, its container exits
	// meanwhile; once the server is back, the status catches up.
	srv.Stop(t)
	rt.exit("web")
	eventually(t, 30*time.Second, "the agent sees the exit", func() error {
		for _, p := range ag.Pods() {
			if p.Name == "web" && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	srv.Restart(t)
	eventually(t, 60*time.Second, "status caught up after the API server came back", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			return fmt.Errorf("container status %+v", p.Status.ContainerStatuses)
		}
		return nil
	})
	if ag.IsPodTerminated(string(ag.Pods()[0].UID)) || ag.IsPodDeleted(string(ag.Pods()[0].UID)) {
		t.Errorf("web stopped or deleted while the API server was away")
	}

	grace := int64(5)
	deletedAt := time.Now()
	if err := admin.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "web deleted", func() error {
		_, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	t.Logf("graceful deletion to object gone: %v", time.Since(deletedAt).Round(time.Millisecond))
	eventually(t, 30*time.Second, "web removed from the runtime", func() error {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if len(rt.pods) != 0 {
			return fmt.Errorf("runtime pods %v", slices.Collect(maps.Keys(rt.pods)))
		}
		return nil
	})
	rt.mu.Lock()
	got := rt.graces["web"]
	rt.mu.Unlock()
	if got != 5 {
		t.Errorf("kill grace %d, want 5", got)
	}
	if len(ag.Pods()) != 0 {
		t.Errorf("agent still holds %d pods", len(ag.Pods()))
	}
}
