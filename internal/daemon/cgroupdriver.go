package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

// runtimeConfigurer is the CRI call that reports the runtime's cgroup driver
// (a subset of cri-api's RuntimeService: *cri.Client and the cri-api fake
// satisfy it).
type runtimeConfigurer interface {
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
}

// The kubelet's asking at start (cmd/kubelet getCgroupDriverFromCRI): up to
// driverTries calls, driverRetryWait apart, while the runtime fails otherwise
// than Unimplemented (a runtime still starting).
const (
	driverTries     = 3
	driverRetryWait = 2 * time.Second
)

// cgroupDriver returns the cgroup driver the agent uses with the runtime rt at
// endpoint, decided as the kubelet 1.36 decides it at start
// (KubeletCgroupDriverFromCRI): it calls rt's RuntimeConfig up to driverTries
// times, wait apart, while the call fails otherwise than Unimplemented. A
// runtime that cannot report its driver (Unimplemented: containerd 1.x; or an
// answer without Linux configuration) leaves a.CgroupDriver, with one log
// line; a reported driver goes through a.RuntimeDriver, whose error (the
// configuration sets another driver) is returned as a ConfigError naming
// file. An unknown driver, a runtime still failing after the tries, or ctx
// ending (ctx.Err()) is an error.
func cgroupDriver(ctx context.Context, rt runtimeConfigurer, wait time.Duration, file, endpoint string, a config.Agent, log *slog.Logger) (string, error) {
	var (
		resp *runtimeapi.RuntimeConfigResponse
		err  error
	)
	for try := 1; ; try++ {
		resp, err = rt.RuntimeConfig(ctx)
		if err == nil || errors.Is(err, cri.ErrUnimplemented) || try == driverTries {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
	switch {
	case errors.Is(err, cri.ErrUnimplemented):
		log.Info("the container runtime cannot report its cgroup driver (no CRI RuntimeConfig); using cgroupDriver",
			"cgroupDriver", a.CgroupDriver, "runtime", endpoint)
		return a.CgroupDriver, nil
	case err != nil:
		return "", fmt.Errorf("cgroup driver of the container runtime at %s: %w", endpoint, err)
	case resp.GetLinux() == nil:
		log.Info("the container runtime reports no Linux configuration; using cgroupDriver",
			"cgroupDriver", a.CgroupDriver, "runtime", endpoint)
		return a.CgroupDriver, nil
	}
	var reported string
	switch d := resp.GetLinux().GetCgroupDriver(); d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		reported = "systemd"
	case runtimeapi.CgroupDriver_CGROUPFS:
		reported = "cgroupfs"
	default:
		return "", fmt.Errorf("container runtime at %s: unknown cgroup driver %d in its RuntimeConfig", endpoint, d)
	}
	driver, err := a.RuntimeDriver(file, endpoint, reported)
	if err != nil {
		return "", ConfigError{err}
	}
	log.Info("cgroup driver received from the container runtime", "cgroupDriver", driver, "runtime", endpoint)
	return driver, nil
}
