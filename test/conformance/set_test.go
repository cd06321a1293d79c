package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDurationChunk: the chunks of a set hold every unit once, an ordered
// container's specs together, and their expected totals differ by at most
// the longest unit.
func TestDurationChunk(t *testing.T) {
	t.Parallel()
	names := []string{"A evict 1", "A evict 2", "B oom", "C probe", "D ordered first", "D ordered second", "E crit", "F restart"}
	ordered := map[string]string{"D ordered first": "D ordered", "D ordered second": "D ordered"}
	dur := map[byte]time.Duration{'A': 11 * time.Minute, 'B': time.Minute, 'C': 4 * time.Minute, 'D': 3 * time.Minute, 'E': 2 * time.Minute, 'F': 5 * time.Minute}
	expected := func(n string) time.Duration { return dur[n[0]] }
	const n = 3
	var all []string
	var totals []time.Duration
	for k := 1; k <= n; k++ {
		focus, total := durationChunk(names, ordered, expected, k, n)
		again, _ := durationChunk(names, ordered, expected, k, n)
		if !slices.Equal(focus, again) {
			t.Errorf("chunk %d differs between two deals: %q, %q", k, focus, again)
		}
		all = append(all, focus...)
		totals = append(totals, total)
	}
	slices.Sort(all)
	want := []string{"A evict 1", "A evict 2", "B oom", "C probe", "D ordered", "E crit", "F restart"}
	if !slices.Equal(all, want) {
		t.Errorf("the chunks' units: %q, want each of %q once", all, want)
	}
	if spread := slices.Max(totals) - slices.Min(totals); spread > 11*time.Minute {
		t.Errorf("chunk totals %v: spread %v, more than the longest unit", totals, spread)
	}
	var sum time.Duration
	for _, d := range totals {
		sum += d
	}
	if sum != 40*time.Minute {
		t.Errorf("totals %v sum to %v, want 40m", totals, sum)
	}
}

// TestSubsystemSet: the parts and skips name what the issue names: the
// OOMKiller, CriticalPod and DiskPressure specs are in the set and run (the
// DiskPressure ones on filesystems of their own: diskfs_test.go), and so does
// the ip-leak spec, which SIGKILLs only the run's containerd (runtimepid.go).
func TestSubsystemSet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec     string
		in, skip bool
	}{
		{"[sig-node] OOMKiller for pod using more memory than node allocatable [LinuxOnly] [Serial] single process container without resource limits The containers terminated by OOM killer should have the reason set to OOMKilled", true, false},
		{"[sig-node] CriticalPod [Serial] [Disruptive] [Feature:CriticalPod] when we need to admit a critical pod should be able to create and delete a critical pod", true, false},
		{"[sig-node] Restart [Serial] [Slow] [Disruptive] Container Runtime Network should recover from ip leak", true, false},
		{"[sig-node] LocalStorageEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods", true, false},
		{"[sig-node] MemoryAllocatableEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause MemoryPressure  should eventually evict all of the correct pods", true, false},
		{"[sig-node] Pod InPlace Resize Container [Feature:InPlacePodVerticalScaling] something", false, false},
	} {
		_, _, in := subsystemPart(tc.spec)
		_, skip := subsystemSkipped(tc.spec)
		if in != tc.in || skip != tc.skip {
			t.Errorf("%s: in the set %v, skipped %v; want %v, %v", tc.spec, in, skip, tc.in, tc.skip)
		}
	}
	for _, s := range subsystemSkips {
		if _, err := regexp.Compile(s.re); err != nil {
			t.Errorf("skip %q: %v", s.re, err)
		}
	}
	// The ip-leak spec runs: it finds the run's containerd through the
	// driver's pid file (runtimepid.go), no other process.
	ipLeak := "[sig-node] Restart [Serial] [Slow] [Disruptive] Container Runtime Network should recover from ip leak"
	if slices.ContainsFunc(skipRegexps(), func(re string) bool { return regexp.MustCompile(re).MatchString(ipLeak) }) {
		t.Errorf("a -skip of every run matches %q", ipLeak)
	}
}

// TestSetUsage: an unknown -set is a usage error naming it.
func TestSetUsage(t *testing.T) {
	t.Parallel()
	err := runCmd(t.Context(), []string{"-set", "everything"})
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `-set "everything"`) {
		t.Errorf("err %v, want a usage error naming the set", err)
	}
}

