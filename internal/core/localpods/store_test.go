package localpods

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// fakeAgent records the sets and kill requests it gets. A kill waits for a
// value on release when release is not nil.
type fakeAgent struct {
	mu      sync.Mutex
	sets    [][]*v1.Pod
	kills   []nodeapi.KillRequest
	killed  chan nodeapi.KillRequest // gets each kill request when not nil
	release chan error
}

func (f *fakeAgent) SetPods(_ context.Context, source string, pods []*v1.Pod) error {
	if source != "local" { // not "api": that is the API-server source's name
		return fmt.Errorf("source %q", source)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, pods)
	return nil
}

func (f *fakeAgent) KillPod(ctx context.Context, req nodeapi.KillRequest) error {
	f.mu.Lock()
	f.kills = append(f.kills, req)
	f.mu.Unlock()
	if f.killed != nil {
		f.killed <- req
	}
	if f.release == nil {
		return nil
	}
	select {
	case err := <-f.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeAgent) last() []*v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sets) == 0 {
		return nil
	}
	return f.sets[len(f.sets)-1]
}

func (f *fakeAgent) setCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sets)
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// t0 is synctest's epoch, the time.Now of a bubble at its start: the tests
// that compare the stamps a store writes run in a bubble (synctest.Test).
var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// seqUIDs returns UIDs uid-1, uid-2, ...
func seqUIDs() func() types.UID {
	var mu sync.Mutex
	n := 0
	return func() types.UID {
		mu.Lock()
		defer mu.Unlock()
		n++
		return types.UID(fmt.Sprintf("uid-%d", n))
	}
}

