package kubeletserver

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestParseLogOptions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		query   string
		want    logOptions
		wantErr string
	}{
		{query: "", want: logOptions{tail: -1, limit: -1}},
		{query: "follow=true&previous=1&timestamps=true", want: logOptions{follow: true, previous: true, timestamps: true, tail: -1, limit: -1}},
		{query: "tailLines=3&limitBytes=10", want: logOptions{tail: 3, limit: 10}},
		{query: "tailLines=0", want: logOptions{tail: 0, limit: -1}},
		{query: "tail=5", want: logOptions{tail: 5, limit: -1}},
		{query: "tail=all&tailLines=4", want: logOptions{tail: -1, limit: -1}},
		{query: "sinceSeconds=60", want: logOptions{tail: -1, limit: -1, since: now.Add(-time.Minute)}},
		{query: "sinceTime=2026-01-01T00:00:00Z", want: logOptions{tail: -1, limit: -1, since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{query: "stream=All", want: logOptions{tail: -1, limit: -1}},
		{query: "follow=maybe", wantErr: errBadQuery.Error()},
		{query: "tailLines=x", wantErr: errBadQuery.Error()},
		{query: "sinceTime=yesterday", wantErr: errBadQuery.Error()},
		{query: "tailLines=-1", wantErr: errInvalid.Error()},
		{query: "limitBytes=0", wantErr: errInvalid.Error()},
		{query: "sinceSeconds=0", wantErr: errInvalid.Error()},
		{query: "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", wantErr: errInvalid.Error()},
		{query: "stream=Stdout", wantErr: `unable to return the given log stream: "Stdout"`},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseLogOptions(q, now)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(logOptions{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestParseCRILine(t *testing.T) {
	t.Parallel()
	ts := time.Date(2016, 10, 6, 0, 17, 9, 669794202, time.UTC)
	tests := []struct {
		line    string
		want    criLine
		wantErr bool
	}{
		{line: "2016-10-06T00:17:09.669794202Z stdout F log content 1\n", want: criLine{ts: ts, stream: "stdout", msg: []byte("log content 1\n")}},
		{line: "2016-10-06T00:17:09.669794202Z stderr P part\n", want: criLine{ts: ts, stream: "stderr", partial: true, msg: []byte("part")}},
		{line: "2016-10-06T00:17:09.669794202Z stdout F \n", want: criLine{ts: ts, stream: "stdout", msg: []byte("\n")}},
		{line: "2016-10-06T00:17:09.669794202Z stdout F:x spaced  out\n", want: criLine{ts: ts, stream: "stdout", msg: []byte("spaced  out\n")}},
		{line: "garbage\n", wantErr: true},
		{line: "2016-10-06 stdout F x\n", wantErr: true},
		{line: "2016-10-06T00:17:09.669794202Z stdin F x\n", wantErr: true},
		{line: "2016-10-06T00:17:09.669794202Z stdout X x\n", wantErr: true},
		{line: "2016-10-06T00:17:09.669794202Z stdout\n", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseCRILine([]byte(tc.line))
		if (err != nil) != tc.wantErr {
			t.Errorf("parseCRILine(%q) err = %v, want error %v", tc.line, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(criLine{})); !tc.wantErr && diff != "" {
			t.Errorf("parseCRILine(%q) (-want +got)\n%s", tc.line, diff)
		}
	}
}

func TestTailStart(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 40<<10) + "\n" // beyond one block
	tests := []struct {
		name    string
		content string
		n       int64
		want    string // the content from the returned offset
	}{
		{"empty", "", 3, ""},
		{"all", "a\nb\n", 5, "a\nb\n"},
		{"last one", "a\nb\nc\n", 1, "c\n"},
		{"last two", "a\nb\nc\n", 2, "b\nc\n"},
		{"exactly all", "a\nb\nc\n", 3, "a\nb\nc\n"},
		{"zero", "a\nb\n", 0, ""},
		{"unterminated last line", "a\nb\nc", 1, "c"},
		{"unterminated, two", "a\nb\nc", 2, "b\nc"},
		{"empty lines", "a\n\n\n", 2, "\n\n"},
		{"across blocks", "first\n" + long + "last\n", 2, long + "last\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := strings.NewReader(tc.content)
			off, err := tailStart(r, int64(len(tc.content)), tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.content[off:]; got != tc.want {
				t.Errorf("tail %d of %q = %q, want %q", tc.n, tc.content, got, tc.want)
			}
		})
	}
}

func TestLogContainer(t *testing.T) {
	t.Parallel()
	term := func(id string) *v1.ContainerStateTerminated { return &v1.ContainerStateTerminated{ContainerID: id} }
	tests := []struct {
		name     string
		st       *v1.ContainerStatus
		previous bool
		want     string
		wantErr  string
	}{
		{"no status", nil, false, "", `container "app" in pod "web" is not available`},
		{"running", &v1.ContainerStatus{ContainerID: "containerd://c2", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}, false, "c2", ""},
		{"previous", &v1.ContainerStatus{ContainerID: "containerd://c2", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
			LastTerminationState: v1.ContainerState{Terminated: term("containerd://c1")}}, true, "c1", ""},
		{"no previous", &v1.ContainerStatus{ContainerID: "containerd://c2", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}, true, "",
			`previous terminated container "app" in pod "web" not found`},
		{"terminated", &v1.ContainerStatus{State: v1.ContainerState{Terminated: term("containerd://c3")}}, false, "c3", ""},
		{"terminated without ID falls back", &v1.ContainerStatus{State: v1.ContainerState{Terminated: term("")},
			LastTerminationState: v1.ContainerState{Terminated: term("containerd://c1")}}, false, "c1", ""},
		{"terminated without any ID", &v1.ContainerStatus{State: v1.ContainerState{Terminated: term("")}}, false, "", `container "app" in pod "web" is terminated`},
		{"crash loop", &v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: v1.ContainerState{Terminated: term("containerd://c1")}}, false, "c1", ""},
		{"pull error", &v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}}}, false, "",
			`container "app" in pod "web" is waiting to start: image can't be pulled`},
		{"pull back-off", &v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}, false, "",
			`container "app" in pod "web" is waiting to start: trying and failing to pull image`},
		{"creating", &v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, false, "",
			`container "app" in pod "web" is waiting to start: ContainerCreating`},
		{"no state", &v1.ContainerStatus{}, false, "", `container "app" in pod "web" is waiting to start - no logs yet`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
			if tc.st != nil {
				st := *tc.st
				st.Name = "app"
				pod.Status.ContainerStatuses = []v1.ContainerStatus{st}
			}
			got, err := logContainer(pod, "app", tc.previous)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("logContainer = %q, %q; want %q, %q", got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

// logFixture is a pod with a running container "app" (c2) whose previous
// instance c1 exited, their CRI log files, and a server over them.
type logFixture struct {
	base    string
	c       *http.Client
	client  func(path string) (int, string)
	current string // c2's log file
	running *atomic.Bool
	deps    Deps // the server's pods and runtime
}

func line(ts time.Time, stream, tag, msg string) string {
	return ts.Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + msg + "\n"
}

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func newLogFixture(t *testing.T, clk *testingclock.FakeClock) *logFixture {
	t.Helper()
	dir := t.TempDir()
	prev, cur := filepath.Join(dir, "0.log"), filepath.Join(dir, "1.log")
	write := func(p string, lines ...string) {
		if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(prev, line(t0, "stdout", "F", "old one"), line(t0.Add(time.Second), "stderr", "F", "old crash"))
	write(cur,
		line(t0.Add(time.Minute), "stdout", "F", "one"),
		line(t0.Add(time.Minute+time.Second), "stderr", "F", "two"),
		"not a CRI line\n",
		line(t0.Add(time.Minute+2*time.Second), "stdout", "P", "thr"),
		line(t0.Add(time.Minute+3*time.Second), "stdout", "F", "ee"),
		line(t0.Add(2*time.Minute), "stdout", "F", "four"),
	)
	running := new(atomic.Bool)
	running.Store(true)
	rt := fakeRuntime{status: func(id string) (*runtimeapi.ContainerStatusResponse, error) {
		st := &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_EXITED}
		switch id {
		case "c1":
			st.LogPath = prev
		case "c2":
			st.LogPath = cur
			if running.Load() {
				st.State = runtimeapi.ContainerState_CONTAINER_RUNNING
			}
		default:
			return nil, errors.New("no such container")
		}
		return &runtimeapi.ContainerStatusResponse{Status: st}, nil
	}}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app"}, {Name: "waiting"}}},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
			{Name: "app", ContainerID: "containerd://c2", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
				LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ContainerID: "containerd://c1"}}},
			{Name: "waiting", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
		}},
	}
	certDir := t.TempDir()
	deps := Deps{Pods: func() []*v1.Pod { return []*v1.Pod{pod} }, Runtime: rt, Logger: testLogger(t)}
	if clk != nil {
		deps.Clock = clk
	}
	s, err := New(Config{NodeName: "node-1", Address: "127.0.0.1", CertDir: certDir, NodeIPs: loopback,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)}, Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
	}, deps)
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	c := httpsClient(t, certDir, nil)
	return &logFixture{base: base, c: c, current: cur, running: running, deps: deps, client: func(path string) (int, string) { return get(t, c, base+path) }}
}

