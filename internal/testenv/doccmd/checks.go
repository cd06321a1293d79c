package doccmd

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// LinkRepo fills dir with a symbolic link to each top-level entry of the
// repository at root, so that a command run in dir reads the repository's
// files by their relative paths while what it writes lands in dir.
func LinkRepo(root, dir string) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

var flagName = regexp.MustCompile(`(?:^|[\s\[(|])(--?[a-zA-Z][a-zA-Z0-9-]*)`)

var subcommandWord = regexp.MustCompile(`^[a-z][a-z-]*$`)

// Subcommand returns the words of a nodekeeper command's Norm that name its
// subcommand ("get pods" of "nodekeeper get pods [NAME] -o wide") and the
// flags the whole command names, each once, in order.
func Subcommand(c Command) (path, flags []string) {
	words := strings.Fields(c.Norm)[1:]
	for _, w := range words {
		if !subcommandWord.MatchString(w) {
			break
		}
		path = append(path, w)
	}
	for _, m := range flagName.FindAllStringSubmatch(c.Norm, -1) {
		if !slices.Contains(flags, m[1]) {
			flags = append(flags, m[1])
		}
	}
	return path, flags
}

// HelpLists says whether a cobra help text lists flag ("--name" or "-n").
func HelpLists(help, flag string) bool {
	if strings.HasPrefix(flag, "--") {
		return regexp.MustCompile(`(^|[\s,])` + regexp.QuoteMeta(flag) + `([\s=\[]|$)`).MatchString(help)
	}
	return regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(flag) + `,`).MatchString(help)
}

