package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestCrashLoopBackOffMax: with crashLoopBackOff.maxContainerRestartPeriod
// 2s (the KubeletCrashLoopBackOffMax gate is on by default), a container that
// exits at once restarts at once after its first exit and about every 2s
// after the next ones, not after 10s, 20s, 40s, ... as by default (upstream
// "Container Restart [Feature:CriProxy]" specs). The intervals are measured
// from the instances' startedAt and finishedAt in the pod status (to the
// second): from the second restart on, each is at least the 2s back-off and
// at most 2s plus a margin for a busy machine; six restarts take about 12s
// here, over 5 minutes by default.
func TestCrashLoopBackOffMax(t *testing.T) {
	a := StartAgent(t, Options{Config: "crashLoopBackOff: {maxContainerRestartPeriod: 2s}\n"})
	a.WriteManifest("crash.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  containers:
  - {name: main, image: %s, args: ["exit", "1"]}
`, testbox))
	const restarts = 6
	// Every instance seen, by container ID: when it started and exited.
	type instance struct{ started, finished time.Time }
	seen := map[string]instance{}
	note := func(s *v1.ContainerStateTerminated) {
		if s != nil && s.ContainerID != "" && !s.FinishedAt.IsZero() {
			seen[s.ContainerID] = instance{started: s.StartedAt.Time, finished: s.FinishedAt.Time}
		}
	}
	a.Eventually(fmt.Sprintf("pod crash-e2e: %d restarts", restarts), 60*time.Second, func() (bool, string) {
		p := a.Pod("crash-e2e")
		if p == nil || len(p.Status.ContainerStatuses) != 1 {
			return false, "no pod or no container status"
		}
		cs := p.Status.ContainerStatuses[0]
		note(cs.State.Terminated)
		note(cs.LastTerminationState.Terminated)
		return cs.RestartCount >= restarts && len(seen) >= restarts, podSummary(p)
	})
	var all []instance
	for _, in := range seen {
		all = append(all, in)
	}
	slices.SortFunc(all, func(x, y instance) int { return x.started.Compare(y.started) })
	var gaps []string
	for i := 1; i < len(all); i++ {
		gaps = append(gaps, all[i].started.Sub(all[i-1].finished).String())
	}
	t.Logf("from each exit to the next start: %s", strings.Join(gaps, " "))
	upper := 2*time.Second + slow(t, 5*time.Second)
	for i := 1; i < len(all); i++ {
		gap := all[i].started.Sub(all[i-1].finished)
		if gap > upper {
			t.Errorf("instance %d started %v after instance %d exited; want at most %v (2s back-off and a margin)", i, gap, i-1, upper)
		}
		// The pod's first instance is restarted at once, every next one
		// after the 2s back-off: from all[2] on (all[0] is that first
		// instance, or the second if the poll missed the first). Timestamps
		// are cut to the second, so a 2s wait shows as 2s or more.
		if i >= 2 && gap < 2*time.Second {
			t.Errorf("instance %d started %v after instance %d exited; want the 2s back-off", i, gap, i-1)
		}
	}
}
