package devicemanager

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

// longIDs returns n healthy devices whose IDs are idLen bytes long.
func longIDs(n, idLen int) []*pluginapi.Device {
	out := make([]*pluginapi.Device, n)
	for i := range out {
		id := fmt.Sprintf("dev-%08d-", i)
		out[i] = &pluginapi.Device{ID: id + strings.Repeat("x", idLen-len(id)), Health: pluginapi.Healthy}
	}
	return out
}

// TestListAndWatchLargerThanGRPCDefault: a device list beyond gRPC's default
// 4 MiB receive limit (24,000 devices with 250-byte IDs, about 6 MiB) is
// accepted under the default MaxListAndWatchMessage.
func TestListAndWatchLargerThanGRPCDefault(t *testing.T) {
	t.Parallel()
	const n = 24000
	devs := longIDs(n, 250)
	if size := proto.Size(&pluginapi.ListAndWatchResponse{Devices: devs}); size <= 4<<20 {
		t.Fatalf("test message is %d bytes, want more than 4 MiB", size)
	}
	env := startManager(t, "", Config{})
	const res = "example.com/big"
	env.plugin("p.sock", res, devs, nil, plugintest.Funcs{})
	env.waitCounts(res, counts{n, n})
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestListAndWatchOversized: a list larger than MaxListAndWatchMessage
// leaves the resource at no allocatable devices, is logged at ERROR once
// with the resource name, and the re-dial backs off exponentially on the
// Manager's clock instead of spinning.
func TestListAndWatchOversized(t *testing.T) {
	t.Parallel()
	const backoff = time.Hour // never reached on the real clock during the test
	clk := newTimerClock()
	var logs syncBuffer
	env := startManagerLogged(t, "", Config{
		MaxListAndWatchMessage: 64 << 10,
		ReconnectBackoff:       backoff,
		MaxReconnectBackoff:    8 * backoff,
		StopGracePeriod:        1000 * time.Hour,
	}, clk, &logs)
	const res = "example.com/huge"
	stub := env.plugin("p.sock", res, longIDs(1000, 100), nil, plugintest.Funcs{})
	if n := <-stub.Watches(); n != 1 {
		t.Fatalf("first stream number %d", n)
	}
	for i, wait := range []time.Duration{backoff, 2 * backoff, 4 * backoff, 8 * backoff, 8 * backoff} {
		clk.waitTimer(t, wait)
		select {
		case n := <-stub.Watches():
			t.Fatalf("stream %d opened before the %v back-off passed", n, wait)
		default:
		}
		clk.Step(wait)
		select {
		case n := <-stub.Watches():
			if n != i+2 {
				t.Fatalf("stream number %d after back-off, want %d", n, i+2)
			}
		case <-time.After(waitLimit):
			t.Fatalf("manager did not re-dial the plugin after the %v back-off", wait)
		}
	}
	if got := env.counts()[res]; got.Allocatable != 0 {
		t.Errorf("%s allocatable = %d, want 0", res, got.Allocatable)
	}
	var errs []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=ERROR") {
			errs = append(errs, line)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "resourceName="+res) || !strings.Contains(errs[0], "ResourceExhausted") {
		t.Errorf("ERROR lines = %q, want one naming %s and ResourceExhausted", errs, res)
	}

	// A list that fits is taken at the next re-dial.
	clk.waitTimer(t, 8*backoff)
	stub.SetDevices(devices(pluginapi.Healthy, "a", "b"))
	clk.Step(8 * backoff)
	env.waitCounts(res, counts{2, 2})
}
