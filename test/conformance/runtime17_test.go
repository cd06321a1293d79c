package main

import (
	"regexp"
	"slices"
	"testing"
)

// The device plugin specs of the set (v1.36.3): the CDI spec needs
// containerd 1.7; the others run on the run's containerd 1.6.
const (
	specCDI    = "[sig-node] Device Plugin [Serial] [Feature:DevicePlugin] DevicePlugin [Serial] [Disruptive] can make a CDI device accessible in a container"
	specDevice = "[sig-node] Device Plugin [Serial] [Feature:DevicePlugin] DevicePlugin [Serial] [Disruptive] Can schedule a pod that requires a device"
	specOOM    = "[sig-node] OOMKiller for pod using more memory than node allocatable [LinuxOnly] [Serial] single process container without resource limits The containers terminated by OOM killer should have the reason set to OOMKilled"
)

// TestSplitRuntimeUnits: the CDI spec is a unit of its own on containerd
// 1.7 with CDI on and the sample device plugin's spec directory; the other
// units (another device plugin spec, an OOM spec) stay on the run's
// containerd, whose run skips the CDI spec and only it.
func TestSplitRuntimeUnits(t *testing.T) {
	t.Parallel()
	names := []string{specDevice, specCDI, specOOM}
	rest, units, err := splitRuntimeUnits([]string{specFocus(specDevice), specFocus(specCDI), specFocus(specOOM)}, names)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{specFocus(specDevice), specFocus(specOOM)}; !slices.Equal(rest, want) {
		t.Errorf("rest %q, want %q", rest, want)
	}
	if len(units) != 1 || units[0].focus != specFocus(specCDI) {
		t.Fatalf("units %+v, want the CDI spec's alone", units)
	}
	cfg := runtimeConfig(units[0].spec, "/nowhere/work/containerd17", "/cache/containerd")
	if cfg.Binary != "/cache/containerd/containerd" || cfg.StateDir != "/nowhere/work/containerd17" ||
		!slices.Equal(cfg.CDISpecDirs, []string{"/var/run/cdi"}) {
		t.Errorf("the unit's containerd config %+v: want containerd 1.7's binary, its state dir, CDI with /var/run/cdi (the sample device plugin's)", cfg)
	}
	// What the plugin's pods leave on the host, the file before its
	// directory, is removed after the run.
	if want := []string{"/var/run/cdi/example.com.json", "/var/run/cdi"}; !slices.Equal(suiteHostFiles, want) {
		t.Errorf("suiteHostFiles %q, want %q", suiteHostFiles, want)
	}
	skip := regexp.MustCompile(runtimeSkip())
	for _, n := range names {
		if got, want := skip.MatchString(n), n == specCDI; got != want {
			t.Errorf("the other runs' skip %q matches %q: %v, want %v", skip, n, got, want)
		}
	}
	// A container's focus holding the CDI spec makes the whole unit one.
	container := regexp.QuoteMeta("[sig-node] Device Plugin [Serial] [Feature:DevicePlugin] DevicePlugin [Serial] [Disruptive]")
	if rest, units, _ := splitRuntimeUnits([]string{container}, names); len(rest) != 0 || len(units) != 1 {
		t.Errorf("a container with the CDI spec: rest %q, units %+v; want one unit on containerd 1.7", rest, units)
	}
	if _, _, err := splitRuntimeUnits([]string{"("}, names); err == nil {
		t.Error("a focus that does not compile: no error")
	}
}

// TestRuntimeSpecsInTheSet: every spec run on containerd 1.7 is one of the
// set's, run (not skipped) and not a disk or flagged spec, whose units
// would take it first.
func TestRuntimeSpecsInTheSet(t *testing.T) {
	t.Parallel()
	if _, _, in := subsystemPart(specCDI); !in {
		t.Errorf("%s: not in the set", specCDI)
	}
	if reason, skip := subsystemSkipped(specCDI); skip || machineSkipped(specCDI) {
		t.Errorf("%s: skipped (%s)", specCDI, reason)
	}
	if _, disk := diskPlan(specCDI); disk || regexp.MustCompile(flaggedSkip()).MatchString(specCDI) {
		t.Errorf("%s: a disk or flagged spec", specCDI)
	}
	if reason := bothFailReason(specCDI); reason != "" {
		t.Errorf("%s: still explained as failing on both agents: %s", specCDI, reason)
	}
}
