package prober

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// ProbeType is the kind of a container probe.
type ProbeType int

// The probe types, in the order the kubelet creates them.
const (
	Startup ProbeType = iota
	Readiness
	Liveness
)

var probeTypes = [...]ProbeType{Startup, Readiness, Liveness}

// String returns the name used in logs and in the probe_type metric label.
func (t ProbeType) String() string {
	switch t {
	case Startup:
		return "Startup"
	case Readiness:
		return "Readiness"
	case Liveness:
		return "Liveness"
	}
	return fmt.Sprintf("ProbeType(%d)", int(t))
}

// Result is a reported probe result, the value the sync loop acts on.
type Result int

// The reported results.
const (
	// Unknown is the initial value of a startup probe: no verdict yet.
	Unknown Result = iota
	Success
	Failure
)

// String returns the result's name.
func (r Result) String() string {
	switch r {
	case Unknown:
		return "Unknown"
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// Outcome is what one run of a probe mechanism found.
type Outcome int

// The outcomes of one probe run.
const (
	// OutcomeUnknown: the mechanism could not tell (it also returns an error).
	OutcomeUnknown Outcome = iota
	// OutcomeSuccess: the target is healthy.
	OutcomeSuccess
	// OutcomeWarning: healthy, with a remark (an HTTP redirect not followed).
	OutcomeWarning
	// OutcomeFailure: the target is unhealthy, or did not answer in time.
	OutcomeFailure
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeUnknown:
		return "unknown"
	case OutcomeSuccess:
		return "success"
	case OutcomeWarning:
		return "warning"
	case OutcomeFailure:
		return "failure"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// result maps a mechanism's outcome onto a reported result, as the kubelet
// does: a warning counts as success, an unknown outcome as failure.
func (o Outcome) result() Result {
	switch o {
	case OutcomeSuccess, OutcomeWarning:
		return Success
	}
	return Failure
}

// Update is a change of the reported result of one probe of one container.
type Update struct {
	// ContainerID is the CRI container ID ("containerd://..." or bare, as the
	// pod status carries it).
	ContainerID string
	Result      Result
	PodUID      types.UID
	// ContainerName names the container within its pod.
	ContainerName string
	ProbeType     ProbeType
}
