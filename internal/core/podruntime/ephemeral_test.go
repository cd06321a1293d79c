package podruntime

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

// debugger adds ephemeral container name (image img:2) targeting target.
func debugger(name, target string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: name, Image: "img:2", Command: []string{"sh"}, Stdin: true, TTY: true,
				TerminationMessagePolicy: v1.TerminationMessageReadFile,
			},
			TargetContainerName: target,
		})
	}
}

// An update that adds an ephemeral container starts it, once, in the running
// sandbox beside the pod's containers, which keep running; it shares its
// target's process namespace, and the pod's status reports it.
func TestSyncPodEphemeralContainer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		rt := &capturingCRI{fakeCRI: fakeCRI{f.rt, f.img}, configs: map[string]*runtimeapi.ContainerConfig{}}
		f.m.rt = rt
		pod := testPod()
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		f.calls()
		f.events.take()
		appID := f.status(t, pod.UID).Containers[0].Id

		pod = testPod(debugger("dbg", "app"))
		// Before the sync, the ephemeral container waits to be created.
		st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if len(st.EphemeralContainerStatuses) != 1 || stateOf(st.EphemeralContainerStatuses[0]) != "waiting:ContainerCreating" {
			t.Errorf("before the sync: ephemeral statuses %+v", st.EphemeralContainerStatuses)
		}
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		if diff := cmp.Diff([]string{"CreateContainer", "StartContainer"}, f.calls()); diff != "" {
			t.Errorf("calls adding the ephemeral container (-want +got):\n%s", diff)
		}
		want := []string{`Pulled: Container image "img:2" already present on machine`, "Created: Created container dbg", "Started: Started container dbg"}
		if diff := cmp.Diff(want, f.events.take()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		rt.mu.Lock()
		cfg := rt.configs["dbg"]
		rt.mu.Unlock()
		if cfg == nil {
			t.Fatal("no config for dbg")
		}
		if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != appID {
			t.Errorf("pid namespace %v target %q, want TARGET %q", ns.GetPid(), ns.GetTargetId(), appID)
		}
		if cfg.LogPath != "dbg/0.log" || !cfg.Stdin || !cfg.Tty || cfg.Labels[criconfig.LabelContainerName] != "dbg" || cfg.Labels[criconfig.LabelPodUID] != "uid-1" ||
			cfg.Annotations[criconfig.AnnotationRestartCount] != "0" || cfg.Annotations[criconfig.AnnotationContainerHash] == "" {
			t.Errorf("dbg config: log %q stdin %v tty %v labels %v annotations %v", cfg.LogPath, cfg.Stdin, cfg.Tty, cfg.Labels, cfg.Annotations)
		}

		st = f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if len(st.EphemeralContainerStatuses) != 1 {
			t.Fatalf("ephemeral statuses %+v", st.EphemeralContainerStatuses)
		}
		es := st.EphemeralContainerStatuses[0]
		dbgID := ""
		for _, c := range f.status(t, pod.UID).Containers {
			if c.GetMetadata().GetName() == "dbg" {
				dbgID = c.Id
			}
		}
		if es.Name != "dbg" || es.Image != "img:2" || stateOf(es) != "running" || es.RestartCount != 0 || es.Ready || es.Started != nil ||
			dbgID == "" || es.ContainerID != critest.FakeRuntimeName+"://"+dbgID {
			t.Errorf("ephemeral status %+v", es)
		}
		if st.Phase != v1.PodRunning || len(st.ContainerStatuses) != 1 || stateOf(st.ContainerStatuses[0]) != "running" || st.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s, containers %+v", st.Phase, st.ContainerStatuses)
		}

		// Once it exits it is not started again, and the pod runs on.
		time.Sleep(time.Minute)
		f.exit(t, "dbg", 1)
		if res := f.sync(t, pod); res.Err != nil || res.RetryAfter != 0 {
			t.Fatalf("after the exit: %+v", res)
		}
		if got := f.calls(); len(got) != 0 {
			t.Errorf("sync after the ephemeral container exited made calls %v", got)
		}
		st = f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
		if es := st.EphemeralContainerStatuses[0]; stateOf(es) != "terminated:Error" || es.RestartCount != 0 || es.LastTerminationState.Terminated != nil {
			t.Errorf("exited ephemeral status %+v", es)
		}
		if st.Phase != v1.PodRunning {
			t.Errorf("phase %s after the ephemeral container exited", st.Phase)
		}
	})
}

// An ephemeral container whose target is not in the runtime is not created:
// it waits in CreateContainerConfigError, as with the kubelet, and the
// pod's containers start regardless.
func TestSyncPodEphemeralTargetMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.calls()
	f.events.take()
	pod = testPod(debugger("dbg", "gone"))
	if res := f.sync(t, pod); res.Err == nil {
		t.Error("sync with a missing target: no error")
	}
	if got := f.calls(); len(got) != 0 {
		t.Errorf("calls %v, want none", got)
	}
	want := []string{`Pulled: Container image "img:2" already present on machine`, "Failed: Error: unable to find target container gone"}
	if diff := cmp.Diff(want, f.events.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	es := st.EphemeralContainerStatuses[0]
	if es.State.Waiting == nil || es.State.Waiting.Reason != reasonCreateError || es.State.Waiting.Message != "unable to find target container gone" {
		t.Errorf("ephemeral state %+v", es.State)
	}
}

// A pod is killed with its ephemeral containers.
func TestKillPodStopsEphemeral(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pod := testPod()
	f.sync(t, pod)
	pod = testPod(debugger("dbg", ""))
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.calls()
	f.events.take()
	if err := f.m.KillPod(t.Context(), pod, f.status(t, pod.UID), ptr.To[int64](0)); err != nil {
		t.Fatal(err)
	}
	got := f.events.take()
	want := []string{"Killing: Stopping container app", "Killing: Stopping container dbg"}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("kill events (-want +got):\n%s", diff)
	}
}

// Only a pod with a process namespace per container gets the TARGET mode:
// with a shared or the host's, the ephemeral container sees the target's
// processes as it is.
func TestContainerConfigTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mut      func(*v1.Pod)
		targetID string
		want     *runtimeapi.NamespaceOption
	}{
		{name: "no target", want: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}},
		{name: "target", targetID: "c1",
			want: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_TARGET, Ipc: runtimeapi.NamespaceMode_POD, TargetId: "c1"}},
		{name: "shared process namespace", targetID: "c1", mut: func(p *v1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) },
			want: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD}},
		{name: "host pid", targetID: "c1", mut: func(p *v1.Pod) { p.Spec.HostPID = true },
			want: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_POD}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			muts := []func(*v1.Pod){debugger("dbg", "app")}
			if tc.mut != nil {
				muts = append(muts, tc.mut)
			}
			pod := testPod(muts...)
			c := (*v1.Container)(&pod.Spec.EphemeralContainers[0].EphemeralContainerCommon)
			cfg, err := containerConfig(containerInput{Input: criconfig.Input{Pod: pod, Container: c, SandboxID: "sb1", MemoryCapacity: 1 << 30, CPUs: 1, TargetID: tc.targetID}, podsDir: t.TempDir(), termLog: "/term"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg.Linux.SecurityContext.NamespaceOptions, cmpopts.IgnoreUnexported(runtimeapi.NamespaceOption{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
