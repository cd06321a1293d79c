package podruntime

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/plan"
)

// benchPod is a pod of a sidecar and five regular containers, each with the
// env, ports, resources and probes a real spec carries, so that its JSON
// (the container hash's input) is of a realistic size.
func benchPod() *v1.Pod {
	ctr := func(name string) v1.Container {
		return v1.Container{
			Name: name, Image: "img:1", Command: []string{"/bin/server"}, Args: []string{"--port=8080", "--verbose"},
			Env:            []v1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "two"}, {Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Ports:          []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
			Resources:      v1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("cpu", "1", "memory", "128Mi")},
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready"}}, PeriodSeconds: 5},
		}
	}
	always := v1.ContainerRestartPolicyAlways
	side := ctr("sidecar")
	side.RestartPolicy = &always
	return testPod(func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{side}
		p.Spec.Containers = []v1.Container{ctr("a"), ctr("b"), ctr("c"), ctr("d"), ctr("e")}
	})
}

// BenchmarkSyncPodSteady is one SyncPod of a pod whose containers all run as
// their spec asks (the sync the agent runs after each change the relist
// shows): its planning, with the pod directories and volumes checked, over
// cri-api's in-memory fake.
func BenchmarkSyncPodSteady(b *testing.B) {
	dir := b.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte(hostResolv), 0o644); err != nil {
		b.Fatal(err)
	}
	rt, img := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	img.SetFakeImages([]string{"img:1"})
	m, err := New(Config{NodeName: "node1", PodsDir: filepath.Join(dir, "pods"), PodLogsDir: filepath.Join(dir, "logs"), HostIP: "192.168.1.2", MemoryCapacity: 4 << 30, CPUs: 2, DNS: resolv},
		Deps{Runtime: fakeCRI{rt, img}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Recorder: &events{}})
	if err != nil {
		b.Fatal(err)
	}
	pod := benchPod()
	var p pods
	if res := p.syncPod(b.Context(), m, pod, nil); res.Err != nil {
		b.Fatal(res.Err)
	}
	all, err := m.Statuses(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	status := all[pod.UID]
	if res := p.syncPod(b.Context(), m, pod, status); res.Err != nil || len(res.Started) != 5 {
		b.Fatalf("second sync: started %v, err %v; want the five containers", res.Started, res.Err)
	}
	if all, err = m.Statuses(b.Context()); err != nil {
		b.Fatal(err)
	}
	status = all[pod.UID]
	state := p.states[pod.UID]
	b.ReportAllocs()
	for b.Loop() {
		res := m.SyncPod(b.Context(), pod, status, state)
		if res.Err != nil || len(res.Started) != 0 {
			b.Fatalf("steady sync: started %v, err %v", res.Started, res.Err)
		}
	}
}

// BenchmarkPlanSteady is the planning part of BenchmarkSyncPodSteady's sync:
// what SyncPod computes before it touches the runtime.
func BenchmarkPlanSteady(b *testing.B) {
	dir := b.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte(hostResolv), 0o644); err != nil {
		b.Fatal(err)
	}
	rt, img := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	img.SetFakeImages([]string{"img:1"})
	m, err := New(Config{NodeName: "node1", PodsDir: filepath.Join(dir, "pods"), PodLogsDir: filepath.Join(dir, "logs"), HostIP: "192.168.1.2", MemoryCapacity: 4 << 30, CPUs: 2, DNS: resolv},
		Deps{Runtime: fakeCRI{rt, img}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Recorder: &events{}})
	if err != nil {
		b.Fatal(err)
	}
	pod := benchPod()
	var p pods
	p.syncPod(b.Context(), m, pod, nil)
	all, _ := m.Statuses(b.Context())
	p.syncPod(b.Context(), m, pod, all[pod.UID])
	all, _ = m.Statuses(b.Context())
	status, st := all[pod.UID], p.states[pod.UID]
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		acts := plan.Compute(plan.Input{Pod: pod, Status: status, Hashes: criconfig.Hashes(pod), Crash: st.Crash}, now)
		if acts.CreateSandbox || len(acts.Start) != 0 {
			b.Fatalf("steady plan: %+v", acts)
		}
	}
}
