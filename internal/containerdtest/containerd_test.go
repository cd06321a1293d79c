package containerdtest

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStartRunsAPodAndAContainer(t *testing.T) {
	start := time.Now()
	c := Start(t)
	t.Logf("containerd ready in %v (restrict_oom_score_adj=%v)", time.Since(start), c.RestrictOOMScoreAdj)
	app := c.Build(t, Image{Ref: "docker.io/nodekeeper/app:1", Runnable: true})
	c.Import(t, app)
	pod := c.RunPod(t, "smoke", "uid-smoke")
	id := c.CreateContainer(t, pod, "app", 0, app.Ref, nil, true)
	st, err := c.CRI.ContainerStatus(t.Context(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state = %v, want running", got)
	}
	if got := st.GetStatus().GetImageRef(); got != app.ID {
		t.Errorf("container image ref = %q, want the image ID %q", got, app.ID)
	}
	done := c.CreateContainer(t, pod, "job", 0, app.Ref, []string{"exit", "3"}, true)
	c.WaitExited(t, done)
	t.Logf("total %v", time.Since(start))
}
