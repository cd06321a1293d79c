package prober

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// restartGracePeriod is how long before the agent's start a container must
// have started for it to count as pre-existing when the agent (re)starts:
// such a container keeps the ready/started values it showed until its probes
// have results (kubelet ≥ 1.35, KEP-4781) instead of being reset.
const restartGracePeriod = 10 * time.Second

// thresholds are the run lengths after which a result is reported.
type thresholds struct {
	Success int
	Failure int
}

// state is what one probe carries from one run to the next. Only the
// goroutine running the probe touches it.
type state struct {
	// ContainerID is the container the probe is following; "" before the
	// container is first seen.
	ContainerID string
	// LastResult and Run are the current run of identical results.
	LastResult Result
	Run        int
	// OnHold stops probing until a new container ID shows up: set after a
	// liveness failure and after any startup verdict is reported.
	OnHold bool
}

// observe folds the result r of one probe run into st. It returns the next
// state and, when report is true, the result to publish. A result is
// reported when its run reaches its threshold (and at every run after that,
// which the results cache turns into a single update).
func observe(pt ProbeType, th thresholds, st state, r Result) (next state, out Result, report bool) {
	if st.Run > 0 && st.LastResult == r {
		st.Run++
	} else {
		st.LastResult = r
		st.Run = 1
	}
	if (r == Failure && st.Run < th.Failure) || (r == Success && st.Run < th.Success) {
		return st, Unknown, false
	}
	if (pt == Liveness && r == Failure) || pt == Startup {
		// The container will be restarted (liveness/startup failure) or the
		// startup probe has done its job: stop probing this container.
		st.OnHold = true
		st.Run = 0
	}
	return st, r, true
}

// tickInput is what a probe looks at when it comes due.
type tickInput struct {
	Now time.Time
	// AgentStart is when the Manager was created.
	AgentStart time.Time
	// KeepStatusOnRestart seeds readiness/startup of containers that ran
	// before the agent started from their reported status.
	KeepStatusOnRestart bool
	// Deleting: the pod is being deleted gracefully.
	Deleting bool
	// Phase of the pod, from its status.
	Phase v1.PodPhase
	// HaveStatus is false while the pod has no status yet.
	HaveStatus bool
	// Container is the container's status; nil when it has none yet.
	Container *v1.ContainerStatus
	// RestartPolicy is the pod's restartPolicy.
	RestartPolicy v1.RestartPolicy
	// Spec is the container's spec, for its own restartPolicy and
	// restartPolicyRules; nil applies the pod's policy alone.
	Spec *v1.Container
	// Role says whether the container is a regular one or an init one (a
	// sidecar: only those are probed).
	Role nodeapi.ContainerRole
	// StartupSucceeded: the startup results cache holds Success for the
	// container's current ID.
	StartupSucceeded bool
}

// tick is what a due probe must do.
type tick struct {
	// Remove names a container ID whose results must be dropped.
	Remove string
	// Set lists results to publish, in order, for the state's container ID.
	Set []Result
	// Probe: run the probe mechanism now.
	Probe bool
	// Stop: the probe is done for good.
	Stop bool
}

// decideTick returns what a probe of type pt with the given initial delay
// does when it comes due in state st, and its next state.
func decideTick(pt ProbeType, initialDelaySeconds int32, st state, in tickInput) (state, tick) {
	var t tick
	if !in.HaveStatus {
		return st, t // the pod has not been seen by the runtime yet
	}
	if in.Phase == v1.PodFailed || in.Phase == v1.PodSucceeded {
		t.Stop = true
		return st, t
	}
	c := in.Container
	if c == nil || c.ContainerID == "" {
		return st, t // wait for the container to be created
	}
	if c.ContainerID != st.ContainerID {
		t.Remove = st.ContainerID
		st = state{ContainerID: c.ContainerID}
		if r, ok := initialResult(pt, c, in); ok {
			t.Set = append(t.Set, r)
		}
	}
	if st.OnHold {
		return st, t
	}
	if c.State.Running == nil {
		if c.State.Terminated == nil && pt != Readiness {
			// Created but not started yet: it has not failed anything. A
			// Failure here would outlive the start (the container keeps its
			// ID) and get the just-started container killed.
			return st, t
		}
		t.Set = append(t.Set, Failure)
		if term := c.State.Terminated; term != nil && !nodeapi.RestartsAfterExit(in.RestartPolicy, in.Spec, in.Role, term.ExitCode) {
			t.Stop = true
		}
		return st, t
	}
	if in.Deleting && (pt == Liveness || pt == Startup) {
		t.Set = append(t.Set, Success)
		t.Stop = true
		return st, t
	}
	if int64(in.Now.Sub(c.State.Running.StartedAt.Time)/time.Second) < int64(initialDelaySeconds) {
		return st, t
	}
	started := (c.Started != nil && *c.Started) || in.StartupSucceeded
	if started == (pt == Startup) {
		// Before the container has started only the startup probe runs;
		// after, the startup probe idles (it stays to follow a restart).
		return st, t
	}
	t.Probe = true
	return st, t
}

// initialResult is the value a probe publishes when it first sees a
// container: not ready, alive, not yet started. A readiness or startup
// probe of a container that ran from before the agent started publishes
// nothing (ok false) until it has a result of its own, as the kubelet ≥ 1.35
// sets no initial value for it: the container keeps the status it showed
// (Manager.UpdatePodStatus).
func initialResult(pt ProbeType, c *v1.ContainerStatus, in tickInput) (r Result, ok bool) {
	preExisting := in.KeepStatusOnRestart && c.State.Running != nil &&
		c.State.Running.StartedAt.Time.Before(in.AgentStart.Add(-restartGracePeriod))
	switch pt {
	case Liveness:
		return Success, true
	case Readiness:
		return Failure, !preExisting
	default:
		return Unknown, !preExisting
	}
}