// TestMakeConformanceFocus: `make conformance FOCUS=...` hands the driver
// the focus as it was given, a ' (a spec's name: "kubelet's"), a $ and a ,
// included.
func TestMakeConformanceFocus(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed: it runs `make conformance`")
	}
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	fakeGo := filepath.Join(dir, "go")
	if err := writeScript(fakeGo, "for a in \"$@\"; do printf '%s\\n' \"$a\"; done >> "+shellQuote(args)+"\n"); err != nil {
		t.Fatal(err)
	}
	focus := `the kubelet's "config" $HOME, \d+`
	cmd := exec.Command("make", "-s", "-C", "../..", "conformance", "GO="+fakeGo, "FOCUS="+focus, "SET=subsystems", "CHUNK=2/7")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make conformance: %v\n%s", err, out)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	i := slices.Index(got, "-focus")
	if i < 0 || i+1 >= len(got) || got[i+1] != focus {
		t.Fatalf("the driver's arguments %q: want -focus %q", got, focus)
	}
	for _, a := range []string{"-set", "subsystems", "-chunk", "2/7"} {
		if !slices.Contains(got, a) {
			t.Errorf("the driver's arguments %q lack %q", got, a)
		}
	}
}

// TestWriteSetReport: the set's section gives each spec's part and result
// on both agents, the reason of a spec not run here or failing on both, and
// each agent's last host changes.
func TestWriteSetReport(t *testing.T) {
	t.Parallel()
	oom := "[sig-node] OOMKiller for pod using more memory than node allocatable [LinuxOnly] [Serial] single process container without resource limits The containers terminated by OOM killer should have the reason set to OOMKilled"
	split := "[sig-node] KubeletSeparateDiskGC [Feature:KubeletSeparateDiskGC] should display different stats for imageFs and containerFs"
	swap := "[sig-node] Swap [LinuxOnly] [Feature:NodeSwap] [Serial] [NodeConformance] with a critical pod - should avoid swap"
	failed := result{State: "failed", Took: 14 * time.Second, Message: "Told to stop trying after 2.008s."}
	res := map[string]results{
		"kubelet": {Specs: map[string]result{oom: {State: "passed", Took: 36 * time.Second}, swap: failed},
			Host: []string{"sysctl kernel.panic: the run set 10, restored to 0"}, HostRun: "2026-11-28T03:00:00Z"},
		"nodekeeper": {Specs: map[string]result{oom: {State: "failed", Took: 34 * time.Second, Message: "boom"}, swap: failed}, HostRun: "2026-11-28T03:10:00Z"},
	}
	var b strings.Builder
	writeSetReport(&b, []string{split, oom, swap}, res)
	got := b.String()
	for _, want := range []string{
		"| kubelet | 1 | 1 | 0 | 1 | 0 |",
		"| nodekeeper | 0 | 2 | 0 | 1 | 0 |",
		"| " + swap + " |  | failed 14s: Told to stop trying after 2.008s. | failed 14s: Told to stop trying after 2.008s. (both: reads the container's swap limit from the cgroup v2 file memory.swap.max",
		"| " + oom + " | OOM | passed 36s | failed 34s: boom |",
		"| " + split + " | eviction, image GC | not run here | not run here: needs the image filesystem on a disk of its own",
		"- kubelet, run of 2026-11-28T03:00:00Z: sysctl kernel.panic: the run set 10, restored to 0.",
		"- nodekeeper, run of 2026-11-28T03:10:00Z: nothing changed.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
}

// TestSpecFocus: the focus of a name with an empty container text (a double
// space) matches ginkgo's text of that spec, which has one space there; it
// matches the name itself and no other spec.
func TestSpecFocus(t *testing.T) {
	t.Parallel()
	name := "[sig-node] MemoryAllocatableEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause MemoryPressure  should eventually evict all of the correct pods"
	ginkgoText := strings.ReplaceAll(name, "  ", " ")
	re := regexp.MustCompile(specFocus(name))
	for _, s := range []string{name, ginkgoText} {
		if !re.MatchString(s) {
			t.Errorf("focus %q does not match %q", re, s)
		}
	}
	other := "[sig-node] MemoryAllocatableEvictionPodLevelResources [Slow] [Serial] [Disruptive] [Feature:PodLevelResources] when we run containers that should cause MemoryPressure  should eventually evict all of the correct pods"
	if re.MatchString(other) || re.MatchString(strings.ReplaceAll(other, "  ", " ")) {
		t.Errorf("focus %q matches %q", re, other)
	}
}
