// Package doccmd finds the shell commands of nodekeeper's documents (README.md
// and docs/*.md) so that tests run them, or check what can be checked of the
// ones they cannot run, and no command in a document goes stale.
//
// A command comes from a fenced block tagged sh, bash, shell, console or
// shell-session, or from an untagged block whose first line starts with a
// command (see Parse). Classify puts every command in one class of the one
// table, Rules; a command in no class is an error the tests report naming the
// file and line.
package doccmd

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Command is one command of a document.
type Command struct {
	// File is the document's path relative to the repository root, Line
	// the 1-based line of the command's first line.
	File string
	Line int
	// Text is the command as written, its lines joined with one space, a
	// `$ ` prompt and the comments removed.
	Text string
	// Norm is Text as the tests run and classify it: without a leading
	// sudo (the tests run as root, and a root shell may have no sudo) or
	// leading VAR=value assignments, with `go run ./cmd/nodekeeper`,
	// `bin/nodekeeper` and `./bin/nodekeeper` written `nodekeeper`.
	Norm string
	// Env holds the leading VAR=value assignments Norm dropped, their
	// values unquoted.
	Env []string
	// Output is what the document shows the command printing (the lines
	// after a `$ ` command up to the next one), nil when it shows none.
	Output []string
}

// Where is "FILE:LINE", how the tests name a command.
func (c Command) Where() string { return fmt.Sprintf("%s:%d", c.File, c.Line) }

// Documents returns the documents whose commands the tests check, relative to
// root: README.md and docs/*.md. examples/*/README.md are left to
// cmd/nodekeeper's TestExampleREADMEs, which runs each of their commands.
func Documents(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files, nil
}

// ReadAll parses every document of root and returns their commands in
// document order.
func ReadAll(root string) ([]Command, error) {
	files, err := Documents(root)
	if err != nil {
		return nil, err
	}
	var all []Command
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		cmds, err := Parse(f, string(b))
		if err != nil {
			return nil, err
		}
		all = append(all, cmds...)
	}
	return all, nil
}

// shellTags are the fence tags of shell blocks.
var shellTags = []string{"sh", "bash", "shell", "console", "shell-session", "zsh"}

// commandStart matches the first line of an untagged block that holds
// commands rather than output, a diagram or a file.
var commandStart = regexp.MustCompile(`^(\$ )?(sudo )?([A-Z_][A-Z0-9_]*=\S* )*(\\$|nodekeeper|go|make|bin/\S+|\./\S+|curl|kubectl|ctr|crictl|git|sed|for|cd|bash|sh|cat|ls|ip|iptables|systemctl|journalctl|apt-get|rm)( |$)`)

// Parse returns the commands of the document text, named file in errors.
//
// In a block with `$ ` prompts, a line starting with `$ ` is a command and
// the lines after it, up to the next prompt, its output (a line ending in a
// backslash, or a `> ` line, continues the command). In a block without
// prompts every line is a command, except `#` comment lines and blank lines,
// and a line ending in a backslash, an indented line (as usage lines are
// wrapped) or a loop's `done` continues the line before it. A trailing `# comment` is dropped.
func Parse(file, text string) ([]Command, error) {
	lines := strings.Split(text, "\n")
	var cmds []Command
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		tag := strings.TrimSpace(strings.TrimPrefix(fence, "```"))
		start := i + 1
		end := start
		for end < len(lines) && !strings.HasPrefix(strings.TrimLeft(lines[end], " "), "```") {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: unterminated block", file, i+1)
		}
		i = end
		if !isShellBlock(tag, lines[start:end]) {
			continue
		}
		cmds = append(cmds, parseBlock(file, start, lines[start:end])...)
	}
	for i := range cmds {
		cmds[i].Norm, cmds[i].Env = normalize(cmds[i].Text)
	}
	return cmds, nil
}

// isShellBlock says whether a block with the fence tag and lines holds commands.
func isShellBlock(tag string, lines []string) bool {
	if tag != "" {
		return slices.Contains(shellTags, strings.Fields(tag)[0])
	}
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		return commandStart.MatchString(l)
	}
	return false
}

