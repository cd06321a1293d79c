package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
)

// Some specs need the agent started with flags of their own, as the
// Kubernetes project's CI job for them does; the suite cannot pass them. Such
// a spec runs, per agent, in a ginkgo run of its own with those flags added to
// --kubelet-flags, after the run of the other specs (which skips it), so that
// the flags touch no other spec. Both agents get the same flags.

// flaggedSpec is a spec that runs with kubelet flags of its own.
type flaggedSpec struct {
	re    string   // matched against the spec's full text
	flags []string // added to the suite's --kubelet-flags
	// files the spec makes on the host; removed after its run when they
	// were not there before it.
	files []string
}

// flaggedSpecs: Lock contention "Requires `--lock-file` & `--exit-on-lock-contention`
// flags to be set on the Kubelet" (its comment): it opens /var/run/kubelet.lock
// and expects the agent to stop.
var flaggedSpecs = []flaggedSpec{
	{`Lock contention .*Kubelet should stop when the test acquires the lock`,
		[]string{"--lock-file=/var/run/kubelet.lock", "--exit-on-lock-contention"}, []string{"/var/run/kubelet.lock"}},
}

// flaggedUnit is a unit of a run (a ginkgo focus) with its flags.
type flaggedUnit struct {
	focus string
	spec  flaggedSpec
}

// flaggedSkip is a -skip matching every flagged spec, for the other runs.
func flaggedSkip() string {
	var res []string
	for _, f := range flaggedSpecs {
		res = append(res, "(?:"+f.re+")")
	}
	return strings.Join(res, "|")
}

// splitFlagged splits focus, a run's units, into those that run together and
// the flagged units: a unit is one when a spec of names it focuses on is a
// flagged spec.
func splitFlagged(focus, names []string) (rest []string, flagged []flaggedUnit, err error) {
	for _, f := range focus {
		re, err := regexp.Compile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("focus %q: %w", f, err)
		}
		var unit *flaggedUnit
		for _, n := range names {
			if !re.MatchString(n) {
				continue
			}
			for _, s := range flaggedSpecs {
				if unit == nil && regexp.MustCompile(s.re).MatchString(n) {
					unit = &flaggedUnit{focus: f, spec: s}
				}
			}
		}
		if unit != nil {
			flagged = append(flagged, *unit)
		} else {
			rest = append(rest, f)
		}
	}
	return rest, flagged, nil
}

// removeMade removes made, files (or empty directories, after their files)
// that were absent before a run made them, logging each; one already gone
// is no error.
func removeMade(log *slog.Logger, made []string) error {
	var errs []error
	for _, f := range made {
		if err := os.Remove(f); err == nil {
			log.Info("removed a file the run made", "file", f)
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// absentFiles returns those of files that do not exist.
func absentFiles(files []string) []string {
	var out []string
	for _, f := range files {
		if _, err := os.Lstat(f); errors.Is(err, os.ErrNotExist) {
			out = append(out, f)
		}
	}
	return out
}
