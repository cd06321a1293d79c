package criconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func envMap(kvs []*runtimeapi.KeyValue) [][2]string {
	var out [][2]string
	for _, kv := range kvs {
		out = append(out, [2]string{kv.Key, string(kv.Value)})
	}
	return out
}

func TestContainerEnv(t *testing.T) {
	t.Parallel()
	ref := func(path string) *v1.EnvVarSource {
		return &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
	}
	res := func(r, div, ctr string) *v1.EnvVarSource {
		s := &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: r, ContainerName: ctr}}
		if div != "" {
			s.ResourceFieldRef.Divisor = resource.MustParse(div)
		}
		return s
	}
	pod := testPod(func(p *v1.Pod) {
		p.Spec.ServiceAccountName = "sa"
		p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: rl("memory", "64Mi")}}}
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("cpu", "250m", "memory", "100Mi"), Limits: rl("cpu", "1500m")}
		p.Spec.Containers[0].Env = []v1.EnvVar{
			{Name: "A", Value: "a"},
			{Name: "B", Value: "$(A)-b-$(C)"},
			{Name: "C", Value: "c"},
			{Name: "POD", ValueFrom: ref("metadata.name")},
			{Name: "NS", ValueFrom: ref("metadata.namespace")},
			{Name: "UID", ValueFrom: ref("metadata.uid")},
			{Name: "LABEL", ValueFrom: ref("metadata.labels['app']")},
			{Name: "ANNO", ValueFrom: ref("metadata.annotations['note']")},
			{Name: "NODE", ValueFrom: ref("spec.nodeName")},
			{Name: "SA", ValueFrom: ref("spec.serviceAccountName")},
			{Name: "IP", ValueFrom: ref("status.podIP")},
			{Name: "IPS", ValueFrom: ref("status.podIPs")},
			{Name: "HOST", ValueFrom: ref("status.hostIP")},
			{Name: "CPU_LIM", ValueFrom: res("limits.cpu", "", "")},
			{Name: "CPU_LIM_M", ValueFrom: res("limits.cpu", "1m", "")},
			{Name: "CPU_REQ", ValueFrom: res("requests.cpu", "", "")},
			{Name: "MEM_LIM", ValueFrom: res("limits.memory", "1Mi", "")},
			{Name: "MEM_REQ", ValueFrom: res("requests.memory", "1Mi", "")},
			{Name: "INIT_MEM_REQ", ValueFrom: res("requests.memory", "1Mi", "init")},
			{Name: "A", Value: "again"},
		}
	})
	got, err := Env(Input{Pod: pod, Container: &pod.Spec.Containers[0], PodIPs: []string{"10.1.0.5", "fd00::5"}, HostIP: "192.168.1.2", NodeName: "node1", MemoryCapacity: 8 << 30, CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{"A", "again"}, {"B", "a-b-$(C)"}, {"C", "c"}, {"POD", "web"}, {"NS", "ns"}, {"UID", "uid-1"}, {"LABEL", "web"}, {"ANNO", "n"},
		{"NODE", "node1"}, {"SA", "sa"}, {"IP", "10.1.0.5"}, {"IPS", "10.1.0.5,fd00::5"}, {"HOST", "192.168.1.2"},
		{"CPU_LIM", "2"}, {"CPU_LIM_M", "1500"}, {"CPU_REQ", "1"}, {"MEM_LIM", "8192"}, {"MEM_REQ", "100"}, {"INIT_MEM_REQ", "64"},
	}
	if diff := cmp.Diff(want, envMap(got)); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestContainerEnvHostNetworkPodIP(t *testing.T) {
	t.Parallel()
	pod := testPod(func(p *v1.Pod) {
		p.Spec.HostNetwork = true
		p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	})
	got, err := Env(Input{Pod: pod, Container: &pod.Spec.Containers[0], HostIP: "192.168.1.2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][2]string{{"IP", "192.168.1.2"}}, envMap(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestContainerEnvErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    v1.Container
		want string
	}{
		{"bad field", v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.bogus"}}}}},
			`container "app": env[0] X: fieldRef.fieldPath "spec.bogus" is not supported`},
		{"secret", v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}}}},
			`container "app": env[0] X: valueFrom needs ConfigMaps or Secrets`},
		{"envFrom", v1.Container{Name: "app", EnvFrom: []v1.EnvFromSource{{}}}, `container "app": envFrom needs`},
		{"bad resource", v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.nvidia.com/gpu"}}}}},
			`resourceFieldRef.resource "limits.nvidia.com/gpu" is not supported`},
		{"other container", v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu", ContainerName: "nope"}}}}},
			`resourceFieldRef.containerName "nope" is not a container of the pod`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod()
			pod.Spec.Containers[0] = tc.c
			_, err := Env(Input{Pod: pod, Container: &pod.Spec.Containers[0], MemoryCapacity: 1 << 30, CPUs: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestContainerResources(t *testing.T) {
	t.Parallel()
	const capacity = 4 << 30
	oomGroup := map[string]string{"memory.oom.group": "1"}
	tests := []struct {
		name     string
		res      v1.ResourceRequirements
		oomGroup bool
		want     *runtimeapi.LinuxContainerResources
	}{
		{"best effort", v1.ResourceRequirements{}, false, &runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000}},
		{"guaranteed", v1.ResourceRequirements{Limits: rl("cpu", "500m", "memory", "128Mi")}, false,
			&runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: -997}},
		{"burstable", v1.ResourceRequirements{Requests: rl("cpu", "1m", "memory", "1Gi"), Limits: rl("cpu", "5m")}, false,
			&runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: 1000, OomScoreAdj: 750}},
		{"best effort, oom group (cgroup v2)", v1.ResourceRequirements{}, true,
			&runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000, Unified: oomGroup}},
		{"guaranteed, oom group (cgroup v2)", v1.ResourceRequirements{Limits: rl("cpu", "500m", "memory", "128Mi")}, true,
			&runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: -997, Unified: oomGroup}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod(func(p *v1.Pod) { p.Spec.Containers[0].Resources = tc.res })
			got := containerResources(pod, &pod.Spec.Containers[0], capacity, tc.oomGroup)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestContainerHash(t *testing.T) {
	t.Parallel()
	a := v1.Container{Name: "app", Image: "img:1"}
	b := a
	if Hash(&a) != Hash(&b) {
		t.Error("equal specs hash differently")
	}
	b.Args = []string{"x"}
	if Hash(&a) == Hash(&b) {
		t.Error("a changed spec keeps its hash")
	}
}

// TestContainerHashGiven: the config carries the hash the sync computed
// (once per container per sync) and computes it only when none is given
// (an ephemeral container).
func TestContainerHashGiven(t *testing.T) {
	t.Parallel()
	pod := testPod()
	c := &pod.Spec.Containers[0]
	for _, tc := range []struct{ name, given, want string }{
		{"given", "cafe", "cafe"},
		{"computed", "", Hash(c)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Container(Input{Pod: pod, Container: c, Hash: tc.given, MemoryCapacity: 1 << 30, CPUs: 1}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Annotations[AnnotationContainerHash]; got != tc.want {
				t.Errorf("hash annotation %q, want %q", got, tc.want)
			}
		})
	}
}
