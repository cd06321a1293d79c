package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/apiservertest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// clusterNode is the node name the harness gives the agent.
const clusterNode = "e2e"

// cluster is an agent joined to a real API server as the node "e2e", with
// the node identity (system:node:e2e in system:nodes) under Node,RBAC and
// NodeRestriction.
type cluster struct {
	t     testing.TB
	api   *apiservertest.Server
	agent *Agent
	admin kubernetes.Interface
	ns    string
}

// startCluster starts an API server and an agent joined to it. The agent
// serves the kubelet API on a free port, trusting the API server's CA for
// client certificates. Pods the test created in the namespace are deleted
// (gracefully, through the agent) before the agent stops.
func startCluster(t testing.TB, opts Options, apiArgs ...string) *cluster {
	t.Helper()
	api := apiservertest.Start(t, apiservertest.Options{ExtraArgs: apiArgs})
	c := &cluster{t: t, api: api, admin: api.Admin(), ns: "e2e"}
	api.Namespace(t, c.ns)
	opts.Args = append(opts.Args, "--kubeconfig", api.NodeKubeconfig(t, clusterNode),
		"--node-ip", api.AdvertiseAddress().String())
	opts.Config += fmt.Sprintf(`port: %d
authentication:
  x509:
    clientCAFile: %s
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 5m
`, freePort(t), api.ClientCAFile())
	c.agent = StartAgent(t, opts)
	t.Cleanup(c.deletePods)
	return c
}

// deletePods deletes the test's pods and waits until the agent removed their
// objects (after their containers stopped).
func (c *cluster) deletePods() {
	ctx := context.Background()
	_ = c.admin.CoreV1().Pods(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		l, err := c.admin.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Errorf("pods still in the API 60s after their deletion")
}

// apiPod is a pod bound to the node running testbox with args.
func (c *cluster) apiPod(name string, args ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns},
		Spec: v1.PodSpec{
			NodeName:                      clusterNode,
			TerminationGracePeriodSeconds: new(int64(5)),
			Containers: []v1.Container{{
				Name: "main", Image: testbox, ImagePullPolicy: v1.PullNever, Args: args,
			}},
		},
	}
}

// create creates pod through the admin client.
func (c *cluster) create(pod *v1.Pod) *v1.Pod {
	c.t.Helper()
	p, err := c.admin.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return p
}

