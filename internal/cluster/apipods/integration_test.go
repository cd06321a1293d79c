package apipods

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/core/podsource"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
	"github.com/nodekeeper/nodekeeper/qos"
)

// eventually polls cond every 100ms until it returns nil, failing t with
// its last error after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestAgainstAPIServer runs the syncer as the node identity against a real
// kube-apiserver (Node,RBAC + NodeRestriction), driving it with a scripted
// agent table: a pod bound to the node reaches the agent, its status and an
// admission rejection are written and visible to the admin, a static pod
// gets a mirror pod (deleted when the static pod goes), and a graceful
// deletion ends with the object gone.
func TestAgainstAPIServer(t *testing.T) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	const nodeName = "h3-node"
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
	// The node registers itself (as the node, which NodeRestriction allows).
	if _, err := nodeClient.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register node: %v", err)
	}
	bound := func(name string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "c", Image: "img"}},
				AutomountServiceAccountToken: new(false)},
		}
	}
	for _, name := range []string{"web", "big"} {
		if _, err := admin.CoreV1().Pods("default").Create(ctx, bound(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	other := bound("elsewhere")
	other.Spec.NodeName = "another-node"
	if _, err := admin.CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ag := newFakeAgent()
	log, _ := testLogger(t)
	s, err := New(Config{NodeName: nodeName, StatusPeriod: time.Second}, Deps{Client: clientgo.Wrap(nodeClient), Agent: ag, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// 1. The node's pods reach the agent (not the other node's).
	var set []*v1.Pod
	deadline := time.After(30 * time.Second)
	for len(set) != 2 {
		select {
		case set = <-ag.sets:
		case <-deadline:
			t.Fatalf("no set of the node's two pods; last %v", summary(set))
		}
	}
	if got := summary(set); got[0] != "default/big source=api rv=" || got[1] != "default/web source=api rv=" {
		t.Fatalf("set %v", got)
	}
	web, big := set[1], set[0]

	// 2. Statuses: web running, big rejected by admission.
	start := metav1.NewTime(time.Now())
	runningStatus := v1.PodStatus{
		Phase: v1.PodRunning, QOSClass: v1.PodQOSBestEffort, HostIP: "10.0.0.1", HostIPs: []v1.HostIP{{IP: "10.0.0.1"}},
		PodIP: "10.88.0.5", PodIPs: []v1.PodIP{{IP: "10.88.0.5"}}, StartTime: &start,
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: start}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Image: "img", Ready: true, Started: new(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: start}}}},
	}
	rejected := v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu", Message: "Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 2000",
		QOSClass: v1.PodQOSBestEffort}
	static := staticPod("etcd-"+nodeName, "hash-1", runningStatus)
	static.Spec.NodeName = nodeName
	static.Annotations[podsource.ConfigSeenAnnotation] = "2026-01-01T00:00:00.000000000Z"
	ag.setPods(withStatus(big, rejected), withStatus(web, runningStatus), static)

	eventually(t, 30*time.Second, "web's status", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning || p.Status.PodIP != "10.88.0.5" || len(p.Status.ContainerStatuses) != 1 ||
			p.Status.ContainerStatuses[0].State.Running == nil || p.Status.StartTime == nil {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
	eventually(t, 30*time.Second, "big's rejection", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "OutOfcpu" || p.Status.Message != rejected.Message {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})

	// 3. The static pod's mirror pod, owned by the Node, with its status.
	var mirrorUID types.UID
	eventually(t, 30*time.Second, "mirror pod", func() error {
		p, err := admin.CoreV1().Pods("kube-system").Get(ctx, "etcd-"+nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations[qos.ConfigMirrorAnnotation] != "hash-1" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Node" {
			return fmt.Errorf("mirror pod %+v", p.ObjectMeta)
		}
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("mirror pod phase %q", p.Status.Phase)
		}
		mirrorUID = p.UID
		return nil
	})
	// Deleted by someone: recreated.
	if err := admin.CoreV1().Pods("kube-system").Delete(ctx, "etcd-"+nodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "mirror pod recreated", func() error {
		p, err := admin.CoreV1().Pods("kube-system").Get(ctx, "etcd-"+nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == mirrorUID || p.DeletionTimestamp != nil {
			return fmt.Errorf("still the old mirror pod %s (deleting %v)", p.UID, p.DeletionTimestamp)
		}
		return nil
	})
	// The static pod gone and stopped: its mirror pod is deleted.
	ag.mu.Lock()
	ag.deleted["hash-1"], ag.terminated["hash-1"] = true, true
	ag.mu.Unlock()
	ag.setPods(withStatus(big, rejected), withStatus(web, runningStatus))
	eventually(t, 30*time.Second, "mirror pod deleted", func() error {
		_, err := admin.CoreV1().Pods("kube-system").Get(ctx, "etcd-"+nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("mirror pod still there (%v)", err)
	})

	// 4. Graceful deletion: the admin deletes web; the agent (scripted)
	// stops it; the final status is written, then the object deleted.
	if err := admin.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var deletingWeb *v1.Pod
	deadline = time.After(30 * time.Second)
	for deletingWeb == nil {
		select {
		case set := <-ag.sets:
			for _, p := range set {
				if p.Name == "web" && p.DeletionTimestamp != nil {
					deletingWeb = p
				}
			}
		case <-deadline:
			t.Fatal("the agent never got web with a deletionTimestamp")
		}
	}
	if g := deletingWeb.DeletionGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("deletion grace %v, want 30", g)
	}
	// Not stopped yet: the object stays.
	ag.setPods(withStatus(big, rejected), withStatus(deletingWeb, runningStatus))
	final := *runningStatus.DeepCopy()
	final.Phase = v1.PodSucceeded
	final.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: start}}
	final.ContainerStatuses[0].Ready, final.ContainerStatuses[0].Started = false, new(false)
	final.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: start, FinishedAt: start}}
	eventually(t, 10*time.Second, "web still there while stopping", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("no deletionTimestamp")
		}
		return nil
	})
	ag.mu.Lock()
	ag.terminated[string(web.UID)], ag.cleaned[string(web.UID)] = true, true
	ag.mu.Unlock()
	ag.setPods(withStatus(big, rejected), withStatus(deletingWeb, final))
	eventually(t, 30*time.Second, "web deleted", func() error {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("web still there, phase %s", p.Status.Phase)
	})
	// The agent's set loses web.
	eventually(t, 30*time.Second, "web leaves the set", func() error {
		select {
		case set := <-ag.sets:
			if len(set) == 1 && set[0].Name == "big" {
				return nil
			}
			return fmt.Errorf("set %v", summary(set))
		default:
			return fmt.Errorf("no new set")
		}
	})
	// big, rejected, stays (the node deletes only pods being deleted).
	if _, err := admin.CoreV1().Pods("default").Get(ctx, "big", metav1.GetOptions{}); err != nil {
		t.Errorf("big: %v", err)
	}
}