func TestContainerLogs(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0.Add(time.Minute + 90*time.Second))
	f := newLogFixture(t, clk)
	const p = "/containerLogs/ns/web/app"
	tests := []struct {
		path     string
		wantCode int
		want     string
	}{
		{p, 200, "one\ntwo\nthree\nfour\n"},
		{p + "?tailLines=2", 200, "ee\nfour\n"},
		{p + "?tail=1", 200, "four\n"},
		{p + "?tailLines=0", 200, ""},
		{p + "?timestamps=true&tailLines=3", 200, "2026-03-01T10:01:02Z thr2026-03-01T10:01:03Z ee\n2026-03-01T10:02:00Z four\n"},
		{p + "?limitBytes=6", 200, "one\ntw"},
		{p + "?sinceTime=2026-03-01T10:01:01Z", 200, "two\nthree\nfour\n"},
		{p + "?sinceSeconds=30", 200, "four\n"}, // now is 10:02:30
		{p + "?previous=true", 200, "old one\nold crash\n"},
		{p + "?previous=true&follow=true", 200, "old one\nold crash\n"}, // c1 exited: the follow ends
		{p + "?tailLines=-1", 422, `{"message": "Invalid request."}`},
		{p + "?follow=x", 400, `{"message": "Unable to decode query."}`},
		{"/containerLogs/ns/nope/app", 404, `pod "nope" does not exist`},
		{"/containerLogs/other/web/app", 404, `pod "web" does not exist`},
		{"/containerLogs/ns/web/nope", 404, `container "nope" not found in pod "web"`},
		{"/containerLogs/ns/web/waiting", 400, `container "waiting" in pod "web" is waiting to start: ContainerCreating`},
		{"/containerLogs/ns/web/waiting?previous=1", 400, `previous terminated container "waiting" in pod "web" not found`},
	}
	for _, tc := range tests {
		code, body := f.client(tc.path)
		if code != tc.wantCode || body != tc.want {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.want)
		}
	}
}

