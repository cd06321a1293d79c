package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Defaults for Config fields left zero.
const (
	DefaultDir             = "/var/lib/kubelet/device-plugins"
	DefaultStopGracePeriod = 5 * time.Minute
	DefaultDialTimeout     = 10 * time.Second
	DefaultAllocateTimeout = 30 * time.Second
	DefaultPreStartTimeout = 30 * time.Second
	// DefaultMaxListAndWatchMessage bounds one ListAndWatch message from a
	// plugin (gRPC's own default is 4 MiB). A device costs its ID plus a few
	// bytes of framing, and a topology entry a few more: 100,000 devices with
	// 256-byte IDs and one NUMA node each are about 27 MiB, so 64 MiB takes
	// any realistic node with room to spare while bounding what one message
	// can make the agent hold (the message, then its device sets).
	DefaultMaxListAndWatchMessage = 64 << 20
	// SocketName is the registration socket's name inside Dir.
	SocketName = "kubelet.sock"
)

// Config holds the Manager's settings. Zero fields take the defaults above.
type Config struct {
	// Dir is the device-plugin directory: the registration socket, the
	// plugins' sockets and the checkpoint live here.
	Dir string
	// StopGracePeriod is how long a resource whose plugin went away keeps
	// appearing (with its devices unhealthy) before Capacity removes it,
	// measured on Deps.Clock.
	StopGracePeriod time.Duration
	// DialTimeout bounds connecting to a registering plugin and its
	// GetDevicePluginOptions answer. This and the two RPC timeouts below are
	// network deadlines, in real time whatever Deps.Clock is.
	DialTimeout time.Duration
	// AllocateTimeout bounds each GetPreferredAllocation and Allocate RPC.
	AllocateTimeout time.Duration
	// PreStartTimeout bounds each PreStartContainer RPC.
	PreStartTimeout time.Duration
	// MaxListAndWatchMessage is the largest ListAndWatch message, in bytes,
	// accepted from a plugin. A larger one ends the stream; the resource's
	// devices stay unhealthy until the plugin registers again.
	MaxListAndWatchMessage int
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if !filepath.IsAbs(c.Dir) {
		return c, fmt.Errorf("device-plugin directory %q: must be an absolute path", c.Dir)
	}
	set := func(d *time.Duration, def time.Duration, name string) error {
		switch {
		case *d == 0:
			*d = def
		case *d < 0:
			return fmt.Errorf("%s %v: must not be negative", name, *d)
		}
		return nil
	}
	var sizeErr error
	switch {
	case c.MaxListAndWatchMessage == 0:
		c.MaxListAndWatchMessage = DefaultMaxListAndWatchMessage
	case c.MaxListAndWatchMessage < 0:
		sizeErr = fmt.Errorf("maxListAndWatchMessage %d: must not be negative", c.MaxListAndWatchMessage)
	}
	return c, errors.Join(sizeErr,
		set(&c.StopGracePeriod, DefaultStopGracePeriod, "stopGracePeriod"),
		set(&c.DialTimeout, DefaultDialTimeout, "dialTimeout"),
		set(&c.AllocateTimeout, DefaultAllocateTimeout, "allocateTimeout"),
		set(&c.PreStartTimeout, DefaultPreStartTimeout, "preStartTimeout"),
	)
}

// Deps are the Manager's links to the rest of the agent. Every function is
// called without any Manager lock held and may be called from any goroutine.
type Deps struct {
	// Logger receives the Manager's logs. Nil discards them.
	Logger *slog.Logger
	// ActivePods lists the pods that still hold their devices; devices of
	// other pods are freed before each allocation. Nil frees nothing.
	ActivePods func() []*v1.Pod
	// SourcesReady reports whether every pod source has been seen since
	// start, so that ActivePods is complete. Nil means always ready.
	SourcesReady func() bool
	// ContainerRunning reports whether the runtime already runs the
	// container; while sources are not ready (a restart), a running
	// container keeps its devices without any check. Nil means never.
	ContainerRunning func(podUID, containerName string) bool
	// Registerer receives the Manager's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// RuntimeDevices, when set, lists the devices the runtime's live
	// containers hold (RuntimeDevices over CRI). When the checkpoint is
	// unreadable, Run rebuilds the assignments from it before serving, and
	// devices of a pod that ActivePods no longer lists are freed only once
	// no live container of the pod holds them.
	RuntimeDevices func(ctx context.Context) ([]HeldDevices, error)
	// Recorder, when set, gets the node event of a checkpoint recovery,
	// about the node NodeName.
	Recorder nodeapi.Recorder
	NodeName string
	// Clock is what the Manager's time reads and waits go through: the stop
	// grace period (when a plugin was lost, and Capacity's now), the
	// checkpoint save delay, the reconnect back-off, the restore time and
	// the allocation duration metric. Nil means the real clock. The RPC
	// bounds (DialTimeout, AllocateTimeout, PreStartTimeout) are network
	// deadlines and stay real-time context deadlines whatever the Clock.
	// It is injected because the tests step it while the manager talks to
	// real plugins over unix sockets, which a synctest bubble cannot hold
	// (docs/architecture.md, One time model).
	Clock clock.WithTicker
}
