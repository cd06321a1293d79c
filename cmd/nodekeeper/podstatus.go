package main

import (
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// podSummary is what kubectl's get pods prints of a pod besides its name,
// age and addresses: the READY, STATUS and RESTARTS columns.
type podSummary struct {
	// Ready and Total are READY's ready containers out of the regular and
	// sidecar (restartable init) ones.
	Ready, Total int
	// Status is STATUS: the phase, or the reason that explains it best.
	Status string
	// Restarts counts the restarts STATUS is about: the init containers'
	// while the pod initializes, else the sidecars' and regular containers'.
	Restarts int
	// LastRestart is when the latest of those restarts' previous instance
	// finished; zero if unknown.
	LastRestart time.Time
}

// restartsText is RESTARTS: the count, and how long ago the last one was
// when there was one.
func (s podSummary) restartsText(now time.Time) string {
	t := strconv.Itoa(s.Restarts)
	if s.Restarts != 0 && !s.LastRestart.IsZero() {
		t += " (" + since(s.LastRestart, now) + " ago)"
	}
	return t
}

// restartTally adds up restarts and the latest previous termination.
type restartTally struct {
	n    int
	last time.Time
}

func (r *restartTally) add(st *v1.ContainerStatus) {
	r.n += int(st.RestartCount)
	if t := st.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(r.last) {
		r.last = t.FinishedAt.Time
	}
}

// summarizePod computes READY, STATUS and RESTARTS by kubectl's rules (its
// printPod): the pod's reason overrides its phase; the first init container
// that has not completed (a sidecar that started counts as completed) makes
// STATUS Init:REASON, Init:ExitCode:N, Init:Signal:N or Init:I/N; once the
// pod initialized, the first regular container waiting or terminated with a
// reason gives STATUS (ErrImagePull, CrashLoopBackOff, ContainerCreating,
// OOMKilled, Completed, Error...), with Completed turned back into Running
// (ready pod), NotReady or the failing container's reason while others run;
// a pod being deleted that has not finished is Terminating (Unknown when
// its node is lost). An empty phase is shown as Unknown.
func summarizePod(p *v1.Pod) podSummary {
	s := podSummary{Total: len(p.Spec.Containers), Status: string(p.Status.Phase)}
	if s.Status == "" {
		s.Status = "Unknown"
	}
	if p.Status.Reason != "" {
		s.Status = p.Status.Reason
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Reason == v1.PodReasonSchedulingGated {
			s.Status = c.Reason
		}
	}
	sidecar := map[string]bool{}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; nodeapi.IsSidecar(c) {
			sidecar[c.Name] = true
			s.Total++
		}
	}

	var all, sidecars restartTally
	initializing := false
	for i := range p.Status.InitContainerStatuses {
		st := &p.Status.InitContainerStatuses[i]
		all.add(st)
		if sidecar[st.Name] {
			sidecars.add(st)
		}
		if t := st.State.Terminated; t != nil && t.ExitCode == 0 {
			continue // completed
		}
		if sidecar[st.Name] && st.Started != nil && *st.Started {
			if st.Ready {
				s.Ready++
			}
			continue
		}
		s.Status, initializing = initStatus(st, i, len(p.Spec.InitContainers)), true
		break
	}
	if initializing && !podInitialized(p) {
		s.Restarts, s.LastRestart = all.n, all.last
	} else {
		s.Restarts, s.LastRestart = sidecars.n, sidecars.last
		tally := sidecars
		running, failed := false, ""
		// From the last container to the first: the first one with
		// something to say has the last word.
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			st := &p.Status.ContainerStatuses[i]
			tally.add(st)
			switch w, t := st.State.Waiting, st.State.Terminated; {
			case w != nil && w.Reason != "":
				s.Status = w.Reason
			case t != nil:
				s.Status = terminatedReason(t, "")
				if t.ExitCode != 0 {
					failed = s.Status
				}
			case st.Ready && st.State.Running != nil:
				running = true
				s.Ready++
			}
		}
		s.Restarts, s.LastRestart = tally.n, tally.last
		if s.Status == "Completed" {
			switch {
			case running && podReady(p):
				s.Status = "Running"
			case failed != "":
				s.Status = failed
			case running:
				s.Status = "NotReady"
			}
		}
	}

	if p.DeletionTimestamp != nil {
		switch {
		case p.Status.Reason == "NodeLost":
			s.Status = "Unknown"
		case p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed:
			s.Status = "Terminating"
		}
	}
	return s
}

// initStatus is STATUS while the init container st, the i-th of n, holds
// the pod's initialization up.
func initStatus(st *v1.ContainerStatus, i, n int) string {
	switch w, t := st.State.Waiting, st.State.Terminated; {
	case t != nil:
		return terminatedReason(t, "Init:")
	case w != nil && w.Reason != "" && w.Reason != "PodInitializing":
		return "Init:" + w.Reason
	}
	return fmt.Sprintf("Init:%d/%d", i, n)
}

// terminatedReason names a termination: its reason, else its signal or exit
// code, after prefix.
func terminatedReason(t *v1.ContainerStateTerminated, prefix string) string {
	switch {
	case t.Reason != "":
		return prefix + t.Reason
	case t.Signal != 0:
		return fmt.Sprintf("%sSignal:%d", prefix, t.Signal)
	}
	return fmt.Sprintf("%sExitCode:%d", prefix, t.ExitCode)
}

// podInitialized reports whether the pod's Initialized condition is True.
func podInitialized(p *v1.Pod) bool { return podCondition(p, v1.PodInitialized) }

// podReady reports whether the pod's Ready condition is True.
func podReady(p *v1.Pod) bool { return podCondition(p, v1.PodReady) }

func podCondition(p *v1.Pod, t v1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
