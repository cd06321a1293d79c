package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

// TestHungDevicePluginHoldsNoOtherPod is issue 26's item 15: while a device
// plugin does not answer a pod's Allocate, a pod that asks for no device is
// admitted and runs; the stuck pod is rejected as the kubelet rejects it
// once the plugin's Allocate fails.
func TestHungDevicePluginHoldsNoOtherPod(t *testing.T) {
	a := StartAgent(t, Options{})

	// Each Allocate call is handed to the test, which answers it; ended is
	// closed when one returns (answered, or timed out by the agent).
	calls := make(chan chan error)
	ended := make(chan struct{})
	endOnce := sync.OnceFunc(func() { close(ended) })
	pluginDir := filepath.Join(a.Root, "device-plugins")
	stub := plugintest.New(filepath.Join(pluginDir, "e2e-hung.sock"),
		[]*pluginapi.Device{{ID: "fake-0", Health: pluginapi.Healthy}}, nil, plugintest.Funcs{
			Allocate: func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
				defer endOnce()
				answer := make(chan error, 1)
				select {
				case calls <- answer:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				select {
				case err := <-answer:
					return nil, err
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
		})
	if err := stub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Stop)
	if err := stub.Register(t.Context(), filepath.Join(pluginDir, "kubelet.sock"), fakeResource); err != nil {
		t.Fatalf("register with the agent: %v", err)
	}
	a.Eventually(fakeResource+" on the node", 30*time.Second, func() (bool, string) {
		n, err := a.node()
		if err != nil {
			return false, err.Error()
		}
		c := n.Status.Capacity[fakeResource]
		return c.Value() == 1, "capacity " + c.String()
	})

	a.WriteManifest("stuck.yaml", deviceManifest("stuck", 1))
	var answer chan error
	select {
	case answer = <-calls:
	case <-time.After(90 * time.Second):
		t.Fatal("the stuck pod's Allocate did not reach the plugin")
	}

	start := time.Now()
	a.WriteManifest("web.yaml", sleepManifest("web"))
	a.WaitPod("web-e2e", "running", running)
	t.Logf("web running %v after its manifest was written, with stuck's Allocate unanswered", time.Since(start).Round(time.Millisecond))
	select {
	case <-ended:
		t.Fatal("stuck's Allocate ended before web ran: web's admission waited for it")
	default:
	}
	if p := a.Pod("stuck-e2e"); p == nil || p.Status.Phase != v1.PodPending {
		t.Errorf("stuck pod while its Allocate waits: %v, want Pending", p)
	}

	answer <- errors.New("device on fire")
	stuck := a.WaitPod("stuck-e2e", "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	const msg = "Allocate failed due to rpc error: code = Unknown desc = device on fire, which is unexpected"
	if stuck.Status.Reason != "UnexpectedAdmissionError" || stuck.Status.Message != msg {
		t.Errorf("stuck pod status: %s: %s; want UnexpectedAdmissionError: %s", stuck.Status.Reason, stuck.Status.Message, msg)
	}
	a.RemoveManifest("stuck.yaml")
	a.RemoveManifest("web.yaml")
	a.WaitGone("web-e2e")
}