// started runs a store until the test ends and returns it once its set was
// handed over, with a function that stops it and waits for Run to return.
func started(t *testing.T, path string, ag Agent, log *slog.Logger) (*Store, func()) {
	t.Helper()
	s, err := New(Config{Path: path, NodeName: "node1"}, Deps{Agent: ag, NewUID: seqUIDs(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		close(done)
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	<-s.started
	return s, stop
}

const twoPods = `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: c, image: testbox:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: data}
spec:
  priorityClassName: system-node-critical
  containers: [{name: c, image: testbox:1}]
`

// TestCreatePersistsAcrossRestart: created pods are stamped with the time of
// their creation (t0, in a synctest bubble), handed to the agent and read
// back, stamps included, after a restart.
func TestCreatePersistsAcrossRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCreatePersistsAcrossRestart)
}

func testCreatePersistsAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	ag := &fakeAgent{}
	s, stop := started(t, path, ag, nil)
	if diff := cmp.Diff([]*v1.Pod(nil), ag.last()); diff != "" {
		t.Errorf("first set (-want +got):\n%s", diff)
	}
	pods, err := s.Create(t.Context(), "pods.yaml", []byte(twoPods))
	if err != nil {
		t.Fatal(err)
	}
	type ident struct {
		Name, UID, Source, Node string
		Created                 time.Time
		Priority                int32
		Critical                bool
		Phase                   v1.PodPhase
	}
	idents := func(pods []*v1.Pod) []ident {
		var out []ident
		for _, p := range pods {
			out = append(out, ident{p.Namespace + "/" + p.Name, string(p.UID), p.Annotations[qos.ConfigSourceAnnotation],
				p.Spec.NodeName, p.CreationTimestamp.UTC(), qos.Priority(p), qos.IsCritical(p), p.Status.Phase})
		}
		return out
	}
	want := []ident{
		{"default/web", "uid-1", "api", "node1", t0, 0, false, v1.PodPending},
		{"data/db", "uid-2", "api", "node1", t0, SystemNodeCriticalPriority, true, v1.PodPending},
	}
	if diff := cmp.Diff(want, idents(pods)); diff != "" {
		t.Errorf("created pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"data/db", "default/web"}, names(ag.last())); diff != "" {
		t.Errorf("set handed to the agent (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file: %v, %v; want mode 0600", fi, err)
	}
	stop()

	ag2 := &fakeAgent{}
	s2, _ := started(t, path, ag2, nil)
	got := idents(s2.Pods())
	if diff := cmp.Diff([]ident{want[1], want[0]}, got); diff != "" {
		t.Errorf("pods after restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(s2.Pods(), ag2.last()); diff != "" {
		t.Errorf("set handed to the agent at start (-want +got):\n%s", diff)
	}
}

func TestCorruptFileMovedAside(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{
		"not JSON":       `{"checksum": "`,
		"wrong checksum": `{"checksum":"00","pods":[]}`,
		"pod without UID": `{"checksum":"` + checksum([]byte(`[{"metadata":{"name":"x"}}]`)) +
			`","pods":[{"metadata":{"name":"x"}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ag := &fakeAgent{}
			s, _ := started(t, path, ag, log)
			if got := s.Pods(); len(got) != 0 {
				t.Errorf("pods: %v, want none", names(got))
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("moved-aside files: %v, want one", aside)
			}
			if b, _ := os.ReadFile(aside[0]); string(b) != content {
				t.Errorf("moved-aside content %q, want %q", b, content)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "moved aside") {
				t.Errorf("logs %q: want an error saying the file was moved aside", logs.String())
			}
			// The store works on: a new pod is saved in a new file.
			if _, err := s.Create(t.Context(), "p.yaml", []byte(twoPods)); err != nil {
				t.Fatal(err)
			}
			if _, err := load(path); err != nil {
				t.Errorf("new file: %v", err)
			}
		})
	}
}

func TestCreateRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, manifest string
		bad            bool // decode.ErrBadInput, else ErrExists
		want           []string
	}{
		{"unknown field", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containerz: []}\n", true,
			[]string{"new.yaml", "spec.containerz"}},
		{"invalid value", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {restartPolicy: Sometimes, containers: [{name: c, image: i}]}\n", true,
			[]string{"new.yaml", "spec.restartPolicy", `"Sometimes"`}},
		{"unknown priority class", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {priorityClassName: gold, containers: [{name: c, image: i}]}\n", true,
			[]string{"new.yaml", "spec.priorityClassName", `"gold"`}},
		{"priority not the class's", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {priority: 7, containers: [{name: c, image: i}]}\n", true,
			[]string{"new.yaml", "spec.priority", "7"}},
		{"twice in the manifest", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n---\n" +
			"apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec: {containers: [{name: c, image: i}]}\n", true,
			[]string{"new.yaml", `"default/a"`, "twice"}},
		{"no pods", "# nothing\n", true, []string{"new.yaml", "no pods"}},
		{"exists", "apiVersion: v1\nkind: Pod\nmetadata: {name: fresh}\nspec: {containers: [{name: c, image: i}]}\n---\n" +
			"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}]}\n", false,
			[]string{`"default/web"`, "already exists"}},
	}
	path := filepath.Join(t.TempDir(), FileName)
	ag := &fakeAgent{}
	s, _ := started(t, path, ag, nil)
	if _, err := s.Create(t.Context(), "pods.yaml", []byte(twoPods)); err != nil {
		t.Fatal(err)
	}
	sets := ag.setCount()
	for _, tt := range tests {
		_, err := s.Create(t.Context(), "new.yaml", []byte(tt.manifest))
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if tt.bad != errors.Is(err, decode.ErrBadInput) || tt.bad == errors.Is(err, ErrExists) {
			t.Errorf("%s: error %v: bad input %v, exists %v", tt.name, err, errors.Is(err, decode.ErrBadInput), errors.Is(err, ErrExists))
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tt.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q is not one line", tt.name, err)
		}
	}
	// Nothing was stored or handed over: all or none.
	if diff := cmp.Diff([]string{"data/db", "default/web"}, names(s.Pods())); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if got := ag.setCount(); got != sets {
		t.Errorf("sets handed over: %d, want %d", got, sets)
	}
}

func TestPrepareResolvesPriority(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		class    string
		given    *int32
		want     int32
		critical bool
	}{
		{"", nil, 0, false},
		{SystemClusterCritical, nil, qos.SystemCriticalPriority, true},
		{SystemNodeCritical, nil, SystemNodeCriticalPriority, true},
		{SystemNodeCritical, ptr(SystemNodeCriticalPriority), SystemNodeCriticalPriority, true},
	} {
		p := &v1.Pod{}
		p.Name = "p"
		p.Spec.PriorityClassName, p.Spec.Priority = tt.class, tt.given
		if err := Prepare(p, "n", "u", t0); err != nil {
			t.Errorf("%q: %v", tt.class, err)
			continue
		}
		if got := qos.Priority(p); got != tt.want || qos.IsCritical(p) != tt.critical || qos.IsStatic(p) {
			t.Errorf("%q: priority %d critical %v static %v; want %d %v false", tt.class, got, qos.IsCritical(p), qos.IsStatic(p), tt.want, tt.critical)
		}
		if *p.Spec.PreemptionPolicy != v1.PreemptLowerPriority {
			t.Errorf("%q: preemption policy %v", tt.class, *p.Spec.PreemptionPolicy)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// The retry after a failed kill waits on the time package's clock inside a
// synctest bubble.
func TestDeleteIsGraceful(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testDeleteIsGraceful)
}

func testDeleteIsGraceful(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	ag := &fakeAgent{killed: make(chan nodeapi.KillRequest, 1), release: make(chan error)}
	s, _ := started(t, path, ag, nil)
	if _, err := s.Create(t.Context(), "pods.yaml", []byte(twoPods)); err != nil {
		t.Fatal(err)
	}
	type res struct {
		p   *v1.Pod
		err error
	}
	deleted := make(chan res, 1)
	go func() {
		p, err := s.Delete(t.Context(), "default", "web", ptr(int64(5)))
		deleted <- res{p, err}
	}()
	req := <-ag.killed
	if req.Pod.UID != "uid-1" || req.GracePeriodOverride == nil || *req.GracePeriodOverride != 5 {
		t.Fatalf("kill request for %s grace %v, want uid-1 with 5", req.Pod.UID, req.GracePeriodOverride)
	}
	// While it stops, the pod is still stored, marked deleted, and the agent
	// was given it so.
	if got := s.Pods(); len(got) != 2 || got[1].DeletionTimestamp == nil || *got[1].DeletionGracePeriodSeconds != 5 {
		t.Fatalf("pods while stopping: %v", names(got))
	}
	if last := ag.last(); len(last) != 2 || last[1].DeletionTimestamp == nil {
		t.Errorf("agent's set while stopping does not mark default/web deleted")
	}
	if stored, _ := load(path); len(stored) != 2 || stored[1].DeletionTimestamp == nil {
		t.Errorf("file while stopping does not mark default/web deleted")
	}
	// A failed kill is retried.
	ag.release <- errors.New("runtime down")
	req = <-ag.killed
	if req.Pod.UID != "uid-1" {
		t.Fatalf("retry for %s", req.Pod.UID)
	}
	select {
	case r := <-deleted:
		t.Fatalf("Delete returned before the pod stopped: %v", r.err)
	default:
	}
	ag.release <- nil
	r := <-deleted
	if r.err != nil || r.p.Name != "web" || r.p.DeletionTimestamp == nil {
		t.Fatalf("Delete: %v, %v", r.p, r.err)
	}
	if diff := cmp.Diff([]string{"data/db"}, names(s.Pods())); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"data/db"}, names(ag.last())); diff != "" {
		t.Errorf("agent's set (-want +got):\n%s", diff)
	}
	stored, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"data/db"}, names(stored)); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
	if _, err := s.Delete(t.Context(), "default", "web", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
}

func TestDeleteResumesAfterRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	ag := &fakeAgent{killed: make(chan nodeapi.KillRequest, 1), release: make(chan error)}
	s, stop := started(t, path, ag, nil)
	if _, err := s.Create(t.Context(), "pods.yaml", []byte(twoPods)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	deleted := make(chan error, 1)
	go func() {
		_, err := s.Delete(ctx, "data", "db", nil)
		deleted <- err
	}()
	if req := <-ag.killed; req.Pod.Name != "db" || *req.GracePeriodOverride != 30 {
		t.Fatalf("kill %s grace %d, want db with its own 30", req.Pod.Name, *req.GracePeriodOverride)
	}
	stop()
	if err := <-deleted; !errors.Is(err, context.Canceled) {
		t.Errorf("Delete after its context ended: %v", err)
	}
	stop() // the agent stops before the pod did

	ag2 := &fakeAgent{killed: make(chan nodeapi.KillRequest, 1)}
	s2, _ := started(t, path, ag2, nil)
	if req := <-ag2.killed; req.Pod.Name != "db" || *req.GracePeriodOverride != 30 {
		t.Fatalf("resumed kill %s grace %d", req.Pod.Name, *req.GracePeriodOverride)
	}
	// Delete on a pod being deleted waits for that deletion.
	if _, err := s2.Delete(t.Context(), "data", "db", nil); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"default/web"}, names(s2.Pods())); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	ag := &fakeAgent{}
	s, _ := started(t, path, ag, nil)
	const n = 16
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		for _, name := range []string{fmt.Sprintf("p%d", i), "same"} {
			wg.Go(func() {
				_, err := s.Create(t.Context(), "x.yaml", fmt.Appendf(nil,
					"apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: c, image: i}]}\n", name))
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	var ok, exists int
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrExists):
			exists++
		default:
			t.Error(err)
		}
	}
	if ok != n+1 || exists != n-1 {
		t.Errorf("%d created and %d conflicts, want %d and %d", ok, exists, n+1, n-1)
	}
	if got := len(s.Pods()); got != n+1 {
		t.Errorf("%d pods stored, want %d", got, n+1)
	}
	// The last set handed over is the final one, and so is the file.
	if diff := cmp.Diff(names(s.Pods()), names(ag.last())); diff != "" {
		t.Errorf("agent's last set (-store +agent):\n%s", diff)
	}
	stored, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(names(s.Pods()), names(stored)); diff != "" {
		t.Errorf("file (-store +file):\n%s", diff)
	}
}

// A pod the agent reports finished keeps that status in the file, and the
// next start hands it over finished; a running pod's status is not saved.
func TestFinishedStatusPersists(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), FileName)
		var mu sync.Mutex
		var agentView []*v1.Pod
		observed := func() []*v1.Pod { mu.Lock(); defer mu.Unlock(); return agentView }
		ag := &fakeAgent{}
		s, err := New(Config{Path: path, NodeName: "n"}, Deps{Agent: ag, NewUID: seqUIDs(), Observed: observed})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		pods, err := s.Create(t.Context(), "p.yaml", []byte(twoPods))
		if err != nil {
			t.Fatal(err)
		}
		web, db := pods[0].DeepCopy(), pods[1].DeepCopy()
		web.Status = v1.PodStatus{Phase: v1.PodFailed, Reason: "Preempting", Message: "Preempted in order to admit critical pod"}
		db.Status = v1.PodStatus{Phase: v1.PodRunning}
		mu.Lock()
		agentView = []*v1.Pod{web, db}
		mu.Unlock()
		time.Sleep(ObservePeriod + time.Millisecond)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		status := func(pods []*v1.Pod) map[string]string {
			out := map[string]string{}
			for _, p := range pods {
				out[p.Namespace+"/"+p.Name] = string(p.Status.Phase) + " " + p.Status.Reason
			}
			return out
		}
		want := map[string]string{"default/web": "Failed Preempting", "data/db": "Pending "}
		stored, err := load(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, status(stored)); diff != "" {
			t.Errorf("file (-want +got):\n%s", diff)
		}
		ag2 := &fakeAgent{}
		started(t, path, ag2, nil)
		if diff := cmp.Diff(want, status(ag2.last())); diff != "" {
			t.Errorf("handed over after restart (-want +got):\n%s", diff)
		}
	})
}

// refusingAgent does not know the source.
type refusingAgent struct{ fakeAgent }

func (*refusingAgent) SetPods(context.Context, string, []*v1.Pod) error {
	return errors.New(`agent: unknown pod source "local"`)
}

func TestRunFailsWhenTheAgentRefusesTheSource(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Path: filepath.Join(t.TempDir(), FileName)}, Deps{Agent: &refusingAgent{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "unknown pod source") {
		t.Errorf("Run: %v, want the agent's error", err)
	}
}

// TestStaticPodNameTaken: a local pod may not take the namespace and name of
// a static pod the agent runs (409 naming the static pod; the agent would run
// both, two default/web-node1 at once); a static pod written later with a
// local pod's name is logged once as a clash, both running as in the kubelet.
func TestStaticPodNameTaken(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		static := func(name, uid string) *v1.Pod {
			return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid),
				Annotations: map[string]string{qos.ConfigSourceAnnotation: "file"}}}
		}
		var mu sync.Mutex
		agentView := []*v1.Pod{static("web-node1", "static-1")}
		observed := func() []*v1.Pod { mu.Lock(); defer mu.Unlock(); return slices.Clone(agentView) }
		ag := &fakeAgent{}
		var logs bytes.Buffer
		s, err := New(Config{Path: filepath.Join(t.TempDir(), FileName), NodeName: "node1"},
			Deps{Agent: ag, NewUID: seqUIDs(), Observed: observed, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		synctest.Wait()
		sets := ag.setCount()

		const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: c, image: i}]}\n"
		_, err = s.Create(t.Context(), "p.yaml", []byte(strings.Replace(pod, "%s", "web-node1", 1)))
		want := `pod "default/web-node1": already exists: the static pod default/web-node1 (uid static-1) has that namespace and name`
		if !errors.Is(err, ErrExists) || err.Error() != want {
			t.Fatalf("Create = %v, want ErrExists %q", err, want)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/pods", strings.NewReader(strings.Replace(pod, "%s", "web-node1", 1)))
		req.Header.Set("Content-Type", "application/yaml")
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "the static pod default/web-node1") {
			t.Errorf("POST /pods: %d %s, want 409 naming the static pod", rec.Code, rec.Body.String())
		}
		if len(s.Pods()) != 0 || ag.setCount() != sets {
			t.Errorf("the refused pod was stored (%v) or handed over", names(s.Pods()))
		}

		// Another name is fine; a static pod then written with it clashes.
		db, err := s.Create(t.Context(), "p.yaml", []byte(strings.Replace(pod, "%s", "db", 1)))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		agentView = append(agentView, static("db", "static-2"))
		mu.Unlock()
		time.Sleep(3 * ObservePeriod)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(logs.String(), "A pod of another source has the namespace and name of a local pod"); n != 1 ||
			!strings.Contains(logs.String(), "pod=default/db podUID="+string(db[0].UID)+" otherUID=static-2 otherSource=file") {
			t.Errorf("clash logged %d times, want once naming both pods:\n%s", n, logs.String())
		}
	})
}
