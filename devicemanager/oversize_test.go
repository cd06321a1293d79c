package devicemanager

import (
	"bytes"
	"context"
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

// syncBuffer is a bytes.Buffer safe for concurrent writes that wakes
// waitLog after every write.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{written: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.written <- struct{}{}:
	default:
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitLog waits until cond holds for what has been logged so far.
func (b *syncBuffer) waitLog(t *testing.T, what string, cond func(string) bool) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for !cond(b.String()) {
		select {
		case <-b.written:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s in the log", what)
		}
	}
}

// TestListAndWatchOversized: a list larger than MaxListAndWatchMessage
// leaves the resource at no allocatable devices and is logged at ERROR once
// with the resource name, also when the plugin registers again with the same
// list; a registration whose list fits is taken.
func TestListAndWatchOversized(t *testing.T) {
	t.Parallel()
	logs := newSyncBuffer()
	env := startManagerLogged(t, "", Config{
		MaxListAndWatchMessage: 64 << 10,
		StopGracePeriod:        1000 * time.Hour,
	}, nil, logs)
	const res = "example.com/huge"
	stub := env.plugin("p.sock", res, longIDs(1000, 100), nil, plugintest.Funcs{})
	register := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := stub.Register(ctx, env.socket(), res); err != nil {
			t.Fatal(err)
		}
	}
	oversized := func(n int) func(string) bool {
		return func(log string) bool { return strings.Count(log, "larger than the largest accepted message") == n }
	}
	logs.waitLog(t, "the oversized list", oversized(1))
	register()
	logs.waitLog(t, "the second oversized list", oversized(2))
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

	stub.SetDevices(devices(pluginapi.Healthy, "a", "b"))
	register()
	env.waitCounts(res, counts{2, 2})
}
