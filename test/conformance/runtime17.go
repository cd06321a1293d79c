package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// Some specs need a containerd newer than the machine's (Debian's 1.6.20):
// CDI came in containerd 1.7. Each such spec runs, per agent, as a unit of
// its own on a containerd 1.7 that containerdtest.Containerd17 builds from
// hack/containerd, configured with what the spec needs, after the run of the
// other specs (which skips it) and before the disk units. The unit's
// containerd is started and stopped like a disk unit's, its pods removed at
// its end. Both agents run it alike.
//
// No spec of the suite (v1.36.3) needs netns_mounts_under_state_dir: it is
// named nowhere in test/e2e_node, and containerd 1.6.20 has the key too.

// runtimeSpec is a spec that runs on containerd 1.7.
type runtimeSpec struct {
	re  string // matched against the spec's full text
	why string // why containerd 1.7, and why this config, for the log
	// cdiSpecDirs turn on CDI with these spec directories
	// (containerd.Config.CDISpecDirs).
	cdiSpecDirs []string
}

// runtimeSpecs: "can make a CDI device accessible in a container". The
// suite's sample device plugin pod (getSampleDevicePluginPod: CDI_ENABLED=1)
// writes the CDI spec /var/run/cdi/example.com.json (a hostPath volume) and
// answers Allocate with the CDI names example.com/resource=CDI-Dev-N; the
// spec's container checks the env var CDI_DEVICE and the block device
// /tmp/CDI-Dev-N that spec injects. containerd 1.6 has no CDI and ignores
// the names (the container exits 1 on both agents); 1.7 applies them with
// enable_cdi and /var/run/cdi among cdi_spec_dirs (what the plugin leaves
// on the host: suiteHostFiles).
var runtimeSpecs = []runtimeSpec{
	{re: `DevicePlugin \[Serial\] \[Disruptive\] can make a CDI device accessible in a container`,
		why:         "CDI: the sample device plugin answers with CDI device names and writes their spec to /var/run/cdi; containerd applies CDI devices from 1.7 on, with enable_cdi and that spec directory",
		cdiSpecDirs: []string{"/var/run/cdi"}},
}

// runtimeUnit is a unit of a run (a ginkgo focus) on containerd 1.7.
type runtimeUnit struct {
	focus string
	spec  runtimeSpec
}

// runtimeSkip is a -skip matching every spec of runtimeSpecs, for the
// other runs (on containerd 1.6).
func runtimeSkip() string {
	var res []string
	for _, s := range runtimeSpecs {
		res = append(res, "(?:"+s.re+")")
	}
	return strings.Join(res, "|")
}

// splitRuntimeUnits splits focus, a run's units, into those that run on the
// run's containerd and the units that run on containerd 1.7: a unit is one
// when a spec of names it focuses on is in runtimeSpecs (the first such
// spec gives its config).
func splitRuntimeUnits(focus, names []string) (rest []string, units []runtimeUnit, err error) {
	for _, f := range focus {
		re, err := regexp.Compile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("focus %q: %w", f, err)
		}
		var unit *runtimeUnit
		for _, n := range names {
			if unit != nil || !re.MatchString(n) {
				continue
			}
			for _, s := range runtimeSpecs {
				if unit == nil && regexp.MustCompile(s.re).MatchString(n) {
					unit = &runtimeUnit{focus: f, spec: s}
				}
			}
		}
		if unit != nil {
			units = append(units, *unit)
		} else {
			rest = append(rest, f)
		}
	}
	return rest, units, nil
}

// runtimeConfig is the containerd config of spec's unit, on stateDir with
// the containerd binaries in binDir (the driver's run-wide settings are
// startContainerd's).
func runtimeConfig(spec runtimeSpec, stateDir, binDir string) containerd.Config {
	return containerd.Config{StateDir: stateDir, Binary: filepath.Join(binDir, "containerd"), CDISpecDirs: spec.cdiSpecDirs}
}

// buildContainerd17 builds containerd 1.7 from hack/containerd (cached after
// the first time, shared with the tests' BuildContainerd) and returns the
// directory holding containerd, containerd-shim-runc-v2 and ctr.
func buildContainerd17(log *slog.Logger) (string, error) {
	log.Info("building containerd 1.7 from hack/containerd (cached after the first time; about 2 min cold)")
	dir, err := toolbuild.Build(containerdtest.Containerd17())
	if err != nil {
		return "", fmt.Errorf("build containerd 1.7 (hack/containerd): %w", err)
	}
	return dir, nil
}

// runRuntimeUnit runs u with agent on a containerd 1.7 of the unit's (the
// binaries in binDir, state in the work directory's containerd17) with the
// spec's config and the stand-in images imported. Afterwards, interrupted
// or not, it stops and removes the unit's pods, stops its containerd, kills
// what is left in the run's cgroups (cg, as runDiskUnit: the shared
// containerd's pods were stopped before).
func runRuntimeUnit(ctx context.Context, log *slog.Logger, o runOptions, bins binaries, agent string, u runtimeUnit, cg runEnd, guard cgroupGuard, host hostAccess) (err error) {
	if err := cleanKubeletRoot(kubeletRoot); err != nil {
		return fmt.Errorf("before the %s containerd 1.7 unit: %w", agent, err)
	}
	// A killed run's containerd on stateDir is found and replaced, its
	// leftover shims cleaned, as the shared containerd's (Managed.Run).
	stateDir := filepath.Join(o.work, "containerd17")
	cfg := runtimeConfig(u.spec, stateDir, bins.containerd17)
	cfg.RegistryMirrors = o.mirrors
	m, stop, err := startContainerd(ctx, log, cfg, bins.images)
	if err != nil {
		return err
	}
	defer func() {
		done, eerr := runEnd{endpoint: m.Endpoint(), stopRuntime: stop, cgroupFS: cg.cgroupFS, cgroup: cg.cgroup}.end(context.WithoutCancel(ctx))
		done.log(log, "the containerd 1.7 unit's containerd")
		err = errors.Join(err, eerr)
	}()
	log.Info("a spec on containerd 1.7", "agent", agent, "focus", u.focus, "why", u.spec.why,
		"binary", m.Config().Binary, "stateDir", stateDir, "cdiSpecDirs", strings.Join(u.spec.cdiSpecDirs, ","))
	unit := o
	unit.focus = []string{u.focus}
	return runAgent(ctx, log, unit, bins, agent, m, guard, host)
}
