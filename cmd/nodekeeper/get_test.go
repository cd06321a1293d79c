package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"encoding/json"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

var rewriteGet = flag.Bool("rewrite-get", false, "rewrite testdata/get_pods.golden with what printPodTable prints")

var getNow = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(getNow.Add(-d)) }

// getPods covers the table's cases: sidecars, restarts, no IP, terminating,
// no phase, no timestamps; out of order.
func getPods() []v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	deleted := ago(time.Second)
	return []v1.Pod{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", CreationTimestamp: ago(3*time.Hour + 20*time.Minute)},
			Spec: v1.PodSpec{
				InitContainers: []v1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}},
				Containers:     []v1.Container{{Name: "app"}, {Name: "metrics"}},
			},
			Status: v1.PodStatus{
				Phase: v1.PodRunning, PodIP: "10.88.0.5", Conditions: conds(v1.PodInitialized),
				InitContainerStatuses: []v1.ContainerStatus{{Name: "setup", RestartCount: 4, State: terminated("Completed", 0, 0)},
					{Name: "proxy", Ready: true, RestartCount: 1, State: running, Started: ptrTo(true)}},
				ContainerStatuses: []v1.ContainerStatus{
					{Name: "app", Ready: true, RestartCount: 2, State: running, LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{FinishedAt: ago(95 * time.Second)}}},
					{Name: "metrics", RestartCount: 0, State: running, LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{FinishedAt: ago(time.Hour)}}},
				},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "batch-7", Namespace: "jobs", CreationTimestamp: ago(26 * time.Hour)},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "job"}}},
			Status:     v1.PodStatus{Phase: v1.PodSucceeded, PodIP: "10.88.0.9", ContainerStatuses: []v1.ContainerStatus{{Name: "job", State: terminated("Completed", 0, 0)}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "default", CreationTimestamp: ago(4 * time.Second)},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "api"}}},
			Status: v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{
				{Name: "api", Image: "nowhere.invalid/api:1", State: waiting("ImagePullBackOff")}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default", CreationTimestamp: ago(40 * 24 * time.Hour), DeletionTimestamp: &deleted},
			Spec:       v1.PodSpec{HostNetwork: true, Containers: []v1.Container{{Name: "c"}}},
			Status:     v1.PodStatus{Phase: v1.PodRunning, PodIP: "192.168.1.10", ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true, State: running}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "static-nostatus", Namespace: "kube-system"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "a"}, {Name: "b"}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "started", Namespace: "kube-system"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "a"}}},
			Status:     v1.PodStatus{Phase: v1.PodFailed, StartTime: ptrTo(ago(7 * time.Minute))},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestPrintPodTableGolden(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := printPodTable(&buf, getPods(), getNow); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/get_pods.golden"
	if *rewriteGet {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -rewrite-get to create it)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("table (-%s +got):\n%s", golden, diff)
	}
}