// waitAPIPod waits until the API server's copy of the pod satisfies cond.
func (c *cluster) waitAPIPod(name, what string, timeout time.Duration, cond func(*v1.Pod) bool) *v1.Pod {
	c.t.Helper()
	var last *v1.Pod
	c.agent.Eventually(fmt.Sprintf("pod %s in the API %s", name, what), timeout, func() (bool, string) {
		p, err := c.admin.CoreV1().Pods(c.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = p
		return cond(p), podSummary(p)
	})
	return last
}

// node returns the Node object from the API server.
func (c *cluster) node() (*v1.Node, error) {
	return c.admin.CoreV1().Nodes().Get(context.Background(), clusterNode, metav1.GetOptions{})
}

// conditionIs returns a check that the API's Node has condition t with status s.
func (c *cluster) conditionIs(t v1.NodeConditionType, s v1.ConditionStatus) func() (bool, string) {
	return func() (bool, string) {
		n, err := c.node()
		if err != nil {
			return false, err.Error()
		}
		for _, got := range n.Status.Conditions {
			if got.Type == t {
				return got.Status == s, fmt.Sprintf("%s=%s (%s)", t, got.Status, got.Reason)
			}
		}
		return false, "no " + string(t) + " condition"
	}
}

// events lists the events of the namespace with reason about the object name.
func (c *cluster) events(ns, name, reason string) []v1.Event {
	l, err := c.admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []v1.Event
	for _, e := range l.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// exec runs cmd in the pod's container through the API server (pods/exec,
// which the API server proxies to the node's kubelet API).
func (c *cluster) exec(pod, container string, cmd ...string) (string, string, error) {
	req := c.admin.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.ns).Name(pod).SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(c.api.AdminConfig(), "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// TestClusterNode: the agent registers its Node with the machine's capacity,
// the kubelet's conditions and node info, and renews its Lease.
func TestClusterNode(t *testing.T) {
	c := startCluster(t, Options{})
	var n *v1.Node
	c.agent.Eventually("the Node registered and Ready", 60*time.Second, func() (bool, string) {
		ok, msg := c.conditionIs(v1.NodeReady, v1.ConditionTrue)()
		if ok {
			n, _ = c.node()
		}
		return ok, msg
	})
	want := map[v1.NodeConditionType]string{
		v1.NodeReady: "KubeletReady", v1.NodeMemoryPressure: "KubeletHasSufficientMemory",
		v1.NodeDiskPressure: "KubeletHasNoDiskPressure", v1.NodePIDPressure: "KubeletHasSufficientPID",
	}
	for _, cond := range n.Status.Conditions {
		if r, ok := want[cond.Type]; ok {
			if cond.Reason != r {
				t.Errorf("condition %s reason %q, want %q", cond.Type, cond.Reason, r)
			}
			delete(want, cond.Type)
		}
	}
	if len(want) > 0 {
		t.Errorf("conditions missing: %v", want)
	}
	memory := resource.NewQuantity(memTotalMiB(t)<<20, resource.BinarySI)
	if got := n.Status.Capacity[v1.ResourceMemory]; got.Value()>>20 != memory.Value()>>20 {
		t.Errorf("capacity memory %s, want %s (MemTotal)", got.String(), memory.String())
	}
	if _, ok := n.Status.Capacity["hugepages-2Mi"]; !ok {
		t.Errorf("capacity lacks hugepages-2Mi: %v", n.Status.Capacity)
	}
	if got := n.Status.Capacity[v1.ResourcePods]; got.Value() != 110 {
		t.Errorf("capacity pods %s, want 110", got.String())
	}
	if got := n.Status.Allocatable[v1.ResourceMemory]; got.Cmp(n.Status.Capacity[v1.ResourceMemory]) >= 0 {
		t.Errorf("allocatable memory %s not below capacity (the hard threshold is reserved)", got.String())
	}
	if !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("containerRuntimeVersion %q", n.Status.NodeInfo.ContainerRuntimeVersion)
	}
	if !slices.ContainsFunc(n.Status.Addresses, func(a v1.NodeAddress) bool {
		return a.Type == v1.NodeInternalIP && a.Address == c.api.AdvertiseAddress().String()
	}) {
		t.Errorf("addresses %v lack InternalIP %s", n.Status.Addresses, c.api.AdvertiseAddress())
	}
	// The node's events, as the kubelet's.
	for _, reason := range []string{"Starting", "NodeReady", "NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"} {
		c.agent.Eventually("node event "+reason, 30*time.Second, func() (bool, string) {
			return len(c.events("default", clusterNode, reason)) > 0, "none"
		})
	}
	// The Lease renews (every 10 s).
	lease, err := c.admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), clusterNode, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	first := lease.Spec.RenewTime.Time
	c.agent.Eventually("the Lease renewed", 30*time.Second, func() (bool, string) {
		l, err := c.admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), clusterNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), l.Spec.RenewTime.String()
	})
}

