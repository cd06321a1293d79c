package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/doccmd"
)

// docWrapper is the `nodekeeper` the documents' live commands find first in
// PATH: the built binary, pointed at the test's agent. A command that reads
// an agent gets --root-dir ROOT (before a `--`, so that exec's command is
// untouched), --live becomes --live=SOCKET and a --server URL the agent's
// read-only port.
const docWrapper = `#!/bin/sh
bin=%q root=%q url=%q
first=$1 n=$# added=
case $first in get|describe|events|logs|exec|apply|delete|stop-runtime) ;; *) added=1 ;; esac
while [ "$n" -gt 0 ]; do
	a=$1; shift; n=$((n-1))
	case $a in
	--)
		if [ -z "$added" ]; then set -- "$@" --root-dir "$root"; added=1; fi ;;
	--live) a="--live=$root/nodekeeper.sock" added=1 ;;
	--server)
		if [ "$n" -gt 0 ]; then shift; n=$((n-1)); fi
		set -- "$@" --server; a=$url added=1 ;;
	--server=*) a="--server=$url" added=1 ;;
	esac
	set -- "$@" "$a"
done
if [ -z "$added" ]; then set -- "$@" --root-dir "$root"; fi
exec "$bin" "$@"
`

// followFlag marks a command that does not end by itself (logs -f, get -w).
var followFlag = regexp.MustCompile(`(^| )(-f|--follow|-w|--watch)( |$)`)

// TestDocCommandsLive runs the live commands of README.md and docs/*.md
// (doccmd.Rules' class Live: get, describe, events, logs, exec, apply,
// delete, explain eviction --live), in document order, as a reader would
// after the quick start: against a real `nodekeeper run` with the example
// pods (examples/pods, node name "example", so their names are the
// README's), on the test's own root, cgroup root, pod network and port. Each
// runs through bash in a temp dir that links to the repository, with
// `nodekeeper` the built binary pointed at this agent; it must exit 0 and,
// where the document shows its output, print that (masked: doccmd.Mask). A
// command that follows (-f, -w) is stopped once it has printed as many lines
// as the document shows (at least one).
func TestDocCommandsLive(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := doccmd.ReadAll(root)
	if err != nil {
		t.Fatal(err)
	}
	rules := doccmd.Rules()
	var live []doccmd.Command
	for _, c := range cmds {
		if r, ok := doccmd.Classify(rules, c); ok && r.Class == doccmd.Live {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		t.Log("no live command in README.md and docs/*.md")
		return
	}
	a := StartAgent(t, Options{Args: []string{"--hostname-override", "example"}})
	manifests, err := filepath.Glob(filepath.Join(root, "examples", "pods", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		a.WriteManifest(filepath.Base(m), string(b))
	}
	// Three minutes: on this machine the sidecar pod's main container
	// starts about a minute after its sidecar, at the next resync.
	a.Eventually("the example pods running and ready", slow(t, 3*time.Minute), func() (bool, string) {
		pods, err := a.Pods()
		if err != nil {
			return false, err.Error()
		}
		var summary []string
		ready := 0
		for i := range pods {
			summary = append(summary, podSummary(&pods[i]))
			if podReady(&pods[i]) {
				ready++
			}
		}
		return len(pods) == len(manifests) && ready == len(pods), strings.Join(summary, "; ")
	})

	work, bin := t.TempDir(), t.TempDir()
	if err := doccmd.LinkRepo(root, work); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf(docWrapper, a.art.bin, a.Root, a.URL)
	if err := os.WriteFile(filepath.Join(bin, "nodekeeper"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	for _, c := range live {
		t.Run(c.Where(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), slow(t, time.Minute))
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", c.Norm)
			cmd.Dir, cmd.Env = work, append(env, c.Env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			out, err := runDocCommand(cmd, followFlag.MatchString(c.Norm), max(1, len(c.Output)))
			if err != nil {
				t.Fatalf("%s: %s: %v:\n%s", c.Where(), c.Text, err, out)
			}
			t.Logf("%s:\n%s", c.Text, out)
			if c.Output != nil {
				if diff := doccmd.DiffOutput(c.Output, out); diff != "" {
					t.Errorf("%s: %s: output differs from the document's, masked (%s) (-doc +printed):\n%s",
						c.Where(), c.Text, doccmd.Masks(), diff)
				}
			}
		})
	}
}

// podReady says whether p runs with every container ready.
func podReady(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// runDocCommand runs cmd, its stdout and stderr together, and returns what
// it printed. A command that follows is stopped (its process group killed)
// once it has printed lines lines, and its exit is then no error.
func runDocCommand(cmd *exec.Cmd, follow bool, lines int) (string, error) {
	if !follow {
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return "", err
	}
	var out strings.Builder
	sc := bufio.NewScanner(r)
	for n := 0; n < lines && sc.Scan(); n++ {
		out.WriteString(sc.Text() + "\n")
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	werr := cmd.Wait()
	if strings.Count(out.String(), "\n") < lines {
		return out.String(), fmt.Errorf("ended after %d of %d lines: %v", strings.Count(out.String(), "\n"), lines, werr)
	}
	return out.String(), nil
}
