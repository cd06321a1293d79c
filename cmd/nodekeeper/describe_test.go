package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

var rewriteDescribe = flag.Bool("rewrite-describe", false, "rewrite testdata/describe/*.golden with what describePod and printEvents print")

// readFixture decodes testdata/describe/name into v.
func readFixture(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "describe", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// golden compares got with testdata/describe/name, rewritten with -rewrite-describe.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "describe", name)
	if *rewriteDescribe {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite-describe to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// describe pod prints kubectl's layout for a running pod with init,
// sidecar, probes, env, mounts and volumes; a pod stuck pulling with its
// counted events; a terminating pod in a crash loop; and, for an agent in a
// cluster, where the events are.
func TestDescribePodGolden(t *testing.T) {
	t.Parallel()
	var events v1.EventList
	readFixture(t, "events.yaml", &events)
	for _, tc := range []struct {
		pod        string
		haveEvents bool
	}{{"web", true}, {"pull", true}, {"crash", true}, {"crash", false}} {
		name := tc.pod
		if !tc.haveEvents {
			name += "-cluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var p v1.Pod
			readFixture(t, tc.pod+".yaml", &p)
			var buf bytes.Buffer
			if err := describePod(&buf, &p, podEvents(events.Items, &p), tc.haveEvents, getNow); err != nil {
				t.Fatal(err)
			}
			golden(t, name+".golden", buf.String())
		})
	}
}

// events prints kubectl events' table, oldest first, a repeat with its count.
func TestPrintEventsGolden(t *testing.T) {
	t.Parallel()
	var events v1.EventList
	readFixture(t, "events.yaml", &events)
	var buf bytes.Buffer
	if err := printEvents(&buf, events.Items, true, getNow); err != nil {
		t.Fatal(err)
	}
	golden(t, "events.golden", buf.String())
}

// serveFixtures serves the fixture pods, and events unless nil, on an
// agent's socket (serveSocket) and returns the socket.
func serveFixtures(t *testing.T, events []v1.Event) string {
	t.Helper()
	pods := fixturePods(t)
	deps := server.Deps{Pods: func() []*v1.Pod {
		out := make([]*v1.Pod, len(pods))
		for i := range pods {
			out[i] = &pods[i]
		}
		return out
	}}
	if events != nil {
		deps.Events = func() []v1.Event { return events }
	}
	_, sock := serveSocket(t, deps)
	return sock
}

func fixturePods(t *testing.T) []v1.Pod {
	var pods []v1.Pod
	for _, n := range []string{"web", "pull", "crash"} {
		var p v1.Pod
		readFixture(t, n+".yaml", &p)
		pods = append(pods, p)
	}
	return pods
}

// describe pod and events read the agent's socket; unknown pods and bad
// flags are one line, exit 1 and 2.
func TestDescribeAndEventsCommands(t *testing.T) {
	t.Parallel()
	var events v1.EventList
	readFixture(t, "events.yaml", &events)
	sock := serveFixtures(t, events.Items)
	cluster := serveFixtures(t, nil)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		out     []string // lines the output holds, fields joined by one space
		notOut  []string
		wantErr string
	}{
		{name: "describe", args: []string{"describe", "pod", "pull", "--socket", sock},
			out: []string{"Name: pull", "State: Waiting", "Reason: ImagePullBackOff", "Events:",
				`Warning Failed ... (x3 over ...) kubelet spec.containers{app}: Failed to pull image "nowhere.invalid/app:1": dial tcp: lookup nowhere.invalid: no such host`}},
		{name: "describe in another namespace", args: []string{"describe", "pod", "crash", "-n", "jobs", "--socket", sock},
			out: []string{"Namespace: jobs", "Events: <none>"}},
		{name: "describe, agent in a cluster", args: []string{"describe", "pod", "pull", "--socket", cluster},
			out: []string{"Events: <in the API server: kubectl events --for pod/pull -n default>"}},
		{name: "describe unknown pod", args: []string{"describe", "pod", "crash", "--socket", sock}, code: 1,
			wantErr: "nodekeeper: pod \"crash\" not found in namespace \"default\" (nodekeeper get pods lists them)\n"},
		{name: "describe without a name", args: []string{"describe", "pod", "--socket", sock}, code: exitUsage,
			wantErr: "nodekeeper: accepts 1 arg(s), received 0\n"},
		{name: "events", args: []string{"events", "--socket", sock},
			out:    []string{"NAMESPACE LAST SEEN TYPE REASON OBJECT MESSAGE", "default ... Normal NodeHasSufficientMemory Node/node-1 Node node-1 status is now: NodeHasSufficientMemory"},
			notOut: nil},
		{name: "events for a pod", args: []string{"events", "--for", "pod/web", "--socket", sock},
			out:    []string{"LAST SEEN TYPE REASON OBJECT MESSAGE", "... Normal Started Pod/web Started container app"},
			notOut: []string{"Pulling"}},
		{name: "events for a pod without any", args: []string{"events", "--for", "pod/crash", "-n", "jobs", "--socket", sock},
			wantErr: "No events found in jobs namespace.\n"},
		{name: "events, bad --for", args: []string{"events", "--for", "deployment/x", "--socket", sock}, code: exitUsage,
			wantErr: "nodekeeper: --for \"deployment/x\": want pod/NAME or node/NAME\n"},
		{name: "events from a read-only port", args: []string{"events", "--server", "http://127.0.0.1:10255"}, code: exitUsage,
			wantErr: "nodekeeper: --server: a read-only port serves no events: use --root-dir or --socket\n"},
		{name: "describe from a read-only port", args: []string{"describe", "pod", "web", "--server", "http://127.0.0.1:10255"}, code: exitUsage,
			wantErr: "nodekeeper: --server: a read-only port serves no events: use --root-dir or --socket\n"},
		{name: "events, agent in a cluster", args: []string{"events", "--socket", cluster}, code: 1,
			wantErr: "nodekeeper: GET " + cluster + " /events: 404 Not Found (the agent keeps no events: in a cluster they are the API server's, see kubectl events)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, tc.args...)
			if code != tc.code || errOut != tc.wantErr {
				t.Fatalf("exit %d, stderr %q; want %d, %q", code, errOut, tc.code, tc.wantErr)
			}
			// Ages depend on the clock: "..." stands for them.
			ages := regexp.MustCompile(`\b[0-9][0-9dhms]*\b`)
			var lines []string
			for _, l := range strings.Split(out, "\n") {
				l = strings.Join(strings.Fields(l), " ")
				lines = append(lines, ages.ReplaceAllStringFunc(l, func(m string) string {
					if strings.ContainsAny(m, "dhms") {
						return "..."
					}
					return m
				}))
			}
			for _, want := range tc.out {
				if !slices.Contains(lines, want) {
					t.Errorf("no line %q in:\n%s", want, strings.Join(lines, "\n"))
				}
			}
			for _, not := range tc.notOut {
				if strings.Contains(out, not) {
					t.Errorf("%q in:\n%s", not, out)
				}
			}
		})
	}
}
