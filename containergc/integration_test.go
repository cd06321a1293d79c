package containergc

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// TestContainerdIntegration runs container GC against a real containerd with
// host-network pods whose containers really ran and exited.
func TestContainerdIntegration(t *testing.T) {
	start := time.Now()
	ctd := containerdtest.Start(t)
	ctx := t.Context()
	app := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/app:1", Runnable: true})
	ctd.Import(t, app)

	// run creates a container that exits at once and waits for it.
	exitOnce := func(pod containerdtest.Pod, name string, attempt uint32) string {
		id := ctd.CreateContainer(t, pod, name, attempt, app.Ref, []string{"exit", "0"}, true)
		ctd.WaitExited(t, id)
		return id
	}
	live := ctd.RunPod(t, "live", "uid-live")
	exitOnce(live, "app", 0)
	exitOnce(live, "app", 1)
	app2 := exitOnce(live, "app", 2)
	app3 := ctd.CreateContainer(t, live, "app", 3, app.Ref, nil, true) // running
	side := exitOnce(live, "side", 0)

	gone := ctd.RunPod(t, "gone", "uid-gone")
	exitOnce(gone, "job", 0)
	if err := ctd.CRI.StopPodSandbox(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	term := ctd.RunPod(t, "term", "uid-term")
	termJob := exitOnce(term, "job", 0)
	if err := ctd.CRI.StopPodSandbox(ctx, term.ID); err != nil {
		t.Fatal(err)
	}

	rec := &recorder{}
	c, err := New(DefaultPolicy(), 0, Deps{
		Runtime:  ctd.CRI,
		Pods:     pods{deleted: map[string]bool{"uid-gone": true}, terminated: map[string]bool{"uid-term": true}},
		Recorder: rec,
		Logger:   slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}

	// Periodic pass: app keeps its newest dead attempt (2) and the running one;
	// the deleted pod loses its container and its stopped sandbox; the
	// terminated pod keeps both.
	if err := c.GarbageCollect(ctx, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(app2, app3, side, termJob), containerIDs(t, ctd)); diff != "" {
		t.Errorf("containers after GC (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sorted(live.ID, term.ID), sandboxIDs(t, ctd)); diff != "" {
		t.Errorf("sandboxes after GC (-want +got):\n%s", diff)
	}

	// Eviction's reclaim also empties the terminated pod.
	if err := c.DeleteAllUnusedContainers(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(app2, app3, side), containerIDs(t, ctd)); diff != "" {
		t.Errorf("containers after DeleteAllUnusedContainers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{live.ID}, sandboxIDs(t, ctd)); diff != "" {
		t.Errorf("sandboxes after DeleteAllUnusedContainers (-want +got):\n%s", diff)
	}
	st, err := ctd.CRI.ContainerStatus(ctx, app3, false)
	if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("running container after GC: %v, %v", st.GetStatus().GetState(), err)
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("events = %v", got)
	}
	t.Logf("integration test took %v", time.Since(start))
}

func containerIDs(t *testing.T, ctd *containerdtest.Containerd) []string {
	t.Helper()
	cs, err := ctd.CRI.ListContainers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.Id)
	}
	return sorted(ids...)
}

func sandboxIDs(t *testing.T, ctd *containerdtest.Containerd) []string {
	t.Helper()
	sbs, err := ctd.CRI.ListPodSandbox(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range sbs {
		ids = append(ids, s.Id)
	}
	return sorted(ids...)
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