// get pods reads /pods from our own server and prints the table.
func TestGetPodsFromServer(t *testing.T) {
	t.Parallel()
	pods := getPods()
	srv, err := server.New(server.Config{}, server.Deps{Pods: func() []*v1.Pod {
		out := make([]*v1.Pod, len(pods))
		for i := range pods {
			out[i] = &pods[i]
		}
		return out
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-srv.Ready()
	code, out, errOut := runCLI(t, "get", "pods", "--server", "http://"+srv.Addr())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(pods)+1 || !strings.HasPrefix(lines[0], "NAMESPACE ") {
		t.Fatalf("output:\n%s", out)
	}
	// Ages depend on the clock; the rest of the web pod's row does not.
	if f := strings.Fields(lines[2]); len(f) < 6 || strings.Join(f[:5], " ") != "default old 1/1 Terminating 0" {
		t.Errorf("row %q", lines[2])
	}
}

func TestGetPodsErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"not a URL", []string{"get", "pods", "--server", "127.0.0.1:10255"}, exitUsage, "nodekeeper: --server \"127.0.0.1:10255\": want an http:// or https:// URL\n"},
		{"two names", []string{"get", "pods", "web", "api"}, exitUsage, "nodekeeper: accepts at most 1 arg(s), received 2\n"},
		{"unknown output", []string{"get", "pods", "-o", "xml"}, exitUsage, "nodekeeper: --output \"xml\": unknown format (want wide, json, yaml, name or jsonpath=TEMPLATE)\n"},
		{"bad jsonpath", []string{"get", "pods", "-o", "jsonpath={.status"}, exitUsage, "nodekeeper: --output \"jsonpath={.status\": bad jsonpath template: unclosed action\n"},
		{"server down", []string{"get", "pods", "--server", down}, 1, "nodekeeper: GET " + down + "/pods: dial tcp " + strings.TrimPrefix(down, "http://") +
			": connect: connection refused (is 'nodekeeper run' serving there? its readOnlyPort is off unless set; see --server)\n"},
		{"no agent", []string{"get", "pods", "--root-dir", empty}, 1, "nodekeeper: GET " + filepath.Join(empty, "nodekeeper.sock") + " /pods: dial unix " +
			filepath.Join(empty, "nodekeeper.sock") + ": connect: no such file or directory (is 'nodekeeper run' running with this root directory?)\n"},
		{"socket and server", []string{"get", "pods", "--server", down, "--socket", "/x.sock"}, exitUsage, "nodekeeper: --server and --socket: give one of them\n"},
		{"empty root dir", []string{"get", "node", "--root-dir", ""}, exitUsage, "nodekeeper: --root-dir: want a directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, tc.args...)
			if code != tc.code || errOut != tc.want {
				t.Errorf("exit %d, stderr %q; want %d, %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

// serveGetPods serves getPods on a loopback read-only port for the test's
// life and returns its URL.
func serveGetPods(t *testing.T) string {
	t.Helper()
	pods := getPods()
	for i := range pods {
		pods[i].UID = types.UID("uid-" + pods[i].Name)
	}
	srv, err := server.New(server.Config{}, server.Deps{Pods: func() []*v1.Pod {
		out := make([]*v1.Pod, len(pods))
		for i := range pods {
			out[i] = &pods[i]
		}
		return out
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-srv.Ready()
	return "http://" + srv.Addr()
}

// get pod NAME, -n, -o wide|json|yaml and an unknown pod, as kubectl.
func TestGetPodFormats(t *testing.T) {
	t.Parallel()
	url := serveGetPods(t)
	get := func(t *testing.T, args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, append(append([]string{"get"}, args...), "--server", url)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		return out
	}
	t.Run("one pod", func(t *testing.T) {
		t.Parallel()
		lines := strings.Split(strings.TrimSuffix(get(t, "pod", "api"), "\n"), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME READY STATUS RESTARTS AGE" ||
			strings.Join(strings.Fields(lines[1])[:4], " ") != "api 0/1 ImagePullBackOff 0" {
			t.Errorf("output:\n%s", strings.Join(lines, "\n"))
		}
	})
	t.Run("one namespace", func(t *testing.T) {
		t.Parallel()
		out := get(t, "pods", "-n", "kube-system")
		if strings.Contains(out, "NAMESPACE") || strings.Count(out, "\n") != 3 || !strings.Contains(out, "static-nostatus") {
			t.Errorf("output:\n%s", out)
		}
	})
	t.Run("wide", func(t *testing.T) {
		t.Parallel()
		lines := strings.Split(get(t, "pods", "-o", "wide"), "\n")
		if strings.Join(strings.Fields(lines[0]), " ") != "NAMESPACE NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES" {
			t.Errorf("header %q", lines[0])
		}
		if f := strings.Fields(lines[2]); len(f) != 10 || f[6] != "192.168.1.10" || f[7] != "<none>" {
			t.Errorf("row %q", lines[2])
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		var p v1.Pod
		out := get(t, "pod", "web", "-o", "json")
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		if p.APIVersion != "v1" || p.Kind != "Pod" || p.Name != "web" || len(p.Spec.InitContainers) != 2 {
			t.Errorf("pod %s %s %s", p.APIVersion, p.Kind, p.Name)
		}
		if !strings.HasPrefix(out, "{\n    \"") {
			t.Errorf("not kubectl's indentation: %.40q", out)
		}
	})
	t.Run("yaml list", func(t *testing.T) {
		t.Parallel()
		out := get(t, "pods", "-o", "yaml")
		var l struct {
			APIVersion, Kind string
			Items            []v1.Pod
			Metadata         struct{ ResourceVersion *string }
		}
		if err := yaml.UnmarshalStrict([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, "apiVersion: v1\nitems:\n") || l.Kind != "List" || len(l.Items) != len(getPods()) || l.Items[0].Kind != "Pod" || l.Metadata.ResourceVersion == nil {
			t.Errorf("list %s %s, %d items:\n%.200s", l.APIVersion, l.Kind, len(l.Items), out)
		}
	})
	t.Run("jsonpath", func(t *testing.T) {
		t.Parallel()
		ip := ""
		for _, p := range getPods() {
			if p.Name == "web" && p.Namespace == "default" {
				ip = p.Status.PodIP
			}
		}
		if out := get(t, "pod", "web", "-o", "jsonpath={.status.podIP}"); ip == "" || out != ip {
			t.Errorf("one pod's IP: %q, want %q", out, ip)
		}
		want := ""
		for _, p := range getPods() {
			if p.Namespace == "kube-system" {
				want += p.Name + " "
			}
		}
		if out := get(t, "pods", "-n", "kube-system", "-o", `jsonpath={range .items[*]}{.metadata.name} {end}`); out != want {
			t.Errorf("a namespace's names: %q, want %q", out, want)
		}
		if out := get(t, "pod", "web", "-o", "jsonpath={.status.nosuchfield}"); out != "" {
			t.Errorf("a missing key printed %q, want nothing (as kubectl)", out)
		}
	})
	t.Run("name", func(t *testing.T) {
		t.Parallel()
		if out := get(t, "pods", "-n", "kube-system", "-o", "name"); strings.Count(out, "pod/") != 2 || !strings.Contains(out, "pod/static-nostatus\n") {
			t.Errorf("output %q", out)
		}
	})
	t.Run("unknown pod", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "get", "pod", "api", "-n", "kube-system", "--server", url)
		if code != 1 || out != "" || errOut != "nodekeeper: pod \"api\" not found in namespace \"kube-system\" (nodekeeper get pods lists them)\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
}

// A watch prints a row for each pod whose row changed, a new one and one
// gone, but not for time passing, and returns nil when its context ends.
func TestWatchPods(t *testing.T) {
	t.Parallel()
	pod := func(name, uid string, st v1.ContainerState, created time.Duration) v1.Pod {
		return v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid), CreationTimestamp: ago(created)},
			Spec:   v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
			Status: v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: st}}}}
	}
	a0 := pod("a", "1", waiting("ContainerCreating"), time.Minute)
	b := pod("b", "2", running, time.Hour)
	turns := [][]v1.Pod{
		{pod("a", "1", waiting("ContainerCreating"), 2*time.Minute), b}, // only older: nothing
		{pod("a", "1", waiting("ErrImagePull"), time.Minute), b},        // a changed
		{pod("a", "1", waiting("ImagePullBackOff"), time.Minute)},       // a changed, b gone
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	read := func(context.Context) ([]v1.Pod, error) {
		if len(turns) == 0 {
			cancel()
			return nil, ctx.Err()
		}
		next := turns[0]
		turns = turns[1:]
		return next, nil
	}
	var buf bytes.Buffer
	if err := watchPods(ctx, &buf, podFormat{}, []v1.Pod{a0, b}, read, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		got = append(got, strings.Join(strings.Fields(l)[:3], " "))
	}
	want := []string{"a 0/1 ErrImagePull", "a 0/1 ImagePullBackOff", "b 0/1 Pending"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("watch lines (-want +got):\n%s\n%s", diff, buf.String())
	}
}

// get pods -w prints the table, then keeps watching until Ctrl-C, which
// ends it with exit 0.
func TestGetPodsWatchEndsOnInterrupt(t *testing.T) {
	t.Parallel()
	url := serveGetPods(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	code := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		code <- run(ctx, []string{"get", "pods", "-w", "--server", url}, w, &errOut)
		w.Close()
	}()
	first, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "NAMESPACE ") {
		t.Fatalf("first line %q, %v", first, err)
	}
	cancel() // as SIGINT does through main's signal.NotifyContext
	go io.Copy(io.Discard, r)
	if c := <-code; c != 0 || errOut.Len() != 0 {
		t.Errorf("exit %d, stderr %q; want 0 and nothing", c, errOut.String())
	}
}
