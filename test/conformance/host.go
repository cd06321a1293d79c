package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The real kubelet, as the harness runs it, changes the host: it sets
// kernel tunables (its protectKernelDefaults=false path) and adds iptables
// chains in both families. Each agent's run is bracketed by a snapshot of
// these and a restore of what changed, reported in the run's summary and its
// results.

// watchedSysctls are the kernel tunables the kubelet sets at start.
var watchedSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// watchedChains are the iptables chains the kubelet adds, with the rules
// that jump to them: removed after a run where they were not there before.
var watchedChains = []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"}

// iptablesTables are the tables the watched chains live in.
var iptablesTables = []string{"filter", "nat", "mangle"}

// ipFamilies are the iptables programs, one per IP family.
var ipFamilies = []string{"iptables", "ip6tables"}

// hostSnapshot is the watched host state at one moment.
type hostSnapshot struct {
	sysctls map[string]string // name (kernel/panic) -> value, trimmed
	tables  map[tableKey]table
}

// tableKey names one table of one family.
type tableKey struct{ family, table string }

// table is one iptables table as iptables-save prints it.
type table struct {
	chains []string // in order
	rules  []string // "-A CHAIN ..." lines, in order
}

// hostAccess reads and writes the host's watched state: the real one reads
// /proc/sys and runs iptables-save and iptables; tests give fakes.
type hostAccess struct {
	readSysctl  func(name string) (string, error)
	writeSysctl func(name, value string) error
	// save returns `<family>-save -t <table>`; a family or table the
	// kernel lacks is "" and no error.
	save func(ctx context.Context, family, table string) (string, error)
	// run runs `<family> -t <table> ARGS...`.
	run func(ctx context.Context, family, table string, args []string) error
}

// realHost is the machine's hostAccess, with /proc/sys at procSys.
func realHost(procSys string) hostAccess {
	return hostAccess{
		readSysctl: func(name string) (string, error) {
			b, err := os.ReadFile(filepath.Join(procSys, name))
			return strings.TrimSpace(string(b)), err
		},
		writeSysctl: func(name, value string) error {
			return os.WriteFile(filepath.Join(procSys, name), []byte(value+"\n"), 0o644)
		},
		save: func(ctx context.Context, family, tbl string) (string, error) {
			prog, err := exec.LookPath(family + "-save")
			if err != nil {
				return "", nil // no iptables: nothing to restore
			}
			out, err := exec.CommandContext(ctx, prog, "-t", tbl).Output()
			if err != nil {
				return "", nil // the family or table is not in this kernel
			}
			return string(out), nil
		},
		run: func(ctx context.Context, family, tbl string, args []string) error {
			cmd := exec.CommandContext(ctx, family, append([]string{"-w", "-t", tbl}, args...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s -t %s %s: %w: %s", family, tbl, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
			}
			return nil
		},
	}
}

// snapshot reads the watched state.
func (h hostAccess) snapshot(ctx context.Context) (hostSnapshot, error) {
	s := hostSnapshot{sysctls: map[string]string{}, tables: map[tableKey]table{}}
	for _, n := range watchedSysctls {
		v, err := h.readSysctl(n)
		if err != nil {
			return s, fmt.Errorf("read sysctl %s: %w", n, err)
		}
		s.sysctls[n] = v
	}
	for _, f := range ipFamilies {
		for _, t := range iptablesTables {
			out, err := h.save(ctx, f, t)
			if err != nil {
				return s, err
			}
			s.tables[tableKey{f, t}] = parseSave(out)
		}
	}
	return s, nil
}

// parseSave reads one table of iptables-save's output.
func parseSave(out string) table {
	var t table
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			t.chains = append(t.chains, name)
		case strings.HasPrefix(line, "-A "):
			t.rules = append(t.rules, line)
		}
	}
	return t
}

// hostStep is one restoring action and the line that reports it.
type hostStep struct {
	sysctl, value string   // a sysctl to write back
	family, table string   // an iptables command
	args          []string // its arguments
	report        string
}

// restorePlan is what brings the host from after back to before: each
// watched sysctl that changed is written back; in each table, the rules
// added since before that jump to a watched chain or sit in one are deleted,
// and the watched chains that were not there before are flushed and deleted.
// Chains and rules that were there before are left as they are.
func restorePlan(before, after hostSnapshot) []hostStep {
	var steps []hostStep
	for _, n := range watchedSysctls {
		if b, a := before.sysctls[n], after.sysctls[n]; a != b {
			name := strings.ReplaceAll(n, "/", ".")
			steps = append(steps, hostStep{sysctl: n, value: b,
				report: fmt.Sprintf("sysctl %s: the run set %s, restored to %s", name, a, b)})
		}
	}
	for _, f := range ipFamilies {
		for _, t := range iptablesTables {
			k := tableKey{f, t}
			b, a := before.tables[k], after.tables[k]
			var added []string
			for _, c := range a.chains {
				if slices.Contains(watchedChains, c) && !slices.Contains(b.chains, c) {
					added = append(added, c)
				}
			}
			old := slices.Clone(b.rules)
			for _, r := range a.rules {
				if i := slices.Index(old, r); i >= 0 { // there before (as often)
					old = slices.Delete(old, i, i+1)
					continue
				}
				args := splitRule(r)
				chain, target := args[1], ruleTarget(args)
				if slices.Contains(added, chain) {
					continue // flushed with its chain
				}
				if slices.Contains(watchedChains, chain) || slices.Contains(watchedChains, target) {
					args[0] = "-D"
					steps = append(steps, hostStep{family: f, table: t, args: args,
						report: fmt.Sprintf("%s -t %s: removed the run's rule %s", f, t, r)})
				}
			}
			for _, c := range added {
				steps = append(steps, hostStep{family: f, table: t, args: []string{"-F", c}})
			}
			for _, c := range added {
				steps = append(steps, hostStep{family: f, table: t, args: []string{"-X", c},
					report: fmt.Sprintf("%s -t %s: removed the chain %s the run added", f, t, c)})
			}
		}
	}
	return steps
}

// ruleTarget is the -j (or -g) target of a rule's arguments, "" if none.
func ruleTarget(args []string) string {
	for i, a := range args {
		if (a == "-j" || a == "-g" || a == "--jump" || a == "--goto") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// splitRule splits an iptables-save rule into arguments, as the shell would:
// iptables-save double-quotes arguments with spaces (comments) and escapes
// quotes inside them with a backslash.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			have = true
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}

// restore applies the plan from before to the host's state now and returns
// the report's lines: what the run had changed and was restored, or could
// not be. An empty report means the host was as before.
func (h hostAccess) restore(ctx context.Context, before hostSnapshot) ([]string, error) {
	after, err := h.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var report []string
	var errs []string
	for _, s := range restorePlan(before, after) {
		var err error
		if s.sysctl != "" {
			err = h.writeSysctl(s.sysctl, s.value)
		} else {
			err = h.run(ctx, s.family, s.table, s.args)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if s.report != "" {
			report = append(report, s.report)
		}
	}
	if len(errs) > 0 {
		return report, fmt.Errorf("restore the host: %s", strings.Join(errs, "; "))
	}
	// Check: the host is as before now.
	now, err := h.snapshot(ctx)
	if err != nil {
		return report, err
	}
	if left := restorePlan(before, now); len(left) > 0 {
		var l []string
		for _, s := range left {
			l = append(l, s.report)
		}
		return report, fmt.Errorf("the host differs from before the run after restoring it: %s", strings.Join(l, "; "))
	}
	return report, nil
}
