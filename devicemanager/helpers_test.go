package devicemanager

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

const waitLimit = time.Minute

type testEnv struct {
	t    *testing.T
	m    *Manager
	dir  string
	reg  *prometheus.Registry
	stop func() error // cancels Run and returns its error
	// active is the pod list ActivePods returns; nil means none.
	active *[]*v1.Pod
}

// startManager creates a Manager on dir (a new temp dir when empty) and runs
// it on the real clock until the test ends.
func startManager(t *testing.T, dir string, cfg Config) *testEnv {
	t.Helper()
	return startManagerOn(t, dir, cfg, nil)
}

// startManagerOn is startManager with Deps.Clock set to clk.
func startManagerOn(t *testing.T, dir string, cfg Config, clk clock.WithTicker) *testEnv {
	t.Helper()
	return startManagerLogged(t, dir, cfg, clk, nil)
}

// startManagerLogged is startManagerOn with the logs also written to logs
// (when not nil).
func startManagerLogged(t *testing.T, dir string, cfg Config, clk clock.WithTicker, logs io.Writer) *testEnv {
	t.Helper()
	out := t.Output()
	if logs != nil {
		out = io.MultiWriter(out, logs)
	}
	if dir == "" {
		dir = t.TempDir()
	}
	cfg.Dir = dir
	reg := prometheus.NewRegistry()
	var active []*v1.Pod
	env := &testEnv{t: t, dir: dir, reg: reg, active: &active}
	m, err := New(cfg, Deps{
		Logger:     slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ActivePods: func() []*v1.Pod { return *env.active },
		Registerer: reg,
		Clock:      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	env.m = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	var runErr error
	env.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := env.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-m.started:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("Run did not start")
	}
	return env
}

func (e *testEnv) socket() string { return filepath.Join(e.dir, SocketName) }

// plugin starts a stub plugin in the manager's directory and registers it.
func (e *testEnv) plugin(name, resource string, devs []*pluginapi.Device, opts *pluginapi.DevicePluginOptions, funcs plugintest.Funcs) *plugintest.Stub {
	e.t.Helper()
	s := plugintest.New(filepath.Join(e.dir, name), devs, opts, funcs)
	if err := s.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := s.Register(ctx, e.socket(), resource); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// waitFor waits until cond holds, re-checking after every state change.
func (e *testEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-e.m.Changed():
		case <-deadline.C:
			e.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// timerClock is a fake clock that sends the duration of every timer created
// on it to created, after the timer is armed: a test that received it may
// step the clock past the timer.
type timerClock struct {
	*testingclock.FakeClock
	created chan time.Duration
}

func newTimerClock() timerClock {
	return timerClock{testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), make(chan time.Duration, 64)}
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.created <- d
	return t
}

// counts is a Capacity result in plain numbers.
type counts struct{ Capacity, Allocatable int64 }

func (e *testEnv) counts() map[string]counts {
	c, a, _ := e.m.Capacity()
	return toCounts(c, a)
}

func toCounts(c, a v1.ResourceList) map[string]counts {
	out := map[string]counts{}
	for name, q := range c {
		al := a[name]
		out[string(name)] = counts{Capacity: q.Value(), Allocatable: al.Value()}
	}
	return out
}

func (e *testEnv) waitCounts(res string, want counts) {
	e.t.Helper()
	e.waitFor(res+" counts", func() bool { return e.counts()[res] == want })
}

func devices(health string, ids ...string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for _, id := range ids {
		out = append(out, &pluginapi.Device{ID: id, Health: health})
	}
	return out
}

func ctr(name string, limits map[string]int64) v1.Container {
	c := v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{}}}
	for k, v := range limits {
		c.Resources.Limits[v1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return c
}

func sidecar(c v1.Container) v1.Container {
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func pod(uid string, inits []v1.Container, apps ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metaFor(uid),
		Spec:       v1.PodSpec{InitContainers: inits, Containers: apps},
	}
}

func metaFor(uid string) (om metav1.ObjectMeta) {
	om.Name = "pod-" + uid
	om.Namespace = "default"
	om.UID = types.UID(uid)
	return om
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// metricValue returns the counter value or histogram sample count of the
// named metric with the given resource_name label, from the test registry.
func (e *testEnv) metricValue(name, res string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource_name" && l.GetValue() == res {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}
