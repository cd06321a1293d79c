package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var rewriteExamples = flag.Bool("rewrite-examples", false, "rewrite the output blocks of examples/*/README.md with what the commands print")

// exampleRun is one command of an example README and the output block after it.
type exampleRun struct {
	line       int      // line of the command block's first line
	args       []string // without the leading "nodekeeper"
	start, end int      // the output block's content: lines[start:end]
}

// parseExampleREADME reads the fenced blocks of an example README. A block whose
// first line starts with "nodekeeper " is a command (lines ending in a backslash
// continue it); the next block is what it prints. Any other block is an error,
// so no output block goes unchecked.
func parseExampleREADME(lines []string) ([]exampleRun, error) {
	var runs []exampleRun
	var cmd *exampleRun
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: unterminated block", i+1)
		}
		i = end
		switch {
		case cmd != nil:
			cmd.start, cmd.end = start, end
			runs = append(runs, *cmd)
			cmd = nil
		case start < end && strings.HasPrefix(lines[start], "nodekeeper "):
			text := strings.Join(lines[start:end], "\n")
			text = strings.ReplaceAll(text, "\\\n", " ")
			if strings.ContainsAny(text, "'\"$\n") {
				return nil, fmt.Errorf("line %d: a command is one line of plain words (no quotes, variables or second command)", start+1)
			}
			cmd = &exampleRun{line: start + 1, args: strings.Fields(text)[1:]}
		default:
			return nil, fmt.Errorf("line %d: block is neither a nodekeeper command nor the output of one", start)
		}
	}
	if cmd != nil {
		return nil, fmt.Errorf("line %d: command without an output block", cmd.line)
	}
	return runs, nil
}

// trimLines drops the trailing blanks of every line (Markdown does not show them
// and editors strip them) and the final newline.
func trimLines(s string) []string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return lines
}

// Every example README shows exactly what its commands print, as a terminal shows
// it: stdout and stderr (warnings) in the order they are written. Run with
// -rewrite-examples to update the output blocks after a deliberate change.
func TestExampleREADMEs(t *testing.T) {
	t.Parallel()
	readmes, err := filepath.Glob("../../examples/*/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"eviction", "imagegc", "oom", "preemption"} {
		if !slices.Contains(readmes, "../../examples/"+want+"/README.md") {
			t.Errorf("examples/%s/README.md missing (found %v)", want, readmes)
		}
	}
	for _, path := range readmes {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(b), "\n")
			runs, err := parseExampleREADME(lines)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(runs) == 0 {
				t.Fatalf("%s: no nodekeeper command", path)
			}
			// Rewrite from the last block so that earlier line numbers stay valid.
			for i := len(runs) - 1; i >= 0; i-- {
				r := runs[i]
				args := make([]string, len(r.args))
				for j, a := range r.args {
					if strings.HasPrefix(a, "examples/") {
						a = "../../" + a // commands run from the repository root
					}
					args[j] = a
				}
				var out bytes.Buffer
				code := run(t.Context(), args, &out, &out)
				if code != 0 {
					t.Errorf("%s:%d: exit %d:\n%s", path, r.line, code, out.String())
					continue
				}
				got := trimLines(out.String())
				if *rewriteExamples {
					lines = append(lines[:r.start], append(got, lines[r.end:]...)...)
					continue
				}
				if diff := cmp.Diff(trimLines(strings.Join(lines[r.start:r.end], "\n")), got); diff != "" {
					t.Errorf("%s:%d: nodekeeper %s: output differs from the README (-README +printed):\n%s",
						path, r.line, strings.Join(r.args, " "), diff)
				}
			}
			if *rewriteExamples {
				if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestParseExampleREADME(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		text    string
		want    []exampleRun
		wantErr string
	}{
		{"command and output", "intro\n```\nnodekeeper explain oom \\\n  --pods p.json\n```\nOutput:\n```\na\nb\n```\n",
			[]exampleRun{{line: 3, args: []string{"explain", "oom", "--pods", "p.json"}, start: 7, end: 9}}, ""},
		{"output without command", "```\n{}\n```\n", nil, "neither"},
		{"command without output", "```\nnodekeeper version\n```\n", nil, "without an output"},
		{"quoted argument", "```\nnodekeeper explain oom --pods 'a b'\n```\n```\n```\n", nil, "plain words"},
		{"unterminated", "```\nnodekeeper version\n", nil, "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseExampleREADME(strings.Split(tc.text, "\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(exampleRun{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
