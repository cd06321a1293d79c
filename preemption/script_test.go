package preemption

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/scripts")

// TestScripts runs the data-driven scenarios in testdata/scripts. A script is a
// list of blocks separated by blank lines:
//
//	COMMAND ARGS...
//	INPUT LINES...
//	----
//	EXPECTED OUTPUT
//
// Commands:
//
//	pods                      input: NAME CLASS [RES=QTY...] [priority=N] [static] [mirror]
//	                          (CLASS besteffort|burstable|guaranteed); sets the running pods
//	select [static|mirror] [priority=N]
//	                          input: RES=QTY... the requirement; prints the victims in
//	                          order or the error
//
// With -rewrite the expected outputs are replaced by the actual ones.
func TestScripts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "scripts", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runScript(t, string(data))
			if *rewrite {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if diff := cmp.Diff(string(data), got); diff != "" {
				t.Errorf("%s (-want +got); rerun with -rewrite after checking:\n%s", file, diff)
			}
		})
	}
}

// runScript executes a script and returns it with the actual outputs.
func runScript(t *testing.T, script string) string {
	var out strings.Builder
	var pods []*v1.Pod
	blocks := strings.Split(strings.TrimSpace(script), "\n\n")
	for i, block := range blocks {
		head, _, _ := strings.Cut(block, "\n----")
		lines := strings.Split(head, "\n")
		var result string
		// Comment lines (#) before the command are kept as they are.
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			out.WriteString(lines[0] + "\n")
			lines = lines[1:]
		}
		if len(lines) == 0 {
			continue
		}
		cmd, input := strings.Fields(lines[0]), lines[1:]
		switch cmd[0] {
		case "pods":
			pods = nil
			for _, l := range input {
				pods = append(pods, scriptPod(t, strings.Fields(l)))
			}
			result = fmt.Sprintf("%d pods", len(pods))
		case "select":
			preemptor := scriptPod(t, append([]string{"preemptor", "besteffort"}, cmd[1:]...))
			var reqs Requirements
			for _, l := range input {
				for _, f := range strings.Fields(l) {
					name, qty, _ := strings.Cut(f, "=")
					reqs = append(reqs, Requirement{Resource: v1.ResourceName(name), Quantity: nodeapi.Amount(v1.ResourceName(name), resource.MustParse(qty))})
				}
			}
			victims, err := SelectVictims(preemptor, pods, reqs)
			if err != nil {
				result = "error: " + err.Error()
				break
			}
			var b strings.Builder
			for _, v := range victims {
				fmt.Fprintf(&b, "%s\n", v.Name)
			}
			result = strings.TrimSuffix(b.String(), "\n")
			if result == "" {
				result = "no victims"
			}
		default:
			t.Fatalf("unknown command %q", cmd[0])
		}
		out.WriteString(strings.Join(lines, "\n") + "\n----\n" + result + "\n")
		if i < len(blocks)-1 {
			out.WriteString("\n")
		}
	}
	return out.String()
}

// scriptPod builds a pod from NAME CLASS [RES=QTY...] [priority=N] [static] [mirror].
func scriptPod(t *testing.T, f []string) *v1.Pod {
	if len(f) < 2 {
		t.Fatalf("pod line %q: want NAME CLASS ...", strings.Join(f, " "))
	}
	var opts []podOpt
	var res []string
	for _, a := range f[2:] {
		switch {
		case a == "static":
			opts = append(opts, static())
		case a == "mirror":
			opts = append(opts, mirror())
		case strings.HasPrefix(a, "priority="):
			n, err := strconv.ParseInt(strings.TrimPrefix(a, "priority="), 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, priority(int32(n)))
		default:
			k, v, _ := strings.Cut(a, "=")
			res = append(res, k, v)
		}
	}
	switch f[1] {
	case "besteffort":
		if len(res) > 0 {
			opts = append(opts, burstable(res...)) // requests other than cpu/memory only
		}
	case "burstable":
		opts = append(opts, burstable(res...))
	case "guaranteed":
		opts = append(opts, guaranteed(res...))
	default:
		t.Fatalf("pod %s: unknown class %q", f[0], f[1])
	}
	return newPod(f[0], opts...)
}
