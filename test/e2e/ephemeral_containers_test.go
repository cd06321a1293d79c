package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ephemeralRunning reports whether the pod's ephemeral container name runs.
func ephemeralRunning(name string) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool {
		for _, c := range p.Status.EphemeralContainerStatuses {
			if c.Name == name {
				return c.State.Running != nil
			}
		}
		return false
	}
}

// TestClusterEphemeralContainers: ephemeral containers added through the
// pods/ephemeralcontainers subresource (kubectl debug) run beside the pod's
// container, which is not restarted; exec and logs reach them through the
// API server, and a second one added later runs too.
func TestClusterEphemeralContainers(t *testing.T) {
	c := startCluster(t, Options{})
	ctx := context.Background()
	c.create(c.apiPod("target", "sleep"))
	p := c.waitAPIPod("target", "Running", 60*time.Second, running)
	mainID := p.Status.ContainerStatuses[0].ContainerID

	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "debugger", Image: testbox, ImagePullPolicy: v1.PullNever, Args: []string{"serve", "--http", "8081"},
			Stdin: true, TTY: true, TerminationMessagePolicy: v1.TerminationMessageReadFile,
		},
		TargetContainerName: "main",
	})
	if _, err := c.admin.CoreV1().Pods(c.ns).UpdateEphemeralContainers(ctx, "target", p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = c.waitAPIPod("target", "with its ephemeral container running", 60*time.Second, ephemeralRunning("debugger"))
	if cs := p.Status.ContainerStatuses[0]; cs.ContainerID != mainID || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("the pod's container after the ephemeral one was added: %+v (was %s)", cs, mainID)
	}
	if es := p.Status.EphemeralContainerStatuses[0]; es.ContainerID == "" || es.RestartCount != 0 || es.Ready {
		t.Errorf("ephemeral container status %+v", es)
	}

	stdout, stderr, err := c.exec("target", "debugger", "/testbox", "env")
	if err != nil || !strings.Contains(stdout, "HOSTNAME=target") {
		t.Errorf("exec in the ephemeral container: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	c.agent.Eventually("the ephemeral container's logs", 30*time.Second, func() (bool, string) {
		b, err := c.admin.CoreV1().Pods(c.ns).GetLogs("target", &v1.PodLogOptions{Container: "debugger"}).DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(b), "http on"), string(b)
	})

	if p, err = c.admin.CoreV1().Pods(c.ns).Get(ctx, "target", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "debugger2", Image: testbox, ImagePullPolicy: v1.PullNever, Args: []string{"sleep"},
			TerminationMessagePolicy: v1.TerminationMessageReadFile,
		},
	})
	if _, err := c.admin.CoreV1().Pods(c.ns).UpdateEphemeralContainers(ctx, "target", p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = c.waitAPIPod("target", "with its second ephemeral container running", 60*time.Second, ephemeralRunning("debugger2"))
	if cs := p.Status.ContainerStatuses[0]; cs.ContainerID != mainID || cs.RestartCount != 0 {
		t.Errorf("the pod's container after the second ephemeral one was added: %+v (was %s)", cs, mainID)
	}
	if len(p.Status.EphemeralContainerStatuses) != 2 || !ephemeralRunning("debugger")(p) {
		t.Errorf("ephemeral statuses %+v", p.Status.EphemeralContainerStatuses)
	}
}
