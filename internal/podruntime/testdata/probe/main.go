// Command probe is the integration tests' container program, mounted into
// containers from the host.
//
//	probe report FILE ARGS...   writes its args, working dir and environment to FILE, then waits for SIGTERM
//	probe ignore-term           ignores SIGTERM and waits to be killed
//	probe touch FILE            creates FILE and exits 0 (a pre-stop hook)
package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		os.Exit(2)
	}
	switch os.Args[1] {
	case "report":
		wd, _ := os.Getwd()
		env := os.Environ()
		sort.Strings(env)
		out := fmt.Sprintf("args=%s\ncwd=%s\n%s\n", strings.Join(os.Args[3:], " "), wd, strings.Join(env, "\n"))
		if err := os.WriteFile(os.Args[2], []byte(out), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		for {
			time.Sleep(time.Hour)
		}
	case "touch":
		if err := os.WriteFile(os.Args[2], nil, 0o644); err != nil {
			os.Exit(1)
		}
	default:
		os.Exit(2)
	}
}
