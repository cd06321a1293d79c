package main

import (
	"os/exec"
	"regexp"
	"strings"
)

// coreFocus is the subset `make conformance` runs when no focus is given:
// the [NodeConformance] specs of probes, the container runtime, lifecycle
// hooks, init and sidecar containers, pods, mirror pods and device plugins.
var coreFocus = []string{
	`Probing container`,
	`Container Runtime`,
	`Container Lifecycle Hook`,
	`InitContainer`,
	`SidecarContainers`,
	`\[sig-node\] Pods should`,
	`MirrorPod`,
	`Device Plugin`,
}

// coreSkip leaves the [Slow] specs out of the core subset: "Pods should cap
// back-off at MaxContainerBackOff" alone takes 27 min. FOCUS or -chunk runs
// them.
var coreSkip = []string{`\[Slow\]`}

// machineSkip is a spec this machine cannot run, whichever agent runs it.
type machineSkip struct {
	re     string // matched against the spec's full text
	reason string
}

// machineSkips are the specs that need hardware or kernel features this
// machine kind lacks.
var machineSkips = []machineSkip{
	{`Container Runtime blackbox test when running a container with a new image \[Serial\] should be able to pull image \[NodeConformance\]`,
		"pulls agnhost from registry.k8s.io with imagePullPolicy Always; no registry on the internet is reachable from this machine kind (it stalled the kubelet's run for minutes)"},
	{`Container Runtime blackbox test when running a container with a new image \[Serial\] should be able to pull from private registry with secret \[NodeConformance\]`,
		"pulls an image from a private registry on the internet (gcr.io) with a pull secret; no registry is reachable from this machine kind (it failed on the kubelet after 5 min)"},
}

func skipRegexps() []string {
	var out []string
	for _, s := range machineSkips {
		out = append(out, s.re)
	}
	return out
}

// bothFail explains specs that fail on the real kubelet here too.
type bothFail struct {
	re     *regexp.Regexp
	reason string
}

var bothFails = []bothFail{}

// bothFailReason returns why spec fails on both agents here, "" if unknown.
func bothFailReason(spec string) string {
	for _, b := range bothFails {
		if b.re.MatchString(spec) {
			return b.reason
		}
	}
	return ""
}

func gitOutput(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	return strings.TrimSpace(string(out)), err
}
