package doccmd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
		want []Command
	}{
		{"sh block, comments, continuation, sudo, own binary",
			"intro\n```sh\n# build first\nsudo bin/nodekeeper get pods \\\n  -o wide   # with IPs\nmake test\n```\n",
			[]Command{
				{Line: 4, Text: "sudo bin/nodekeeper get pods -o wide", Norm: "nodekeeper get pods -o wide"},
				{Line: 6, Text: "make test", Norm: "make test"},
			}},
		{"prompts and output",
			"```console\n$ nodekeeper version\nnodekeeper v1 (revision abc)\n\n$ go run ./cmd/nodekeeper explain oom \\\n    --pods p.json\nNAME  QOS\na     BestEffort\n\n```\n",
			[]Command{
				{Line: 2, Text: "nodekeeper version", Norm: "nodekeeper version", Output: []string{"nodekeeper v1 (revision abc)"}},
				{Line: 5, Text: "go run ./cmd/nodekeeper explain oom --pods p.json", Norm: "nodekeeper explain oom --pods p.json",
					Output: []string{"NAME  QOS", "a     BestEffort"}},
			}},
		{"a prompt with no output shows none",
			"```sh\n$ nodekeeper apply -f x.yaml\n$ nodekeeper get pods\nNAME\n```\n",
			[]Command{
				{Line: 2, Text: "nodekeeper apply -f x.yaml", Norm: "nodekeeper apply -f x.yaml"},
				{Line: 3, Text: "nodekeeper get pods", Norm: "nodekeeper get pods", Output: []string{"NAME"}},
			}},
		{"untagged usage line wrapped by indentation",
			"```\nnodekeeper run [--config FILE]\n               [--v N]\n```\n",
			[]Command{{Line: 2, Text: "nodekeeper run [--config FILE] [--v N]", Norm: "nodekeeper run [--config FILE] [--v N]"}}},
		{"environment, loops and their done",
			"```\nCI=true FOO=/tmp/x \\\n  go test ./x\nRACE=0 T='-a -b' hack/x.sh\nfor i in 1 2; do\n  ./a.test -x 'y # z'\ndone\n```\n",
			[]Command{
				{Line: 2, Text: "CI=true FOO=/tmp/x go test ./x", Norm: "go test ./x", Env: []string{"CI=true", "FOO=/tmp/x"}},
				{Line: 4, Text: "RACE=0 T='-a -b' hack/x.sh", Norm: "hack/x.sh", Env: []string{"RACE=0", "T=-a -b"}},
				{Line: 5, Text: "for i in 1 2; do ./a.test -x 'y # z' done", Norm: "for i in 1 2; do ./a.test -x 'y # z' done"},
			}},
		{"output, diagrams and other languages are no commands",
			"```\nNAMESPACE   NAME\ndefault     web\n```\n```json\n{\"a\": 1}\n```\n```go\nm.Run(ctx)\n```\n```\n  7  cmd/nodekeeper\n```\n",
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse("doc.md", tc.text)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i].File = "doc.md"
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Parse("doc.md", "```sh\nmake test\n"); err == nil || !strings.Contains(err.Error(), "doc.md:1: unterminated") {
		t.Errorf("unterminated block: err = %v", err)
	}
}

func TestWords(t *testing.T) {
	t.Parallel()
	got, err := Words(`make conformance FOCUS='Probing container' X="a b" c\ d -run='^$'`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"make", "conformance", "FOCUS=Probing container", "X=a b", "c d", "-run=^$"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"a | b", "a > f", "echo $HOME", `echo "$HOME"`, "a; b", "a && b", "ls *.go", "echo 'x"} {
		if _, err := Words(bad); err == nil {
			t.Errorf("Words(%q): no error", bad)
		}
	}
}

