package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
				Phase: v1.PodRunning, PodIP: "10.88.0.5",
				InitContainerStatuses: []v1.ContainerStatus{{Name: "setup", RestartCount: 4}, {Name: "proxy", Ready: true, RestartCount: 1}},
				ContainerStatuses: []v1.ContainerStatus{
					{Name: "app", Ready: true, RestartCount: 2, LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{FinishedAt: ago(95 * time.Second)}}},
					{Name: "metrics", RestartCount: 0, LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{FinishedAt: ago(time.Hour)}}},
				},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "batch-7", Namespace: "jobs", CreationTimestamp: ago(26 * time.Hour)},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "job"}}},
			Status:     v1.PodStatus{Phase: v1.PodSucceeded, PodIP: "10.88.0.9", ContainerStatuses: []v1.ContainerStatus{{Name: "job"}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "default", CreationTimestamp: ago(4 * time.Second)},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "api"}}},
			Status:     v1.PodStatus{Phase: v1.PodPending},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default", CreationTimestamp: ago(40 * 24 * time.Hour), DeletionTimestamp: &deleted},
			Spec:       v1.PodSpec{HostNetwork: true, Containers: []v1.Container{{Name: "c"}}},
			Status:     v1.PodStatus{Phase: v1.PodRunning, PodIP: "192.168.1.10", ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true}}},
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
	if f := strings.Fields(lines[2]); len(f) < 6 || strings.Join(f[:5], " ") != "default old Terminating 192.168.1.10 1/1" {
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
		{"argument", []string{"get", "pods", "web"}, exitUsage, "nodekeeper: unknown command \"web\" for \"nodekeeper get pods\"\n"},
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
