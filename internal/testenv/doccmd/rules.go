package doccmd

import (
	"regexp"
)

// Class is what the tests do with a command.
type Class string

// The classes. Offline and Live commands are run; the others cannot be run
// by make test (they are the agent itself, take minutes to hours, need a VM,
// the internet or another tree), and something else is checked instead.
const (
	// Offline: run by cmd/nodekeeper's TestDocCommands, in process, in a
	// temp dir that links to the repository's files; its output is
	// compared with the document's when the document shows it.
	Offline Class = "offline"
	// Live: run by test/e2e's TestDocCommandsLive, through bash, against a
	// real `nodekeeper run` with the example pods (examples/pods), its
	// socket given to every nodekeeper command; output compared likewise.
	Live Class = "live"
	// Usage: not run (a usage line with placeholders, or the agent
	// itself); every flag it names must be one `nodekeeper CMD -h` lists.
	Usage Class = "usage"
	// Make: not run; `make -n` must expand it (the target and its
	// prerequisites exist).
	Make Class = "make"
	// GoTest: not run; its packages must have tests, and its -run and
	// -bench patterns must match a test or benchmark function of theirs
	// (as `go test -list` would), its -args flags be defined by them.
	GoTest Class = "go test"
	// GoRun: not run; its package must be a main package that defines
	// every flag the command gives.
	GoRun Class = "go run"
	// Recipe: how a recorded measurement was made (loops over old and new
	// trees, benchstat, profiles); not run; every repository path it names
	// must exist.
	Recipe Class = "recipe"
	// QuickStart: run by the quick start's own test.
	QuickStart Class = "quick start"
)

// Rule puts the commands whose Norm matches Match in Class, for the reason Why.
type Rule struct {
	Match *regexp.Regexp
	Class Class
	Why   string
}

// Rules is the one table of the documents' commands: the first rule that
// matches a command's Norm gives its class. A command no rule matches fails
// the tests; add a rule (prefer a narrow one) when a document gains a kind of
// command this table does not know.
func Rules() []Rule {
	r := regexp.MustCompile
	return []Rule{
		{r(`^\./examples/run\.sh( -v)?( --config \S+)?( (run|stop|uninstall))?$`), QuickStart,
			"installs packages and runs the agent on the machine's default root and ports: test/quickstart's TestQuickStart runs run.sh, stop and uninstall on a root, cgroup root, pod network and ports of its own, TestQuickStartPortTaken its --config and busy-port check"},
		{r(`^\./examples/run\.sh \[-v\] \[--config FILE\] \[run\|stop\|uninstall\]$`), QuickStart,
			"run.sh's usage line; test/quickstart's TestRunShUsage runs its bad-usage cases"},
		{r(`^(cp examples/nodekeeper\.yaml /tmp/nodekeeper\.yaml|echo 'healthzPort: [0-9]+' >> /tmp/nodekeeper\.yaml)$`), QuickStart,
			"writes the copy of the example config that the busy-port example passes to run.sh --config; test/quickstart passes a config of its own"},
		{r(`^curl "http://\$\(nodekeeper get pod web-example -o jsonpath='\{\.status\.podIP\}'\):8080/healthz"$`), Live,
			"needs a running agent and its web pod"},
		{r(`^kubectl --kubeconfig nodekeeper\.kubeconfig get --raw /(pods|stats/summary)$`), Recipe,
			"no kubectl binary is built here (docs/commands.md, nodekeeper kubeconfig): TestKubeconfig and test/e2e's TestNetworkStatsThroughKubeconfig make the same reads through the printed kubeconfig with client-go's loader and REST client, what kubectl get --raw runs"},
		{r(`^bash \.ci/run$`), Recipe,
			"CI itself: installs packages, then make test and the cgroup v2 lane, 20-60 min"},
		{r(`^nodekeeper .*(\[-|\(--|\b[A-Z][A-Z_]{2,}\b)`), Usage,
			"a usage line with placeholders, not a command"},
		{r(`^nodekeeper run( |$)`), Usage,
			"the agent itself on the machine's default root and ports; test/e2e's StartAgent runs it on its own"},
		{r(`^nodekeeper stop-runtime( |$)`), Usage,
			"stops the agent's containerd, which the live test's later commands need; TestStopRuntime runs it"},
		{r(`^nodekeeper (get|describe|events|logs|exec|apply|delete)( |$)`), Live,
			"needs a running agent"},
		{r(`^nodekeeper explain eviction .*--live`), Live,
			"needs a running agent"},
		{r(`^nodekeeper (explain|simulate|version|help)( |$)|^nodekeeper (--version|--help|-h)$`), Offline,
			"runs on files alone"},
		{r(`^make( |$)`), Make,
			"the long suites (make test, conformance, killtest, bench) and the cgroup v2 VM lane take minutes to hours, need root, the internet (first builds) or a VM"},
		{r(`^go test `), GoTest,
			"benchmarks and suites take minutes and need an idle machine for their numbers"},
		{r(`^go run \./(test|bench)/`), GoRun,
			"a conformance or benchmark run: minutes to hours, the internet for its first build"},
		{r(`^hack/cgroup2vm/lane\.sh `), Recipe,
			"the cgroup v2 VM lane (make test-cgroup2): a qemu VM, 10-35 min"},
		{r(`^(for |done|git worktree |go run golang\.org/x/perf/|go tool pprof |go build |sed |cd |/usr/bin/time |/tmp/|\./[a-z$]+\.test )`), Recipe,
			"a recorded measurement's recipe (old and new trees, loops, benchstat, profiles)"},
	}
}

// Classify returns the rule that gives c's class, and false when none does.
func Classify(rules []Rule, c Command) (Rule, bool) {
	for _, r := range rules {
		if r.Match.MatchString(c.Norm) {
			return r, true
		}
	}
	return Rule{}, false
}
