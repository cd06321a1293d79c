package podresources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	podresourcesv1alpha1 "k8s.io/kubelet/pkg/apis/podresources/v1alpha1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

var _ Devices = (*devicemanager.Manager)(nil)

// fakeDevices answers from fixed maps.
type fakeDevices struct {
	byContainer map[string][]*podresourcesapi.ContainerDevices // "uid/name"
	allocatable []*podresourcesapi.ContainerDevices
}

func (f fakeDevices) ContainerDevices(uid, name string) []*podresourcesapi.ContainerDevices {
	return f.byContainer[uid+"/"+name]
}

func (f fakeDevices) AllocatableDevices() []*podresourcesapi.ContainerDevices { return f.allocatable }

func newPod(ns, name, uid string, inits []v1.Container, ctrs ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: v1.PodSpec{InitContainers: inits}}
	for _, c := range ctrs {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c})
	}
	return p
}

// start runs a server on a socket in a new temp dir and returns a client.
func start(t *testing.T, deps Deps) (podresourcesapi.PodResourcesListerClient, string, func()) {
	t.Helper()
	return startWith(t, Config{}, deps)
}

// startWith is start with cfg, whose Socket it sets.
func startWith(t *testing.T, cfg Config, deps Deps) (podresourcesapi.PodResourcesListerClient, string, func()) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), Dir, SocketName)
	cfg.Socket = sock
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run = %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server never got ready")
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			conn.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return podresourcesapi.NewPodResourcesListerClient(conn), sock, stop
}

func TestServer(t *testing.T) {
	t.Parallel()
	always := v1.ContainerRestartPolicyAlways
	gpu0 := []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"g0"},
		Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 0}}}}}
	nic := []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/nic", DeviceIds: []string{"n0"}}}
	trainer := newPod("ml", "trainer", "u1", []v1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}}, "main", "log")
	web := newPod("default", "web", "u2", nil, "nginx")
	devs := fakeDevices{
		byContainer: map[string][]*podresourcesapi.ContainerDevices{"u1/main": gpu0, "u1/proxy": nic, "u1/setup": gpu0},
		allocatable: append(append([]*podresourcesapi.ContainerDevices{}, gpu0...), nic...),
	}
	reg := prometheus.NewRegistry()
	client, sock, stop := start(t, Deps{ActivePods: func() []*v1.Pod { return []*v1.Pod{trainer, web} }, Devices: devs, Registerer: reg})
	ctx := t.Context()

	for path, want := range map[string]os.FileMode{sock: os.ModeSocket | 0o600, filepath.Dir(sock): os.ModeDir | 0o750} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}

	trainerRes := &podresourcesapi.PodResources{Name: "trainer", Namespace: "ml", Containers: []*podresourcesapi.ContainerResources{
		{Name: "proxy", Devices: nic}, {Name: "main", Devices: gpu0}, {Name: "log"},
	}}
	webRes := &podresourcesapi.PodResources{Name: "web", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "nginx"}}}
	list, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{trainerRes, webRes}}, list, protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	got, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "trainer", PodNamespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&podresourcesapi.GetPodResourcesResponse{PodResources: trainerRes}, got, protocmp.Transform()); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	_, err = client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "trainer", PodNamespace: "default"})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "pod trainer in namespace default not found" {
		t.Errorf("Get of a pod that is not there: %v, want NotFound", err)
	}
	alloc, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&podresourcesapi.AllocatableResourcesResponse{Devices: devs.allocatable}, alloc, protocmp.Transform()); diff != "" {
		t.Errorf("GetAllocatableResources (-want +got):\n%s", diff)
	}
	for name, want := range map[string]float64{
		"kubelet_pod_resources_endpoint_requests_total":           4,
		"kubelet_pod_resources_endpoint_requests_list":            1,
		"kubelet_pod_resources_endpoint_requests_get":             2,
		"kubelet_pod_resources_endpoint_requests_get_allocatable": 1,
		"kubelet_pod_resources_endpoint_errors_get":               1,
	} {
		c, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range c {
			if mf.GetName() == name {
				found = true
				if v := mf.GetMetric()[0].GetCounter().GetValue(); v != want || mf.GetMetric()[0].GetLabel()[0].GetValue() != "v1" {
					t.Errorf("%s = %v, want %v{server_api_version=v1}", name, v, want)
				}
			}
		}
		if !found {
			t.Errorf("metric %s missing", name)
		}
	}

	stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket after Run returned: %v, want removed", err)
	}
}