// parseBlock returns the commands of one block whose first line is lines[0],
// line first+1 of file.
func parseBlock(file string, first int, lines []string) []Command {
	prompts := slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "$ ") })
	var cmds []Command
	var cur *Command
	cont := false // the previous command line ended in a backslash
	flush := func() {
		if cur != nil {
			cur.Text = strings.Join(strings.Fields(cur.Text), " ")
			cmds = append(cmds, *cur)
			cur = nil
		}
	}
	for i, raw := range lines {
		line := strings.TrimRight(raw, " \t")
		switch {
		case prompts && strings.HasPrefix(line, "$ "):
			flush()
			cur = &Command{File: file, Line: first + i + 1}
			cont = addLine(cur, strings.TrimPrefix(line, "$ "))
		case prompts && cur != nil && (cont || strings.HasPrefix(line, "> ")) && cur.Output == nil:
			cont = addLine(cur, strings.TrimPrefix(line, "> "))
		case prompts:
			if cur != nil {
				cur.Output = append(cur.Output, line)
			}
		case strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#"):
			// A blank or comment line ends a command unless it continues one
			// (a comment inside a backslash continuation is the shell's
			// error, and the writer's).
			if !cont {
				flush()
			}
		case cur != nil && (cont || line[0] == ' ' || line[0] == '\t' || line == "done" || strings.HasPrefix(line, "done;")):
			cont = addLine(cur, line)
		default:
			flush()
			cur = &Command{File: file, Line: first + i + 1}
			cont = addLine(cur, line)
		}
	}
	flush()
	// An output shown with trailing blank lines ends at its last line.
	for i := range cmds {
		o := cmds[i].Output
		for len(o) > 0 && o[len(o)-1] == "" {
			o = o[:len(o)-1]
		}
		if len(o) == 0 {
			o = nil // a blank line between two prompts shows no output
		}
		cmds[i].Output = o
	}
	return cmds
}

// addLine adds line, without its comment and continuation backslash, to c's
// text and says whether it continues.
func addLine(c *Command, line string) bool {
	line = stripComment(line)
	cont := strings.HasSuffix(line, "\\")
	c.Text += " " + strings.TrimSuffix(line, "\\")
	return cont
}

// stripComment drops a `#` comment that starts a word outside quotes.
func stripComment(line string) string {
	var quote rune
	prev := ' '
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
		prev = r
	}
	return strings.TrimRight(line, " \t")
}

var (
	envAssign = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=(\S*|'[^']*'|"[^"]*")$`)
	// ownBinary is the agent's binary where a command word starts: the
	// line's start or a command substitution's.
	ownBinary = regexp.MustCompile(`(^|\$\()(go run \./cmd/nodekeeper|(\./)?bin/nodekeeper)( |$)`)
)

// normalize returns text as the tests run it (see Command.Norm) and the
// assignments it dropped.
func normalize(text string) (string, []string) {
	text = strings.TrimPrefix(text, "sudo ")
	var env []string
	for {
		word, rest := firstWord(text)
		if !envAssign.MatchString(word) {
			break
		}
		name, value, _ := strings.Cut(word, "=")
		if len(value) >= 2 && (value[0] == '\'' || value[0] == '"') {
			value = value[1 : len(value)-1]
		}
		env = append(env, name+"="+value)
		text = rest
	}
	text = strings.TrimPrefix(text, "sudo ")
	return ownBinary.ReplaceAllString(text, "${1}nodekeeper$4"), env
}

// firstWord returns text's first word, quotes and all (`A='x y'`), and the
// rest after the blank that ends it.
func firstWord(text string) (string, string) {
	var quote rune
	for i, r := range text {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == ' ':
			return text[:i], text[i+1:]
		}
	}
	return text, ""
}

// Words splits a command of plain words as the shell does, with single and
// double quotes and backslash escapes. A command the shell would do more with
// (variables, pipes, redirections, several commands, globs, substitutions)
// is an error: a test runs only plain commands itself.
func Words(cmd string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range cmd {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '$', '`':
				return nil, fmt.Errorf("%q: not a plain command (%c in quotes)", cmd, r)
			default:
				cur.WriteRune(r)
			}
		case r == '\\':
			escaped, inWord = true, true
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("$`|&;<>()*?{}~", r):
			return nil, fmt.Errorf("%q: not a plain command (%c)", cmd, r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("%q: unterminated quote or escape", cmd)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
