package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/testenv/e2eimages"
)

// results are one agent's outcomes, by spec, over every run so far: a run
// replaces the outcomes of the specs it ran and keeps the others.
type results struct {
	Agent string
	// Took is the last run's wall time (not stored per spec).
	Took  time.Duration     `json:"-"`
	Specs map[string]result `json:"specs"`
	// Host is what the agent's last run changed on the host and the driver
	// restored (host.go), HostRun that run's date; empty: nothing changed.
	Host    []string `json:"host,omitempty"`
	HostRun string   `json:"hostRun,omitempty"`
}

// result is one spec's outcome in its latest run.
type result struct {
	State    string        `json:"state"` // passed, failed, skipped, pending, panicked, timedout, interrupted
	Took     time.Duration `json:"took"`
	Message  string        `json:"message,omitempty"` // the failure's first line
	Run      string        `json:"run"`               // date of the run, RFC 3339
	Revision string        `json:"revision,omitempty"`
}

func (r results) count(state string) int {
	n := 0
	for _, s := range r.Specs {
		if s.State == state {
			n++
		}
	}
	return n
}

// ginkgoReport is the part of ginkgo's JSON report read here.
type ginkgoReport []struct {
	SpecReports []struct {
		ContainerHierarchyTexts     []string
		ContainerHierarchyLocations []struct {
			FileName   string
			LineNumber int
		}
		LeafNodeText string
		LeafNodeType string
		State        string
		RunTime      time.Duration
		Failure      *struct{ Message string }
	}
}

// specName is a spec's full text as ginkgo's focus matches it.
func specName(containers []string, leaf string) string {
	return strings.Join(append(slices.Clone(containers), leaf), " ")
}

// readReport reads ginkgo's JSON report: the specs that ran (or were
// skipped by a skip in the suite itself), not the ones the filters left out.
func readReport(path string) (results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return results{}, fmt.Errorf("ginkgo report: %w", err)
	}
	var rep ginkgoReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return results{}, fmt.Errorf("ginkgo report %s: %w", path, err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	rev := revision()
	res := results{Specs: map[string]result{}}
	for _, suite := range rep {
		for _, s := range suite.SpecReports {
			if s.LeafNodeType != "It" || s.State == "skipped" && s.Failure == nil && s.RunTime == 0 {
				continue // filtered out: not run
			}
			r := result{State: s.State, Took: s.RunTime.Round(time.Second), Run: now, Revision: rev}
			if s.Failure != nil {
				r.Message, _, _ = strings.Cut(strings.TrimSpace(s.Failure.Message), "\n")
				if len(r.Message) > 300 {
					r.Message = r.Message[:300] + "..."
				}
			}
			res.Specs[specName(s.ContainerHierarchyTexts, s.LeafNodeText)] = r
		}
	}
	return res, nil
}

// failedFocus is a focus matching the specs of r that did not pass, each as
// its unit (see units).
func failedFocus(r results, ordered map[string]string) []string {
	var names []string
	for name, res := range r.Specs {
		if res.State != "passed" && res.State != "skipped" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return units(names, ordered)
}

// units is the focus of names: each spec's regular expression, except that a
// spec of an ordered container (ordered: name -> the container's text) is
// focused as its whole container, once. The specs of an ordered container
// run in order on one process and the later ones read what the first left
// ("should finish and produce log", then what the log shows): focused alone,
// a later one fails on an empty result.
func units(names []string, ordered map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, name := range names {
		unit := name
		if c, ok := ordered[name]; ok {
			unit = c
		}
		if !seen[unit] {
			seen[unit] = true
			out = append(out, specFocus(unit))
		}
	}
	return out
}

// withoutResult returns the names that have no result in r, leaving out the
// machine's skips (which never get one).
func withoutResult(names []string, r results) []string {
	var out []string
	for _, n := range names {
		if _, ok := r.Specs[n]; !ok && !machineSkipped(n) {
			out = append(out, n)
		}
	}
	return out
}

// parseChunk reads -chunk's K/N: 1 <= K <= N.
func parseChunk(s string) (k, n int, err error) {
	ks, ns, ok := strings.Cut(s, "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil || n < 1 || k < 1 || k > n {
		return 0, 0, fmt.Errorf("-chunk %q: want K/N with 1 <= K <= N, such as 2/5", s)
	}
	return k, n, nil
}

// chunkFocus is the focus of the K-th of N chunks of the sorted spec names,
// by unit (an ordered container's specs are one, see units): every N-th unit
// from the K-th, so that each chunk mixes the suite's parts (their durations)
// alike.
func chunkFocus(names []string, ordered map[string]string, k, n int) []string {
	var out []string
	for i, u := range units(names, ordered) {
		if i%n == k-1 {
			out = append(out, u)
		}
	}
	return out
}

// mergeResults stores res over the results already in path.
func mergeResults(path string, res results) error {
	old, err := loadResults(path)
	if err != nil {
		return err
	}
	if old.Specs == nil {
		old.Specs = map[string]result{}
	}
	old.Agent = res.Agent
	old.Host, old.HostRun = res.Host, res.HostRun
	for k, v := range res.Specs {
		old.Specs[k] = v
	}
	b, err := json.MarshalIndent(old, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// loadResults reads the results in path; a missing file is no results.
func loadResults(path string) (results, error) {
	var r results
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// standIn is one stand-in image as the report lists it.
type standIn struct {
	Ref     string `json:"ref"`
	Differs string `json:"differs"`
}

// writeStandIns records the stand-in images of the run for the report.
func writeStandIns(path string, imgs []e2eimages.Image) error {
	var list []standIn
	for _, im := range imgs {
		list = append(list, standIn{Ref: im.Ref, Differs: im.Differs})
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// readStandIns reads what writeStandIns wrote; a missing file is none.
func readStandIns(path string) ([]standIn, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []standIn
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return list, nil
}

// revision is nodekeeper's git revision, "" outside a work tree.
func revision() string {
	out, err := gitOutput("rev-parse", "--short", "HEAD")
	if err != nil {
		return ""
	}
	if st, err := gitOutput("status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		out += "+changes"
	}
	return out
}

// clearPods stops and removes every pod sandbox of the runtime at endpoint:
// an agent's run starts without the previous agent's pods, and a run ends
// without its own. It returns how many it removed.
func clearPods(ctx context.Context, endpoint string) (int, error) {
	c, err := cri.New(endpoint, cri.Options{Timeout: 2 * time.Minute})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	pods, err := c.ListPodSandbox(ctx, nil)
	if err != nil {
		return 0, err
	}
	for i, p := range pods {
		if err := c.StopPodSandbox(ctx, p.Id); err != nil {
			return i, err
		}
		if err := c.RemovePodSandbox(ctx, p.Id); err != nil {
			return i, err
		}
	}
	return len(pods), nil
}
