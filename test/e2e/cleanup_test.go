package e2e

import (
	"encoding/json"
	"os"
	"syscall"
	"testing"
)

// TestCleanupRemovesKilledAgentsPods: the harness's cleanup of an agent
// killed with a pod running removes that pod's sandbox through the containerd
// the agent left, so the pod's network namespace goes from /run/netns with
// it: killing the shims alone left it there (one such file stayed after a CI
// run).
func TestCleanupRemovesKilledAgentsPods(t *testing.T) {
	var netns string
	t.Run("killed", func(t *testing.T) {
		a := StartAgent(t, Options{})
		a.WriteManifest("web.yaml", webManifest("web", "cleanup"))
		a.WaitPod("web-e2e", "running", running)
		netns = sandboxNetns(t, a)
		if _, err := os.Stat(netns); err != nil {
			t.Fatalf("the pod's network namespace: %v", err)
		}
		a.Stop(syscall.SIGKILL)
	})
	if netns == "" {
		t.Fatal("the subtest found no network namespace")
	}
	if _, err := os.Stat(netns); err == nil {
		t.Errorf("%s is left after the cleanup of a killed agent's pod", netns)
		if err := syscall.Unmount(netns, syscall.MNT_DETACH); err == nil {
			_ = os.Remove(netns)
		}
	}
}

// sandboxNetns returns the path of the network namespace of a's only
// sandbox, from containerd's verbose status (the runtime spec it made).
func sandboxNetns(t *testing.T, a *Agent) string {
	t.Helper()
	c := a.CRI()
	sbs, err := c.ListPodSandbox(t.Context(), nil)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandboxes %d: %v, want 1", len(sbs), err)
	}
	st, err := c.PodSandboxStatus(t.Context(), sbs[0].Id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil {
		t.Fatalf("sandbox %s verbose status: %v", sbs[0].Id, err)
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			return ns.Path
		}
	}
	t.Fatalf("sandbox %s has no network namespace path in %s", sbs[0].Id, st.GetInfo()["info"])
	return ""
}