func TestServerWithoutDevices(t *testing.T) {
	t.Parallel()
	client, _, _ := start(t, Deps{ActivePods: func() []*v1.Pod { return []*v1.Pod{newPod("default", "web", "u2", nil, "nginx")} }})
	list, err := client.List(t.Context(), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "web", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "nginx"}}}}}
	if diff := cmp.Diff(want, list, protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	alloc, err := client.GetAllocatableResources(t.Context(), &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil || len(alloc.GetDevices()) != 0 {
		t.Errorf("GetAllocatableResources = %v, %v; want no devices", alloc, err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	pods := func() []*v1.Pod { return nil }
	for _, tc := range []struct {
		name string
		cfg  Config
		deps Deps
		want string
	}{
		{"relative socket", Config{Socket: "pod-resources/kubelet.sock"}, Deps{ActivePods: pods}, `pod-resources socket "pod-resources/kubelet.sock": must be an absolute path`},
		{"no pods", Config{Socket: "/x/kubelet.sock"}, Deps{}, "pod-resources: ActivePods is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tc.cfg, tc.deps); err == nil || err.Error() != tc.want {
				t.Errorf("New = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestServerV1alpha1 lists through the v1alpha1 API on the same socket, as
// the node e2e suite's device-plugin specs do before each spec (without it
// they waited 5 minutes for an Unimplemented List and failed): the regular
// containers' devices, without topology, and no init containers.
func TestServerV1alpha1(t *testing.T) {
	t.Parallel()
	always := v1.ContainerRestartPolicyAlways
	gpu0 := []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"g0", "g1"},
		Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 0}}}}}
	nic := []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/nic", DeviceIds: []string{"n0"}}}
	trainer := newPod("ml", "trainer", "u1", []v1.Container{{Name: "proxy", RestartPolicy: &always}}, "main", "log")
	web := newPod("default", "web", "u2", nil, "nginx")
	devs := fakeDevices{byContainer: map[string][]*podresourcesapi.ContainerDevices{"u1/main": gpu0, "u1/proxy": nic}}
	reg := prometheus.NewRegistry()
	_, sock, _ := start(t, Deps{ActivePods: func() []*v1.Pod { return []*v1.Pod{trainer, web} }, Devices: devs, Registerer: reg})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := podresourcesv1alpha1.NewPodResourcesListerClient(conn).List(t.Context(), &podresourcesv1alpha1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &podresourcesv1alpha1.ListPodResourcesResponse{PodResources: []*podresourcesv1alpha1.PodResources{
		{Name: "trainer", Namespace: "ml", Containers: []*podresourcesv1alpha1.ContainerResources{
			{Name: "main", Devices: []*podresourcesv1alpha1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"g0", "g1"}}}},
			{Name: "log"},
		}},
		{Name: "web", Namespace: "default", Containers: []*podresourcesv1alpha1.ContainerResources{{Name: "nginx"}}},
	}}
	if diff := cmp.Diff(want, list, protocmp.Transform()); diff != "" {
		t.Errorf("v1alpha1 List (-want +got):\n%s", diff)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] += fmt.Sprintf("%s=%v", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
	}
	wantMetrics := map[string]string{
		"kubelet_pod_resources_endpoint_requests_total": "v1alpha1=1",
	}
	if diff := cmp.Diff(wantMetrics, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestRateLimit: unary calls over the limit fail with the kubelet's error
// (ResourceExhausted, "rejected by rate limit", which the upstream spec
// "should hit throttling when calling podresources List in a tight loop"
// matches with errors.Is); the first Burst calls pass. A rate of one call
// in 1000 s keeps the test independent of the machine's speed.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	c, _, _ := startWith(t, Config{QPS: 0.001, Burst: 3}, Deps{ActivePods: func() []*v1.Pod { return nil }})
	kubelets := status.Error(codes.ResourceExhausted, "rejected by rate limit")
	for i := range 10 {
		_, err := c.List(t.Context(), &podresourcesapi.ListPodResourcesRequest{})
		switch {
		case i < 3 && err != nil:
			t.Errorf("call %d: %v, want it within the burst", i+1, err)
		case i >= 3 && !errors.Is(err, kubelets):
			t.Errorf("call %d: %v, want the kubelet's %v", i+1, err, kubelets)
		}
	}
	if _, err := c.GetAllocatableResources(t.Context(), &podresourcesapi.AllocatableResourcesRequest{}); !errors.Is(err, ErrLimitExceeded) {
		t.Errorf("GetAllocatableResources over the limit: %v", err)
	}
}
