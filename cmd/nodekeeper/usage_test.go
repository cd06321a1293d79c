package main

import (
	"bufio"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every command's Use line, the first line of its help, names each of its flags.
func TestUseLinesNameEveryFlag(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || f.Hidden {
				return
			}
			named := useNames(c.Use, "--"+f.Name) || (f.Shorthand != "" && useNames(c.Use, "-"+f.Shorthand))
			if !named {
				t.Errorf("%s: Use %q does not name --%s", path, c.Use, f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(slog.New(slog.DiscardHandler)))
}

// useNames reports whether use has flag as a word of its own.
func useNames(use, flag string) bool {
	return regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(flag) + `($|[^\w-])`).MatchString(use)
}

// The README names the Go version go.mod requires.
func TestReadmeNamesGoVersion(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var goVersion string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	if goVersion == "" {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "Go " + goVersion + " or later"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not say %q (go.mod: go %s)", want, goVersion)
	}
}
