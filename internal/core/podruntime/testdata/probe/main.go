// Command probe is the integration tests' container program, mounted into
// containers from the host.
//
//	probe report FILE ARGS...   writes its args, working dir and environment to FILE, then waits for SIGTERM
//	probe ignore-term           ignores SIGTERM and waits to be killed
//	probe touch FILE            creates FILE and exits 0 (a pre-stop hook), or exits 1
//	probe mount-tmpfs DIR       makes DIR and mounts a tmpfs on it (privileged), then exits
//	probe umount DIR            unmounts DIR (privileged), then exits
//	probe procs                 prints the command line of each process it sees (one a line), then waits for SIGTERM
//	probe files OUT PATH...     writes to OUT its environment, then for each PATH its mode and content
//	                            and whether a file can be made next to it, then waits for SIGTERM
//	probe statfs OUT DIR...     writes to OUT "DIR size=BYTES" for each DIR, the size of its filesystem, then waits for SIGTERM
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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
	case "files":
		env := os.Environ()
		sort.Strings(env)
		var b strings.Builder
		b.WriteString(strings.Join(env, "\n") + "\n")
		for _, p := range os.Args[3:] {
			data, err := os.ReadFile(p)
			st, serr := os.Stat(p)
			if err != nil || serr != nil {
				fmt.Fprintf(&b, "file %s: %v %v\n", p, err, serr)
				continue
			}
			fmt.Fprintf(&b, "file %s %o %q\n", p, st.Mode().Perm(), data)
			werr := os.WriteFile(filepath.Join(filepath.Dir(p), "probe-write"), nil, 0o644)
			fmt.Fprintf(&b, "write %s: %v\n", filepath.Dir(p), werr)
		}
		if err := os.WriteFile(os.Args[2], []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	case "statfs":
		var b strings.Builder
		for _, d := range os.Args[3:] {
			var st syscall.Statfs_t
			if err := syscall.Statfs(d, &st); err != nil {
				fmt.Fprintf(&b, "%s error=%v\n", d, err)
				continue
			}
			fmt.Fprintf(&b, "%s size=%d\n", d, int64(st.Blocks)*st.Bsize)
		}
		if err := os.WriteFile(os.Args[2], []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	case "procs":
		dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, d := range dirs {
			b, err := os.ReadFile(d)
			if err != nil || len(b) == 0 {
				continue
			}
			fmt.Println(strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " "))
		}
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	case "touch":
		if err := os.WriteFile(os.Args[2], nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "mount-tmpfs":
		if err := os.MkdirAll(os.Args[2], 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := syscall.Mount("none", os.Args[2], "tmpfs", 0, ""); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "umount":
		if err := syscall.Unmount(os.Args[2], 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		os.Exit(2)
	}
}