// TestContainerLogsFollow sees a line written after the request started, and
// ends once the container stopped.
func TestContainerLogsFollow(t *testing.T) {
	t.Parallel()
	f := newLogFixture(t, nil)
	req := f.base + "/containerLogs/ns/web/app?follow=true&tailLines=1"
	resp, err := f.c.Get(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readLine := func() string {
		t.Helper()
		s, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (got %q)", err, s)
		}
		return s
	}
	if got := readLine(); got != "four\n" {
		t.Fatalf("first line = %q, want the tail %q", got, "four\n")
	}
	appendTo(t, f.current, line(t0.Add(3*time.Minute), "stdout", "F", "five"))
	if got := readLine(); got != "five\n" {
		t.Fatalf("followed line = %q, want %q", got, "five\n")
	}
	f.running.Store(false)
	appendTo(t, f.current, line(t0.Add(4*time.Minute), "stderr", "F", "last words"))
	if got := readLine(); got != "last words\n" {
		t.Fatalf("followed line = %q, want %q", got, "last words\n")
	}
	// The container stopped: the server ends the stream.
	if rest, err := r.ReadString('\n'); err == nil || rest != "" {
		t.Fatalf("after the container stopped: %q, %v; want EOF", rest, err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fmt.Fprint(fh, s); err != nil {
		t.Fatal(err)
	}
}

// TestContainerLogsFollowRotation follows the log into the file the runtime
// rotated it to.
func TestContainerLogsFollowRotation(t *testing.T) {
	t.Parallel()
	f := newLogFixture(t, nil)
	resp, err := f.c.Get(f.base + "/containerLogs/ns/web/app?follow=true&tailLines=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if l, err := r.ReadString('\n'); err != nil || l != "four\n" {
		t.Fatalf("first line = %q, %v", l, err)
	}
	if err := os.Rename(f.current, f.current+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.current, []byte(line(t0.Add(5*time.Minute), "stdout", "F", "after rotation")), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "after rotation\n" {
		t.Fatalf("line after rotation = %q, %v", l, err)
	}
}

// TestContainerLogsFollowRotationKeepsLastLines follows the log through a
// rotation as the kubelet's log manager does it (0.log renamed to
// 0.log.TIMESTAMP, then a new 0.log): the lines the runtime wrote to the old
// file just before the rename are not lost.
func TestContainerLogsFollowRotationKeepsLastLines(t *testing.T) {
	t.Parallel()
	f := newLogFixture(t, nil)
	resp, err := f.c.Get(f.base + "/containerLogs/ns/web/app?follow=true&tailLines=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if l, err := r.ReadString('\n'); err != nil || l != "four\n" {
		t.Fatalf("first line = %q, %v", l, err)
	}
	// Between two polls: the last lines of the old file, the rename, the
	// first line of the new one.
	appendTo(t, f.current, line(t0.Add(3*time.Minute), "stdout", "F", "five")+line(t0.Add(3*time.Minute), "stdout", "F", "six"))
	if err := os.Rename(f.current, f.current+".20260301-100400"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.current, []byte(line(t0.Add(5*time.Minute), "stdout", "F", "after rotation")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"five\n", "six\n", "after rotation\n"} {
		if l, err := r.ReadString('\n'); err != nil || l != want {
			t.Fatalf("line = %q, %v; want %q", l, err, want)
		}
	}
}
