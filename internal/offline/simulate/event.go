package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Event kinds: the "event" field of every record. A stable interface.
const (
	EventThresholdMet        = "ThresholdMet"
	EventConditionChanged    = "ConditionChanged"
	EventReclaimed           = "Reclaimed"
	EventEvicted             = "Evicted"
	EventAdmitted            = "Admitted"
	EventRejected            = "Rejected"
	EventPreempted           = "Preempted"
	EventImageRemoved        = "ImageRemoved"
	EventImageGCFailed       = "ImageGCFailed"
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
	EventContainerRemoved    = "ContainerRemoved"
	EventActionResult        = "ActionResult"
	EventExceededGracePeriod = "ExceededGracePeriod"
	EventTerminated          = "Terminated"
)

// Event is one decision, at an offset from the scenario's start. Fields that do not
// apply to an event kind are empty and left out of JSON.
type Event struct {
	At        time.Duration `json:"-"`
	Event     string        `json:"event"`
	Signal    string        `json:"signal,omitempty"`
	Operator  string        `json:"operator,omitempty"`
	Value     string        `json:"value,omitempty"`
	Available string        `json:"available,omitempty"`
	Condition string        `json:"condition,omitempty"`
	Status    string        `json:"status,omitempty"`
	Namespace string        `json:"namespace,omitempty"`
	Name      string        `json:"name,omitempty"`
	UID       string        `json:"uid,omitempty"`
	Reason    string        `json:"reason,omitempty"`
	Message   string        `json:"message,omitempty"`
	// Phase, GracePeriodSeconds and Conditions are an evicted or preempted
	// pod's final phase, the grace period its containers were given, and the
	// pod conditions recorded with it (a true DisruptionTarget).
	Phase              string         `json:"phase,omitempty"`
	GracePeriodSeconds *int64         `json:"gracePeriodSeconds,omitempty"`
	Conditions         []PodCondition `json:"conditions,omitempty"`
	ID                 string         `json:"id,omitempty"`
	Size               *int64         `json:"size,omitempty"`
	Action             string         `json:"action,omitempty"`
	Freed              *int64         `json:"freed,omitempty"`
	Error              *string        `json:"error,omitempty"`
}

// PodCondition is a pod condition recorded with a pod's final status.
type PodCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// MarshalJSON puts "at" first, as the offset in Go duration syntax.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	body, err := json.Marshal(plain(e))
	if err != nil {
		return nil, err
	}
	at, _ := json.Marshal(e.At.String())
	return append(append([]byte(`{"at":`), at...), append([]byte{','}, body[1:]...)...), nil
}

// WriteJSON writes one JSON object per line.
func WriteJSON(w io.Writer, events []Event) error {
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// WriteText writes a readable timeline, one line per event.
func WriteText(w io.Writer, events []Event) error {
	for _, e := range events {
		if _, err := fmt.Fprintf(w, "%8s  %-19s %s\n", e.At, e.Event, e.describe()); err != nil {
			return err
		}
	}
	return nil
}

func (e Event) describe() string {
	pod := e.Namespace + "/" + e.Name
	switch e.Event {
	case EventThresholdMet:
		return fmt.Sprintf("%s < %s (available %s)", e.Signal, e.Value, e.Available)
	case EventConditionChanged:
		return fmt.Sprintf("%s=%s", e.Condition, e.Status)
	case EventReclaimed:
		return fmt.Sprintf("%s: node-level reclaim freed %d bytes", e.Signal, deref(e.Freed))
	case EventEvicted:
		return fmt.Sprintf("%s (%s): %s%s", pod, e.Signal, strings.TrimSpace(e.Message), e.killed())
	case EventAdmitted:
		return pod
	case EventRejected:
		return fmt.Sprintf("%s: %s: %s", pod, e.Reason, strings.TrimSpace(e.Message))
	case EventPreempted:
		return fmt.Sprintf("%s: %s: %s%s", pod, e.Reason, strings.TrimSpace(e.Message), e.killed())
	case EventExceededGracePeriod:
		return fmt.Sprintf("%s: %s", pod, e.Message)
	case EventTerminated:
		return pod + ": shutdown completed"
	case EventImageRemoved:
		return fmt.Sprintf("%s (%d bytes)", e.ID, deref(e.Size))
	case EventContainerRemoved:
		return e.ID
	case EventActionResult:
		s := fmt.Sprintf("%s: freed %d bytes", e.Action, deref(e.Freed))
		if e.Error != nil {
			s += ": error: " + *e.Error
		}
		return s
	}
	return e.Message
}

// killed describes a killed pod's final status: phase, grace period and the
// types of its true conditions.
func (e Event) killed() string {
	s := fmt.Sprintf(" [phase %s, grace period %ds", e.Phase, deref(e.GracePeriodSeconds))
	for _, c := range e.Conditions {
		if c.Status == "True" {
			s += ", " + c.Type
		}
	}
	return s + "]"
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