// TestClusterPod: a pod bound to the node runs and becomes Ready in the API;
// its logs and exec work through the API server; deleting it stops it
// gracefully and removes the object.
func TestClusterPod(t *testing.T) {
	c := startCluster(t, Options{})
	pod := c.apiPod("web", "serve", "--http", "8080")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	c.create(pod)
	p := c.waitAPIPod("web", "Running and Ready", 60*time.Second, running)
	if p.Status.PodIP == "" || len(p.Status.HostIPs) == 0 || p.Status.StartTime == nil || p.Status.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("status lacks pod IP, host IPs, start time or QoS class: %+v", p.Status)
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.ContainerID == "" || cs.ImageID == "" || cs.Started == nil || !*cs.Started {
		t.Errorf("container status %+v", cs)
	}

	// Logs through the API server (GET pods/log → the node's /containerLogs).
	c.agent.Eventually("kubectl logs", 30*time.Second, func() (bool, string) {
		b, err := c.admin.CoreV1().Pods(c.ns).GetLogs("web", &v1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(b), "http on"), string(b)
	})
	// Exec through the API server.
	stdout, stderr, err := c.exec("web", "main", "/testbox", "env")
	if err != nil || !strings.Contains(stdout, "HOSTNAME=web") {
		t.Errorf("exec env: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	_, _, err = c.exec("web", "main", "/testbox", "exit", "3")
	if ce, ok := err.(interface{ ExitStatus() int }); !ok || ce.ExitStatus() != 3 {
		t.Errorf("exec exit 3: %v, want exit status 3", err)
	}

	// Graceful deletion: the object goes once the container stopped.
	if err := c.admin.CoreV1().Pods(c.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.agent.Eventually("the pod object removed", 60*time.Second, func() (bool, string) {
		_, err := c.admin.CoreV1().Pods(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// The object goes once nothing of the pod runs (as the kubelet's
	// PodCouldBeDeleted); its stopped container is removed right after,
	// not necessarily before.
	c.agent.Eventually("the pod's container removed", 60*time.Second, func() (bool, string) {
		_, err := c.agent.CRI().ContainerStatus(context.Background(), strings.TrimPrefix(cs.ContainerID, "containerd://"), false)
		return err != nil, fmt.Sprintf("container %s: %v", cs.ContainerID, err)
	})
	for _, reason := range []string{"Pulled", "Created", "Started", "Killing"} {
		if len(c.events(c.ns, "web", reason)) == 0 {
			t.Errorf("no %s event for the pod", reason)
		}
	}
}

// TestClusterMirrorPod: a static pod gets a mirror pod in the API, with its
// status; removing the manifest deletes the mirror pod.
func TestClusterMirrorPod(t *testing.T) {
	c := startCluster(t, Options{})
	c.agent.WriteManifest("web.yaml", webManifest("web", "mirrored"))
	p := func() (*v1.Pod, error) {
		return c.admin.CoreV1().Pods("default").Get(context.Background(), "web-e2e", metav1.GetOptions{})
	}
	c.agent.Eventually("a running mirror pod", 60*time.Second, func() (bool, string) {
		m, err := p()
		if err != nil {
			return false, err.Error()
		}
		if m.Annotations["kubernetes.io/config.mirror"] == "" {
			return false, "no config.mirror annotation"
		}
		return running(m), podSummary(m)
	})
	c.agent.RemoveManifest("web.yaml")
	c.agent.Eventually("the mirror pod deleted", 60*time.Second, func() (bool, string) {
		_, err := p()
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// TestClusterAPIServerAway: the API server gone for 30 s loses nothing: the
// pod keeps running, the agent keeps serving, and when the server is back
// the Lease resumes and a new pod runs.
func TestClusterAPIServerAway(t *testing.T) {
	c := startCluster(t, Options{})
	c.create(c.apiPod("before", "sleep"))
	before := c.waitAPIPod("before", "running", 60*time.Second, running)
	id := before.Status.ContainerStatuses[0].ContainerID
	// A pod that finishes while the API server is away.
	finisher := c.apiPod("finisher", "exit", "--after", "10s", "0")
	finisher.Spec.RestartPolicy = v1.RestartPolicyNever
	c.create(finisher)
	c.waitAPIPod("finisher", "running", 60*time.Second, running)

	c.api.Stop(t)
	gone := time.Now()
	for time.Since(gone) < 30*time.Second {
		if p := c.agent.Pod("before"); p == nil || !running(p) {
			t.Fatalf("the pod stopped while the API server was away: %s", podSummary(p))
		}
		time.Sleep(time.Second) // the outage's length is the scenario; the agent is checked each second
	}
	c.api.Restart(t)
	back := time.Now()
	c.agent.Eventually("the Lease renewed after the restart", 60*time.Second, func() (bool, string) {
		l, err := c.admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), clusterNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(back), l.Spec.RenewTime.String()
	})
	c.waitAPIPod("finisher", "Succeeded (status caught up)", 60*time.Second, func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded
	})
	c.create(c.apiPod("after", "sleep"))
	c.waitAPIPod("after", "running", 60*time.Second, running)
	p := c.waitAPIPod("before", "still running, same container", 30*time.Second, running)
	if got := p.Status.ContainerStatuses[0]; got.ContainerID != id || got.RestartCount != 0 {
		t.Errorf("the pod's container changed: %s (restarts %d), was %s", got.ContainerID, got.RestartCount, id)
	}
}

// TestClusterRestartAdopts: a restarted agent adopts the API pods without
// restarting them.
func TestClusterRestartAdopts(t *testing.T) {
	c := startCluster(t, Options{})
	c.create(c.apiPod("keep", "sleep"))
	p := c.waitAPIPod("keep", "running", 60*time.Second, running)
	id := p.Status.ContainerStatuses[0].ContainerID
	if code := c.agent.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("agent exit code %d", code)
	}
	c.agent.Start()
	c.agent.WaitPod("keep", "running again", running)
	p = c.waitAPIPod("keep", "running", 30*time.Second, running)
	if got := p.Status.ContainerStatuses[0]; got.ContainerID != id || got.RestartCount != 0 {
		t.Errorf("the pod's container changed over the restart: %s (restarts %d), was %s", got.ContainerID, got.RestartCount, id)
	}
}

// TestClusterEviction: under memory pressure the Node's MemoryPressure turns
// true in the API, and the evicted pod shows Failed/Evicted with an Evicted
// event.
func TestClusterEviction(t *testing.T) {
	c := startCluster(t, Options{Config: smallPodsConfig(t, 900, 300, "5s")})
	c.agent.Eventually("no memory pressure at start", 60*time.Second, c.conditionIs(v1.NodeMemoryPressure, v1.ConditionFalse))
	hog := c.apiPod("hog", "alloc", "700")
	// It exits 143 when stopped, as a shell killed by SIGTERM does: Failed.
	hog.Spec.Containers[0].Env = []v1.EnvVar{{Name: "TESTBOX_STOP_EXIT", Value: "143"}}
	c.create(hog)
	c.agent.Eventually("MemoryPressure in the API", 60*time.Second, c.conditionIs(v1.NodeMemoryPressure, v1.ConditionTrue))
	c.agent.Eventually("a NodeHasInsufficientMemory event", 30*time.Second, func() (bool, string) {
		return len(c.events("default", clusterNode, "NodeHasInsufficientMemory")) > 0, "none"
	})
	p := c.waitAPIPod("hog", "Failed/Evicted", 60*time.Second, func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "Evicted"
	})
	if !strings.Contains(p.Status.Message, "The node was low on resource: memory") {
		t.Errorf("eviction message %q", p.Status.Message)
	}
	if !slices.ContainsFunc(p.Status.Conditions, func(cd v1.PodCondition) bool {
		return cd.Type == v1.DisruptionTarget && cd.Status == v1.ConditionTrue
	}) {
		t.Errorf("no DisruptionTarget condition: %+v", p.Status.Conditions)
	}
	c.agent.Eventually("an Evicted event", 30*time.Second, func() (bool, string) {
		return len(c.events(c.ns, "hog", "Evicted")) > 0, "none"
	})
}

// TestClusterDevicePlugin: a device plugin's resource appears in the Node's
// capacity and allocatable in the API; a pod holding one of its devices
// shows the device's health in the API (allocatedResourcesStatus, KEP-4680),
// Healthy, then Unhealthy once the plugin says so, with syncFrequency an
// hour: the health change alone has the status written.
func TestClusterDevicePlugin(t *testing.T) {
	c := startCluster(t, Options{Config: "syncFrequency: 1h\n"})
	stub := startFakePlugin(t, c.agent, make(chan []string, 4))
	c.agent.Eventually("the plugin's resource in the Node", 60*time.Second, func() (bool, string) {
		n, err := c.node()
		if err != nil {
			return false, err.Error()
		}
		capacity, allocatable := n.Status.Capacity[fakeResource], n.Status.Allocatable[fakeResource]
		return capacity.Value() == 2 && allocatable.Value() == 2, fmt.Sprintf("capacity %s, allocatable %s", capacity.String(), allocatable.String())
	})

	pod := c.apiPod("gpu", "sleep")
	one := v1.ResourceList{fakeResource: resource.MustParse("1")}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: one, Limits: one}
	c.create(pod)
	var id v1.ResourceID
	shows := func(h v1.ResourceHealthStatus) func(*v1.Pod) bool {
		return func(p *v1.Pod) bool {
			if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			got := p.Status.ContainerStatuses[0].AllocatedResourcesStatus
			if len(got) != 1 || len(got[0].Resources) != 1 {
				return false
			}
			id = got[0].Resources[0].ResourceID
			return got[0].Name == fakeResource && got[0].Resources[0] == v1.ResourceHealth{ResourceID: id, Health: h}
		}
	}
	c.waitAPIPod("gpu", "running, its device Healthy", 90*time.Second, shows(v1.ResourceHealthStatusHealthy))
	stub.SetDevices([]*pluginapi.Device{{ID: "fake-0", Health: pluginapi.Unhealthy}, {ID: "fake-1", Health: pluginapi.Unhealthy}})
	c.waitAPIPod("gpu", "its device Unhealthy", 60*time.Second, shows(v1.ResourceHealthStatusUnhealthy))
}

// TestClusterAdmission: pods the node cannot admit end Failed in the API with
// the kubelet's reason, and a pod whose node selector matches the Node's
// labels runs.
func TestClusterAdmission(t *testing.T) {
	c := startCluster(t, Options{})
	big := c.apiPod("big", "sleep")
	big.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Ti")}
	c.create(big)
	elsewhere := c.apiPod("elsewhere", "sleep")
	elsewhere.Spec.NodeSelector = map[string]string{"example.com/zone": "moon"}
	c.create(elsewhere)
	here := c.apiPod("here", "sleep")
	here.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": clusterNode, "kubernetes.io/os": "linux"}
	c.create(here)
	for name, reason := range map[string]string{"big": "OutOfmemory", "elsewhere": "NodeAffinity"} {
		c.waitAPIPod(name, "Failed/"+reason, 60*time.Second, func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodFailed && p.Status.Reason == reason
		})
	}
	c.waitAPIPod("here", "running", 60*time.Second, running)
}

// TestClusterAPIServerDownAtStart: an agent started while its API server is
// down runs its static pods, retries, and registers its Node once the server
// is up.
func TestClusterAPIServerDownAtStart(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	kubeconfig := api.NodeKubeconfig(t, clusterNode)
	api.Stop(t)
	a := StartAgent(t, Options{Args: []string{"--kubeconfig", kubeconfig, "--node-ip", api.AdvertiseAddress().String()},
		Config: fmt.Sprintf("port: %d\nnodeStatusUpdateFrequency: 2s\n", freePort(t))})
	a.WriteManifest("web.yaml", webManifest("web", "offline"))
	a.WaitPod("web-e2e", "running without the API server", running)
	api.Restart(t)
	a.Eventually("the Node registered once the API server is up", 90*time.Second, func() (bool, string) {
		_, err := api.Admin().CoreV1().Nodes().Get(context.Background(), clusterNode, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	a.Eventually("the static pod's mirror pod", 60*time.Second, func() (bool, string) {
		_, err := api.Admin().CoreV1().Pods("default").Get(context.Background(), "web-e2e", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// TestClusterImageUpdateRestarts: a running container whose image is updated
// is stopped and started again with the new image in the same sync, whatever
// the pod's restartPolicy (its exit 0 on the stop included), and its sibling
// keeps running, as upstream's "Containers Lifecycle ... the regular container
// has its image updated" has it of the kubelet (within 20 s).
func TestClusterImageUpdateRestarts(t *testing.T) {
	c := startCluster(t, Options{})
	for _, policy := range []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever} {
		name := "update-" + strings.ToLower(string(policy))
		pod := c.apiPod(name, "sleep")
		pod.Spec.RestartPolicy = policy
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "other", Image: testbox, ImagePullPolicy: v1.PullNever, Args: []string{"sleep"}})
		c.create(pod)
		c.waitAPIPod(name, "both containers running", 60*time.Second, func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[1].State.Running != nil
		})
		p, err := c.admin.CoreV1().Pods(c.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Containers[0].Image = ocibuild.PauseRef
		if _, err := c.admin.CoreV1().Pods(c.ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update the image of %s: %v", name, err)
		}
		c.waitAPIPod(name, "restarted with the new image", 20*time.Second, func(p *v1.Pod) bool {
			cs := p.Status.ContainerStatuses[0]
			return cs.State.Running != nil && cs.Image == ocibuild.PauseRef && cs.RestartCount > 0
		})
		if cs := c.waitAPIPod(name, "the other container running", 5*time.Second, func(p *v1.Pod) bool {
			return p.Status.ContainerStatuses[1].State.Running != nil
		}).Status.ContainerStatuses[1]; cs.RestartCount != 0 {
			t.Errorf("%s: the other container restarted %d times", name, cs.RestartCount)
		}
	}
}

// TestClusterRestartShowsNoStopInBetween: a sync that stops containers to
// start them again shows them running, then restarted, never terminated in
// between, as the kubelet publishes a pod's status only between its syncs:
// the API server refuses to see a terminated container of a Never pod running
// again, so a status showing the stop would hold the pod's status there for
// good. Both containers' images change at once; the first one's preStop hook
// keeps the sync's kills busy for 4 s while the second has stopped and waits
// for its start.
func TestClusterRestartShowsNoStopInBetween(t *testing.T) {
	c := startCluster(t, Options{Prepare: func(a *Agent) { writeTestbox2(t, a.Root) }})
	pod := c.apiPod("both", "sleep")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"/testbox", "sleep", "4s"}}}}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "second", Image: testbox, ImagePullPolicy: v1.PullNever, Args: []string{"sleep"}})
	c.create(pod)
	c.waitAPIPod("both", "both containers running", 60*time.Second, func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[1].State.Running != nil
	})
	p, err := c.admin.CoreV1().Pods(c.ns).Get(context.Background(), "both", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Image = testbox2
	p.Spec.Containers[1].Image = testbox2
	if _, err := c.admin.CoreV1().Pods(c.ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	w, err := c.admin.CoreV1().Pods(c.ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=both", ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deadline := time.After(slow(t, 30*time.Second))
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			p, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Terminated != nil {
					t.Fatalf("container %s shown terminated while it restarts: %s", cs.Name, podSummary(p))
				}
			}
			if cs := p.Status.ContainerStatuses; len(cs) == 2 && cs[0].RestartCount == 1 && cs[1].RestartCount == 1 &&
				cs[0].State.Running != nil && cs[1].State.Running != nil {
				return
			}
		case <-deadline:
			t.Fatalf("both containers not restarted within 30 s: %s", podSummary(c.agent.Pod("both")))
		}
	}
}

// testbox2 is testbox under a second reference: an image to update a
// testbox container to.
const testbox2 = "localhost/nodekeeper/testbox:2"

// writeTestbox2 builds images/testbox and writes it as testbox2 to
// root/images, which the agent imports at start.
func writeTestbox2(t testing.TB, root string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testbox")
	cmd := exec.Command(toolbuild.GoTool(), "build", "-o", bin, "github.com/nodekeeper/nodekeeper/images/testbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build images/testbox: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img := ocibuild.TestboxImage(b)
	img.Ref = testbox2
	if err := os.MkdirAll(filepath.Join(root, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ocibuild.WriteFile(filepath.Join(root, "images", "testbox2.tar"), img); err != nil {
		t.Fatal(err)
	}
}
