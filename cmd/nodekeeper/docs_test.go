package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/testenv/doccmd"
)

// TestDocCommands keeps the commands of README.md and docs/*.md true: each
// is in one class of doccmd.Rules, or the test fails naming its file and
// line. Offline commands (explain, simulate, version) run here, in process,
// in a temp dir that links to the repository (so their relative paths read
// its files and what they write stays in the temp dir), and must exit 0 and
// print what the document shows, masked (doccmd.Mask). Live commands run in
// test/e2e's TestDocCommandsLive. For the others, what can be checked
// without running them is: usage lines name only flags their command's -h
// lists; make targets expand with make -n; go test packages, -run and -bench
// names and -args flags exist; go run packages define the flags given;
// recipes name only repository paths that exist.
//
// It changes the working directory, so it does not run in parallel (the
// package's parallel tests run after it).
func TestDocCommands(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := doccmd.ReadAll(root)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := doccmd.LinkRepo(root, work); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	rules := doccmd.Rules()
	count := map[doccmd.Class]int{}
	help := map[string]string{} // `nodekeeper PATH -h` by PATH
	for _, c := range cmds {
		rule, ok := doccmd.Classify(rules, c)
		if !ok {
			t.Errorf("%s: %q is in no class of doccmd.Rules (internal/testenv/doccmd/rules.go): run it in a test, or add a rule with the reason it is not run and what is checked instead",
				c.Where(), c.Text)
			continue
		}
		count[rule.Class]++
		t.Run(c.Where(), func(t *testing.T) {
			t.Logf("%s: %s", rule.Class, c.Text)
			switch rule.Class {
			case doccmd.Offline:
				words, err := doccmd.Words(c.Norm)
				if err != nil {
					t.Fatalf("%s: an offline command is plain words: %v", c.Where(), err)
				}
				var out bytes.Buffer
				if code := run(t.Context(), words[1:], &out, &out); code != 0 {
					t.Fatalf("%s: %s: exit %d:\n%s", c.Where(), c.Text, code, out.String())
				}
				if c.Output != nil {
					if diff := doccmd.DiffOutput(c.Output, out.String()); diff != "" {
						t.Errorf("%s: %s: output differs from the document's, masked (%s) (-doc +printed):\n%s",
							c.Where(), c.Text, doccmd.Masks(), diff)
					}
				}
			case doccmd.Usage:
				path, flags := doccmd.Subcommand(c)
				key := strings.Join(path, " ")
				h, ok := help[key]
				if !ok {
					var out bytes.Buffer
					if code := run(t.Context(), append(path, "-h"), &out, &out); code != 0 {
						t.Fatalf("%s: nodekeeper %s -h: exit %d:\n%s", c.Where(), key, code, out.String())
					}
					h = out.String()
					help[key] = h
				}
				for _, f := range flags {
					if !doccmd.HelpLists(h, f) {
						t.Errorf("%s: %s: nodekeeper %s -h lists no flag %s", c.Where(), c.Text, key, f)
					}
				}
			case doccmd.Make:
				if err := doccmd.CheckMake(root, c); err != nil {
					t.Errorf("%s: %s: %v", c.Where(), c.Text, err)
				}
			case doccmd.GoTest:
				if err := doccmd.CheckGoTest(root, c); err != nil {
					t.Errorf("%s: %s: %v", c.Where(), c.Text, err)
				}
			case doccmd.GoRun:
				if err := doccmd.CheckGoRun(root, c); err != nil {
					t.Errorf("%s: %s: %v", c.Where(), c.Text, err)
				}
			case doccmd.Recipe:
				if err := doccmd.CheckRecipe(root, c); err != nil {
					t.Errorf("%s: %s: %v", c.Where(), c.Text, err)
				}
			case doccmd.QuickStart:
				if _, err := os.Stat(filepath.Join(root, "examples", "run.sh")); err != nil {
					t.Errorf("%s: %s: %v", c.Where(), c.Text, err)
				}
			case doccmd.Live:
				// test/e2e's TestDocCommandsLive runs it.
			default:
				t.Fatalf("%s: class %q has no check here", c.Where(), rule.Class)
			}
		})
	}
	t.Logf("%d commands in README.md and docs/*.md by class: %v", len(cmds), count)
}
