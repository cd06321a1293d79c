package nodeapi

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// IsSidecar reports whether c, an init container of a pod, is a sidecar: its
// own restartPolicy is Always (the API's "restartable init container",
// SidecarContainers, GA in 1.33). A sidecar starts in the init sequence but does
// not hold it up past its start (or its startup probe), restarts whenever it
// exits while the pod's regular containers run, whatever the pod's
// restartPolicy, is probed like a regular container, and counts towards the
// pod's resources beside the regular containers. Only init containers may be
// sidecars; for another container the result means nothing. c must not be nil.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// ContainerRole says which list of the pod spec a container is in, which
// decides how the pod's restartPolicy applies to it.
type ContainerRole uint8

const (
	// RegularContainer is a container of spec.containers.
	RegularContainer ContainerRole = iota
	// InitContainer is a container of spec.initContainers, a sidecar included.
	InitContainer
)

// RestartsAfterExit reports whether the kubelet starts container c again after
// it exited with exitCode, c being a container of role in a pod whose
// restartPolicy is podPolicy (empty counts as Always, the API default). It
// follows the kubelet as the API documents the fields (Container.restartPolicy
// and restartPolicyRules, the ContainerRestartRules feature):
//
//  1. c's restartPolicyRules, in order: the first rule whose exitCodes match
//     (operator In: exitCode is one of values; NotIn: it is none of them)
//     decides, and its action (Restart, or RestartAllContainers) restarts c
//     (with RestartAllContainers, every container of the pod: see
//     RestartsAllAfterExit); a rule without exitCodes matches nothing;
//  2. else c's own restartPolicy: Always restarts it (a sidecar's), OnFailure
//     when exitCode is not 0, Never never;
//  3. else the pod's restartPolicy: Always and OnFailure restart a container
//     that failed (exitCode not 0), Never none; Always also restarts a regular
//     container that succeeded, never an init container, whose exit 0 means its
//     work is done (so Always acts as OnFailure for init containers).
//
// It says nothing of whether the pod still runs: a sidecar of a pod whose
// regular containers have all ended, or a container of a pod being deleted,
// is not restarted whatever this returns. c may be nil (no container-level
// fields: the pod's rule alone).
func RestartsAfterExit(podPolicy v1.RestartPolicy, c *v1.Container, role ContainerRole, exitCode int32) bool {
	if c != nil {
		for _, r := range c.RestartPolicyRules {
			if ruleMatches(r, exitCode) {
				return r.Action == v1.ContainerRestartRuleActionRestart || r.Action == v1.ContainerRestartRuleActionRestartAllContainers
			}
		}
		if c.RestartPolicy != nil {
			return policyRestarts(v1.RestartPolicy(*c.RestartPolicy), exitCode)
		}
	}
	if role == InitContainer && (podPolicy == v1.RestartPolicyAlways || podPolicy == "") {
		podPolicy = v1.RestartPolicyOnFailure
	}
	return policyRestarts(podPolicy, exitCode)
}

// policyRestarts applies a restart policy to an exit code; an empty or unknown
// policy counts as Always.
func policyRestarts(policy v1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

// RestartsAllAfterExit reports whether c's exit with exitCode asks for all
// the containers of its pod to be restarted: the first of c's
// restartPolicyRules whose exitCodes match has the action RestartAllContainers
// (KEP-5532, RestartAllContainersOnContainerExits, beta in 1.36). The pod then
// restarts in place: every container is stopped, its sandbox and volumes kept,
// and the pod starts again from its first init container. RestartsAfterExit
// is true for such an exit too (the container does run again). c may be nil
// (false).
func RestartsAllAfterExit(c *v1.Container, exitCode int32) bool {
	if c == nil {
		return false
	}
	for _, r := range c.RestartPolicyRules {
		if ruleMatches(r, exitCode) {
			return r.Action == v1.ContainerRestartRuleActionRestartAllContainers
		}
	}
	return false
}

// ruleMatches reports whether r's exit-code requirement holds for exitCode.
func ruleMatches(r v1.ContainerRestartRule, exitCode int32) bool {
	if r.ExitCodes == nil {
		return false
	}
	in := slices.Contains(r.ExitCodes.Values, exitCode)
	switch r.ExitCodes.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}