func TestDiffOutput(t *testing.T) {
	t.Parallel()
	doc := []string{
		"NAMESPACE   NAME          READY   STATUS    RESTARTS   AGE   IP",
		"default     web-example   1/1     Running   0          6s    10.58.0.2",
		"",
	}
	printed := "NAMESPACE   NAME          READY   STATUS    RESTARTS   AGE     IP\n" +
		"default     web-example   1/1     Running   0          2m10s   10.150.3.17\n"
	if diff := DiffOutput(doc, printed); diff != "" {
		t.Errorf("masked outputs differ:\n%s", diff)
	}
	if diff := DiffOutput(doc, strings.Replace(printed, "1/1", "0/1", 1)); diff == "" {
		t.Error("a changed READY column went unnoticed")
	}
	if got := Mask("Started: 2026-11-28T02:49:45.123Z id containerd://0123456789abcdef0123 uid 9f1c2d3e-1111-2222-3333-444455556666"); got != "Started: <TIME> id containerd://<ID> uid <UID>" {
		t.Errorf("Mask = %q", got)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	rules := Rules()
	for _, tc := range []struct {
		norm string
		want Class // "" for none
	}{
		{"./examples/run.sh", QuickStart},
		{"./examples/run.sh stop", QuickStart},
		{"nodekeeper get pods [NAME] [-n NAMESPACE]", Usage},
		{"nodekeeper logs POD -c CONTAINER", Usage},
		{"nodekeeper run --config kubelet.yaml", Usage},
		{"nodekeeper get pods -o wide", Live},
		{"nodekeeper exec web-example -- ls", Live},
		{"nodekeeper explain eviction --live", Live},
		{"nodekeeper explain oom --pods examples/oom/pods.json --memory-capacity 30Gi", Offline},
		{"nodekeeper version", Offline},
		{"make conformance CHUNK=3/8", Make},
		{"go test -run '^$' -bench . ./bench/node", GoTest},
		{"go run ./bench/prober -long", GoRun},
		{"git worktree add /tmp/old a993ea7", Recipe},
		{"curl 10.58.0.2:8080/healthz", ""},
		{"nodekeeper frobnicate", ""},
		{"rm -rf /var/lib/nodekeeper", ""},
	} {
		r, ok := Classify(rules, Command{Norm: tc.norm})
		if got := r.Class; got != tc.want || ok != (tc.want != "") {
			t.Errorf("Classify(%q) = %q, %v; want %q", tc.norm, got, ok, tc.want)
		}
	}
}

// The checks of the commands that are not run fail on what went stale: a
// benchmark or flag renamed, a make target or path gone.
func TestChecksFailOnStale(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	check := func(f func(string, Command) error, norm string, wantErr string) {
		t.Helper()
		err := f(root, Command{Norm: norm})
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", norm, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: err = %v, want %q", norm, err, wantErr)
		}
	}
	check(CheckGoTest, "go test -run='^$' -bench='BenchmarkSelectVictims$' -benchmem ./preemption/", "")
	check(CheckGoTest, "go test -run='^$' -bench='BenchmarkSelectVictimz$' ./preemption/", "matches no Benchmark function")
	check(CheckGoTest, "go test -run TestNoSuchTest ./preemption/", "matches no Test function")
	check(CheckGoTest, "go test ./no/such/pkg", "no test files")
	check(CheckGoTest, "go test -run '^$' -bench . ./bench/node -args -quick", "")
	check(CheckGoTest, "go test -run '^$' -bench . ./bench/node -args -quik", "flag -quik is defined nowhere")
	check(CheckGoRun, "go run ./bench/prober -long -max", "")
	check(CheckGoRun, "go run ./bench/prober -lengthy", "flag -lengthy is defined nowhere")
	check(CheckGoRun, "go run ./preemption", "not a main package")
	check(CheckMake, "make conformance FOCUS='Probing container' AGENTS=nodekeeper", "")
	check(CheckMake, "make no-such-target", "make -n no-such-target")
	check(CheckRecipe, "sed 's/x/y/' examples/scenarios/memory-pressure.yaml > /tmp/mp.yaml", "")
	check(CheckRecipe, "go test -c -o /tmp/x ./internal/offline/simulat", "internal/offline/simulat: no such file")
	check(CheckRecipe, "cd internal/machine/pressure && ../../../hack/cgroup2vm/lane.sh ../../../bin/p.test", "")
	check(CheckRecipe, "cd internal/machine/pressure && ../../../shared/reference/cgroup2-vm/recipe.sh ../../bin/p.test",
		"shared/reference/cgroup2-vm/recipe.sh: no such file")
	check(CheckRecipe, "cd internal/machine/presure && ls", "cd internal/machine/presure: no such directory")
	check(CheckRecipe, "git worktree add /tmp/old a993ea7 && (cd /tmp/old && go test -c ./internal/nope)", "")
}