// CheckMake runs `make -n` with c's arguments in root: the targets and
// variables must expand without running anything.
func CheckMake(root string, c Command) error {
	words, err := Words(c.Norm)
	if err != nil {
		return err
	}
	cmd := exec.Command("make", append([]string{"-n"}, words[1:]...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make -n %s: %v\n%s", strings.Join(words[1:], " "), err, out)
	}
	return nil
}

// goTestValueFlags are the go test flags that take a value.
var goTestValueFlags = []string{"run", "bench", "benchtime", "count", "timeout", "o", "cpu", "skip", "parallel", "list", "tags", "C"}

// CheckGoTest checks a `go test` command of c without running it: each
// package exists and has tests; a -run pattern (other than ^$) matches a
// Test function of one of them, a -bench pattern a Benchmark function (by
// the pattern's first element, as go test matches top-level names); each flag
// after -args is a string in their test files.
func CheckGoTest(root string, c Command) error {
	words := looseWords(c.Norm)
	var pkgs, args []string
	pattern := map[string]string{}
	for i := 2; i < len(words); i++ {
		w := words[i]
		if w == "-args" {
			args = words[i+1:]
			break
		}
		if !strings.HasPrefix(w, "-") {
			pkgs = append(pkgs, w)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if !hasValue && slices.Contains(goTestValueFlags, name) && i+1 < len(words) {
			i++
			value = words[i]
		}
		pattern[name] = value
	}
	if len(pkgs) == 0 {
		pkgs = []string{"."}
	}
	var funcs, literals []string
	for _, p := range pkgs {
		if strings.HasSuffix(p, "...") {
			continue
		}
		fs, ls, err := parsePackage(filepath.Join(root, p), true)
		if err != nil {
			return err
		}
		if len(fs) == 0 {
			return fmt.Errorf("package %s has no test functions", p)
		}
		funcs, literals = append(funcs, fs...), append(literals, ls...)
	}
	all := slices.ContainsFunc(pkgs, func(p string) bool { return strings.HasSuffix(p, "...") })
	for _, k := range []struct{ flag, prefix string }{{"run", "Test"}, {"bench", "Benchmark"}} {
		pat, ok := pattern[k.flag]
		if !ok || pat == "^$" || all {
			continue
		}
		first, _, _ := strings.Cut(pat, "/")
		re, err := regexp.Compile(first)
		if err != nil {
			return fmt.Errorf("-%s %q: %v", k.flag, pat, err)
		}
		if !slices.ContainsFunc(funcs, func(f string) bool { return strings.HasPrefix(f, k.prefix) && re.MatchString(f) }) {
			return fmt.Errorf("-%s %q matches no %s function of %s", k.flag, pat, k.prefix, strings.Join(pkgs, " "))
		}
	}
	return checkFlagsDefined(args, literals, pkgs)
}

// CheckGoRun checks a `go run ./PKG FLAGS...` command of c without running
// it: PKG is a main package and every -flag is a string in its files.
func CheckGoRun(root string, c Command) error {
	words := looseWords(c.Norm)
	if len(words) < 3 {
		return fmt.Errorf("%q: want go run ./PKG", c.Norm)
	}
	pkg := words[2]
	_, literals, err := parsePackage(filepath.Join(root, pkg), false)
	if err != nil {
		return err
	}
	if !slices.Contains(literals, "package main") {
		return fmt.Errorf("%s is not a main package", pkg)
	}
	return checkFlagsDefined(words[3:], literals, []string{pkg})
}

// looseWords splits a command that is checked, not run: as Words, or, for
// one with shell variables (a recipe's `-o /tmp/sim.$v`), at blanks with
// the quotes taken off each word.
func looseWords(cmd string) []string {
	if w, err := Words(cmd); err == nil {
		return w
	}
	words := strings.Fields(cmd)
	for i, w := range words {
		words[i] = strings.NewReplacer(`'`, "", `"`, "").Replace(w)
	}
	return words
}

// checkFlagsDefined says which of the flags in args is no string literal.
func checkFlagsDefined(args, literals, pkgs []string) error {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !slices.Contains(literals, name) {
			return fmt.Errorf("flag %s is defined nowhere in %s", a, strings.Join(pkgs, " "))
		}
	}
	return nil
}

// parsePackage returns the top-level function names and string literals of
// the package in dir: of its test files when tests, else of its other files
// ("package main" is among the literals of a main package).
func parsePackage(dir string, tests bool) (funcs, literals []string, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") != tests {
			continue
		}
		n++
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		if file.Name.Name == "main" {
			literals = append(literals, "package main")
		}
		ast.Inspect(file, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.FuncDecl:
				if x.Recv == nil {
					funcs = append(funcs, x.Name.Name)
				}
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					if s, err := strconv.Unquote(x.Value); err == nil {
						literals = append(literals, s)
					}
				}
			}
			return true
		})
	}
	if n == 0 {
		what := "Go files"
		if tests {
			what = "test files"
		}
		return nil, nil, fmt.Errorf("%s: no %s", dir, what)
	}
	return funcs, literals, nil
}

// CheckRecipe checks that every repository path c names exists: a word
// whose first element is a top-level entry of root other than bin (what
// builds put there), or, after a `cd DIR` into the repository, a path
// relative to DIR that stays inside it.
func CheckRecipe(root string, c Command) error {
	var errs []error
	dir := "" // the recipe's working directory below root, after a cd
	words := strings.Fields(c.Norm)
	for i, w := range words {
		w = strings.Trim(w, `'"();`)
		w, _, _ = strings.Cut(w, ":") // the lane's PKG:REGEXP
		if strings.Contains(w, "$") || !strings.Contains(w, "/") {
			continue
		}
		if i > 0 && strings.Trim(words[i-1], "(") == "cd" {
			if filepath.IsAbs(w) {
				dir = "/"
				continue
			}
			dir = filepath.Join(dir, w)
			if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
				errs = append(errs, fmt.Errorf("cd %s: no such directory in the repository", dir))
			}
			continue
		}
		if dir == "/" || filepath.IsAbs(w) {
			continue
		}
		rel := filepath.Join(dir, w)
		first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if first == "bin" || first == ".." || first == "" || (dir == "" && strings.HasPrefix(w, "..")) {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, first)); err != nil && dir == "" {
			continue // not a path of the repository (s/x/y/, 5m/until:)
		}
		if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(rel, "..."))); err != nil {
			errs = append(errs, fmt.Errorf("%s: no such file or directory in the repository", rel))
		}
	}
	return errors.Join(errs...)
}
