package podsource

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// wait is how long a test waits for something the source should do at once.
const wait = 10 * time.Second

// recorder is a nodeapi.Recorder that keeps events as "reason: message".
type recorder struct {
	mu     sync.Mutex
	events []string // guarded by mu
}

var _ nodeapi.Recorder = (*recorder)(nil)

func (r *recorder) Event(_ runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, eventtype+" "+reason+": "+message)
}

func (r *recorder) Eventf(o runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(o, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	r.Event(o, eventtype, reason, fmt.Sprintf(format, args...))
}

// take returns the events recorded since the last take, sorted.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	slices.Sort(ev)
	return ev
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// harness runs a File source and collects what it sends.
type harness struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	rec   *recorder
	logs  *logBuffer
	sets  chan []*v1.Pod
	syncs chan struct{}
}

// start runs a File source on cfg with a fake clock that only the test moves.
func start(t *testing.T, cfg FileConfig, watch bool) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)),
		rec:   &recorder{},
		logs:  &logBuffer{},
		sets:  make(chan []*v1.Pod, 1000),
		syncs: make(chan struct{}, 1000),
	}
	if cfg.NodeName == "" {
		cfg.NodeName = "node"
	}
	f, err := NewFile(cfg, FileDeps{Clock: h.clock, Logger: slog.New(slog.NewTextHandler(h.logs, nil)), Recorder: h.rec})
	if err != nil {
		t.Fatal(err)
	}
	f.noWatch = !watch
	f.onSync = func() { h.syncs <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, func(pods []*v1.Pod) { h.sets <- pods }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return after its context ended")
		}
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs)
		}
	})
	return h
}

// names renders a set as namespace/name@file-order, sorted as sent.
func names(pods []*v1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// next returns the next set sent.
func (h *harness) next() []*v1.Pod {
	h.t.Helper()
	select {
	case s := <-h.sets:
		return s
	case <-time.After(wait):
		h.t.Fatalf("no pod set sent within %v", wait)
		return nil
	}
}

// expect waits for the next set and checks its pod names.
func (h *harness) expect(want ...string) []*v1.Pod {
	h.t.Helper()
	if want == nil {
		want = []string{}
	}
	s := h.next()
	if d := cmp.Diff(want, names(s)); d != "" {
		h.t.Fatalf("pod set (-want +got):\n%s", d)
	}
	return s
}

// until reads sets until one has the names want (inotify may report a change
// in several steps, each of which may send).
func (h *harness) until(want ...string) []*v1.Pod {
	h.t.Helper()
	if want == nil {
		want = []string{}
	}
	deadline := time.After(wait)
	var last []string
	for {
		select {
		case s := <-h.sets:
			if last = names(s); slices.Equal(last, want) {
				return s
			}
		case <-deadline:
			h.t.Fatalf("no set %v within %v; last %v", want, wait, last)
			return nil
		}
	}
}

// tick moves the clock one period and waits for the rescan it causes.
func (h *harness) tick(period time.Duration) {
	h.t.Helper()
	for len(h.syncs) > 0 {
		<-h.syncs
	}
	h.clock.Step(period)
	select {
	case <-h.syncs:
	case <-time.After(wait):
		h.t.Fatalf("no rescan within %v of a period", wait)
	}
}

// quiet checks that a rescan sends nothing.
func (h *harness) quiet(period time.Duration) {
	h.t.Helper()
	h.tick(period)
	select {
	case s := <-h.sets:
		h.t.Fatalf("unexpected pod set %v", names(s))
	default:
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := writeFile(path, data); err != nil {
		t.Fatal(err)
	}
}

func writeFile(path, data string) error { return os.WriteFile(path, []byte(data), 0o644) }

// writeRenamed writes data to a dot-file beside path and renames it over
// path, as editors and config tools do.
func writeRenamed(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// manifest is a valid pod called name with image.
func manifest(name, image string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  containers:\n  - name: c\n    image: " + image + "\n"
}

const period = 20 * time.Second

func TestFileSendsTheCurrentSetAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "b.yaml"), manifest("b1", "x:1")+"---\n"+manifest("b2", "x:1"))
	write(t, filepath.Join(dir, "a.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}`)
	write(t, filepath.Join(dir, ".hidden.yaml"), manifest("hidden", "x:1"))
	write(t, filepath.Join(dir, ".b.yaml.swp"), "\x00\x01 not yaml")
	h := start(t, FileConfig{Path: dir + "/"}, true)
	got := h.expect("default/a-node", "default/b1-node", "default/b2-node")
	for _, p := range got {
		if seen := p.Annotations[ConfigSeenAnnotation]; seen != "2026-01-02T03:04:05.000000006Z" {
			t.Errorf("%s: config.seen = %q, want the clock's time", p.Name, seen)
		}
	}
	if ev := h.rec.take(); len(ev) != 0 {
		t.Errorf("events for valid and ignored files: %v", ev)
	}
}

func TestFileSendsAnEmptySetAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, path string }{
		{"empty directory", t.TempDir()},
		{"missing directory", filepath.Join(t.TempDir(), "manifests")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, FileConfig{Path: tc.path}, true)
			if got := h.expect(); got == nil {
				t.Errorf("sent a nil set; want an empty one")
			}
		})
	}
}

// TestFileUnreadablePath: a path that is neither a directory nor a regular
// file is reported, and the first set is sent all the same (empty).
func TestFileUnreadablePath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "manifests")
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, FileConfig{Path: path}, true)
	h.expect()
	want := []string{"Warning InvalidManifest: " + path + ": not a directory or regular file (mode prw-r--r--)"}
	if d := cmp.Diff(want, h.rec.take()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	h.quiet(period)
	if ev := h.rec.take(); len(ev) != 0 {
		t.Errorf("events at the second scan: %v", ev)
	}
}

// TestFileWatch: changes are seen through inotify, without the period (the
// fake clock never moves).
func TestFileWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	web := filepath.Join(dir, "web.yaml")
	h := start(t, FileConfig{Path: dir}, true)
	h.expect()

	write(t, web, manifest("web", "x:1"))
	first := h.until("default/web-node")[0]

	write(t, web, manifest("web", "x:2"))
	changed := h.until("default/web-node")[0]
	for changed.Spec.Containers[0].Image != "x:2" {
		changed = h.until("default/web-node")[0]
	}
	if changed.UID == first.UID {
		t.Errorf("a changed manifest kept UID %s", first.UID)
	}

	write(t, filepath.Join(dir, "api.yaml"), manifest("api", "x:1"))
	h.until("default/api-node", "default/web-node")

	// Renamed: the same pod from another file is another pod.
	if err := os.Rename(web, filepath.Join(dir, "web2.yaml")); err != nil {
		t.Fatal(err)
	}
	var renamed *v1.Pod
	for renamed == nil || renamed.UID == changed.UID {
		renamed = h.until("default/api-node", "default/web-node")[1]
	}

	if err := os.Remove(filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	h.until("default/web-node")

	// An editor's temporary file is ignored; its rename is seen.
	writeRenamed(t, filepath.Join(dir, "api.yaml"), manifest("api", "x:1"))
	h.until("default/api-node", "default/web-node")

	// A symbolic link to a manifest elsewhere is read through.
	elsewhere := filepath.Join(t.TempDir(), "db.yaml")
	write(t, elsewhere, manifest("db", "x:1"))
	if err := os.Symlink(elsewhere, filepath.Join(dir, "db.yaml")); err != nil {
		t.Fatal(err)
	}
	h.until("default/api-node", "default/db-node", "default/web-node")
	if err := os.Remove(filepath.Join(dir, "db.yaml")); err != nil {
		t.Fatal(err)
	}
	h.until("default/api-node", "default/web-node")

	// Same content, new attributes: rescanned, nothing sent.
	if err := os.Chmod(filepath.Join(dir, "web2.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.quiet(period)
}

func TestFileWatchesAMissingDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "manifests")
	h := start(t, FileConfig{Path: dir}, true)
	h.expect()
	if !strings.Contains(h.logs.String(), "Static pod path does not exist; watching for it") {
		t.Errorf("missing path not logged:\n%s", h.logs)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "web.yaml"), manifest("web", "x:1"))
	h.until("default/web-node")

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.until()

	// Made again, under a temporary name and renamed into place.
	tmp := dir + ".new"
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(tmp, "api.yaml"), manifest("api", "x:1"))
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	h.until("default/api-node")
	write(t, filepath.Join(dir, "web.yaml"), manifest("web", "x:1"))
	h.until("default/api-node", "default/web-node")
}

func TestFileSingleFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	write(t, path, manifest("web", "x:1"))
	write(t, filepath.Join(dir, "other.yaml"), manifest("other", "x:1"))
	h := start(t, FileConfig{Path: path}, true)
	first := h.expect("default/web-node")[0]

	writeRenamed(t, path, manifest("web", "x:2"))
	if got := h.until("default/web-node")[0]; got.UID == first.UID || got.Spec.Containers[0].Image != "x:2" {
		t.Errorf("replaced file: UID %s image %s; want a new UID and x:2", got.UID, got.Spec.Containers[0].Image)
	}
	write(t, filepath.Join(dir, "other.yaml"), manifest("other", "x:2"))
	h.quiet(period)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	h.until()
	write(t, path, manifest("web", "x:3"))
	h.until("default/web-node")
}

// TestFileChangeKeepingTheUID: a manifest that names its own UID keeps it
// when its spec changes; the change is still sent, and a rescan of the same
// content (map fields included) sends nothing.
func TestFileChangeKeepingTheUID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	withUID := func(image string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  uid: fixed\n" +
			"  labels: {a: '1', b: '2', c: '3', d: '4'}\n  annotations: {p: '1', q: '2', r: '3'}\n" +
			"spec:\n  nodeSelector: {k1: v1, k2: v2, k3: v3}\n  containers:\n  - name: c\n    image: " + image + "\n"
	}
	write(t, path, withUID("x:1"))
	h := start(t, FileConfig{Path: dir, Period: period}, false)
	if got := h.expect("default/web-node")[0]; got.UID != "fixed" {
		t.Fatalf("UID %q, want the manifest's", got.UID)
	}
	write(t, path, withUID("x:2"))
	h.tick(period)
	if got := h.expect("default/web-node")[0]; got.UID != "fixed" || got.Spec.Containers[0].Image != "x:2" {
		t.Errorf("changed manifest: UID %s image %s; want fixed and x:2", got.UID, got.Spec.Containers[0].Image)
	}
	// The same pod written again byte for byte differently: not a change.
	write(t, path, withUID("x:2")+"# a comment\n")
	for range 5 {
		h.quiet(period)
	}
}

// TestFilePeriod: without inotify, the periodic rescan on the injected clock
// sees changes; a pod keeps the time it was first seen.
func TestFilePeriod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, FileConfig{Path: dir, Period: period}, false)
	h.expect()
	start := h.clock.Now()

	write(t, filepath.Join(dir, "web.yaml"), manifest("web", "x:1"))
	h.tick(period)
	web := h.expect("default/web-node")[0]
	if got, want := web.Annotations[ConfigSeenAnnotation], seenString(start.Add(period)); got != want {
		t.Errorf("web config.seen = %q, want %q", got, want)
	}

	write(t, filepath.Join(dir, "api.yaml"), manifest("api", "x:1"))
	h.tick(period)
	got := h.expect("default/api-node", "default/web-node")
	if s, want := got[0].Annotations[ConfigSeenAnnotation], seenString(start.Add(2*period)); s != want {
		t.Errorf("api config.seen = %q, want %q", s, want)
	}
	if s := got[1].Annotations[ConfigSeenAnnotation]; s != web.Annotations[ConfigSeenAnnotation] {
		t.Errorf("web config.seen changed from %q to %q", web.Annotations[ConfigSeenAnnotation], s)
	}
	h.quiet(period)

	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	h.tick(period)
	h.expect("default/api-node")
}

// TestFileSkipsInvalidManifests: each bad file is reported once (log line and
// event naming the file, field and value) and skipped; the good pods are sent.
func TestFileSkipsInvalidManifests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	write(t, p("good.yaml"), manifest("good", "x:1"))
	write(t, p("unknown.yaml"), manifest("unknown", "x:1")+"    imagee: z\n")
	write(t, p("quantity.yaml"), manifest("quantity", "x:1")+"    resources:\n      limits:\n        cpu: lots\n")
	write(t, p("zz-dup.yaml"), manifest("good", "x:2"))
	write(t, p("uid1.yaml"), strings.Replace(manifest("uid1", "x:1"), "metadata:", "metadata:\n  uid: u-1", 1))
	write(t, p("uid2.yaml"), strings.Replace(manifest("uid2", "x:1"), "metadata:", "metadata:\n  uid: u-1", 1))
	write(t, p("name.yaml"), manifest("Not_DNS", "x:1"))
	write(t, p("number.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"n"},"spec":{"activeDeadlineSeconds":1e400,"containers":[{"name":"c","image":"x"}]}}`)
	write(t, p("latin1.yaml"), "apiVersion: v1\nkind: Pod\nmetadata:\n  name: caf\xe9\n")
	if err := unix.Mkfifo(p("fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, p("sub/inner.yaml"), manifest("inner", "x:1"))
	huge, err := os.Create(p("huge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(200 << 20); err != nil { // sparse: above the default limit, nothing to read
		t.Fatal(err)
	}
	huge.Close()

	h := start(t, FileConfig{Path: dir, Period: period}, true)
	h.expect("default/good-node", "default/uid1-node")

	wantEvents := []string{
		"Warning FailedValidation: " + p("uid2.yaml") + `: pod "default/uid2-node": duplicate pod UID: ` + p("uid1.yaml") + " has a pod with metadata.uid u-1; skipped",
		"Warning FailedValidation: " + p("zz-dup.yaml") + `: pod "default/good-node": duplicate pod name: ` + p("good.yaml") + " has a pod of the same namespace and name; skipped",
		"Warning InvalidManifest: " + p("fifo.yaml") + ": not a regular file (mode prw-r--r--)",
		"Warning InvalidManifest: " + p("huge.yaml") + ": larger than 10Mi (10485760 bytes), the largest static pod manifest read, as the kubelet's",
		"Warning InvalidManifest: " + p("latin1.yaml") + ": not UTF-8 text (invalid byte at offset 46)",
		"Warning InvalidManifest: " + p("name.yaml") + `: document 1: pod "Not_DNS": metadata.name: "Not_DNS": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		"Warning InvalidManifest: " + p("number.json") + `: document 1: pod "n": spec.activeDeadlineSeconds: 1e400: want a whole number that fits int64`,
		"Warning InvalidManifest: " + p("quantity.yaml") + `: document 1: pod "quantity": spec.containers[0].resources.limits.cpu: "lots": not a valid quantity`,
		"Warning InvalidManifest: " + p("sub") + ": is a directory; manifests in subdirectories are not read",
		"Warning InvalidManifest: " + p("unknown.yaml") + `: document 1: pod "unknown": unknown field "spec.containers[0].imagee"`,
	}
	if d := cmp.Diff(wantEvents, h.rec.take()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	logs := h.logs.String()
	for _, ev := range wantEvents {
		msg := ev[strings.Index(ev, ": ")+2:]
		if !strings.Contains(logs, fmt.Sprintf("%q", msg)) && !strings.Contains(logs, msg) {
			t.Errorf("log has no line with %q", msg)
		}
	}

	// Reported once: a rescan of the same files records nothing new.
	h.quiet(period)
	if ev := h.rec.take(); len(ev) != 0 {
		t.Errorf("events at the second scan: %v", ev)
	}

	// A new content that is still bad is reported again; a fixed one runs.
	write(t, p("unknown.yaml"), manifest("unknown", "x:1")+"    imagez: z\n")
	h.tick(period)
	if d := cmp.Diff([]string{"Warning InvalidManifest: " + p("unknown.yaml") + `: document 1: pod "unknown": unknown field "spec.containers[0].imagez"`}, h.rec.take()); d != "" {
		t.Errorf("events after a change (-want +got):\n%s", d)
	}
	write(t, p("unknown.yaml"), manifest("unknown", "x:1"))
	h.until("default/good-node", "default/uid1-node", "default/unknown-node")
}

func TestNewFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  FileConfig
		want string
	}{
		{"no path", FileConfig{NodeName: "n"}, "podsource: Path is empty"},
		{"no node", FileConfig{Path: "/m"}, "podsource: NodeName is empty"},
		{"bad node", FileConfig{Path: "/m", NodeName: "a_b"}, `podsource: NodeName "a_b": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"negative period", FileConfig{Path: "/m", NodeName: "n", Period: -time.Second}, "podsource: Period -1s is negative"},
		{"negative size", FileConfig{Path: "/m", NodeName: "n", MaxFileSize: -1}, "podsource: MaxFileSize -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewFile(tc.cfg, FileDeps{})
			if err == nil || err.Error() != tc.want {
				t.Errorf("NewFile error = %v, want %q", err, tc.want)
			}
		})
	}
	f, err := NewFile(FileConfig{Path: "/etc/kubernetes/manifests/", NodeName: "Node"}, FileDeps{})
	if err != nil {
		t.Fatal(err)
	}
	if f.path != "/etc/kubernetes/manifests" || f.period != DefaultPeriod || f.maxSize != 10<<20 {
		t.Errorf("defaults: path %q period %v size %d", f.path, f.period, f.maxSize)
	}
}

// TestFileRemovedAndWrittenAgain: a manifest deleted and written again before
// the source rescans is seen as a removal, then as the same pod again (same
// UID), as the kubelet sees it; the two changes do not cancel out.
func TestFileRemovedAndWrittenAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	web := filepath.Join(dir, "web.yaml")
	write(t, web, manifest("web", "x:1"))
	f, err := NewFile(FileConfig{Path: dir, NodeName: "node"}, FileDeps{
		Clock:    clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Recorder: &recorder{},
	})
	if err != nil {
		t.Fatal(err)
	}
	sets := make(chan []*v1.Pod, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		first := true
		done <- f.Run(ctx, func(pods []*v1.Pod) {
			if first {
				// Run's goroutine waits here: both changes happen before it
				// can rescan.
				first = false
				if err := os.Remove(web); err != nil {
					t.Error(err)
				}
				if err := writeFile(web, manifest("web", "x:1")); err != nil {
					t.Error(err)
				}
			}
			sets <- pods
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	next := func() []*v1.Pod {
		t.Helper()
		select {
		case s := <-sets:
			return s
		case <-time.After(wait):
			t.Fatalf("no pod set sent within %v", wait)
			return nil
		}
	}
	before := next()
	if got := names(before); !slices.Equal(got, []string{"default/web-node"}) {
		t.Fatalf("first set %v", got)
	}
	if got := names(next()); len(got) != 0 {
		t.Fatalf("set after the removal %v, want none", got)
	}
	after := next()
	if got := names(after); !slices.Equal(got, []string{"default/web-node"}) || after[0].UID != before[0].UID {
		t.Fatalf("set after the manifest came back %v (UID %s), want default/web-node with UID %s", got, after[0].UID, before[0].UID)
	}
}

// TestFileManifestOverLimitNotRead: a 200 MiB manifest (the kubelet reads at
// most 10 MiB) is skipped with an event without being read, and one byte over
// the limit is too much; a manifest of exactly the limit is read. Not
// parallel: parallel tests run after it, so the allocation is its own.
func TestFileManifestOverLimitNotRead(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	huge, err := os.Create(p("huge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(200 << 20); err != nil { // sparse
		t.Fatal(err)
	}
	huge.Close()
	pad := func(body string, size int) string { return body + "#" + strings.Repeat(" ", size-len(body)-1) }
	write(t, p("over-limit.yaml"), pad(manifest("over", "x:1"), int(DefaultMaxFileSize)+1))

	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	h := start(t, FileConfig{Path: dir, Period: period}, false)
	h.expect()
	goruntime.ReadMemStats(&after)
	want := []string{
		"Warning InvalidManifest: " + p("huge.yaml") + ": larger than 10Mi (10485760 bytes), the largest static pod manifest read, as the kubelet's",
		"Warning InvalidManifest: " + p("over-limit.yaml") + ": larger than 10Mi (10485760 bytes), the largest static pod manifest read, as the kubelet's",
	}
	if d := cmp.Diff(want, h.rec.take()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("the scan allocated %d MiB: a manifest over the limit was read", alloc>>20)
	}

	// JSON padded with blanks: cheap to parse, even with -race on a busy machine.
	fits := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"fits"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}`
	write(t, p("at-limit.json"), fits+strings.Repeat(" ", int(DefaultMaxFileSize)-len(fits)-1)+"\n")
	h.tick(period)
	h.expect("default/fits-node")
}

// TestFileEmptyManifest: an empty manifest, or one of only comments, holds no
// pod: it is logged at warning and recorded as an InvalidManifest event once
// per content (the kubelet logs it at every rescan), and the other pods run.
func TestFileEmptyManifest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	write(t, p("empty.yaml"), "")
	write(t, p("comments.yaml"), "# disabled\n---\n")
	write(t, p("web.yaml"), manifest("web", "x:1"))
	h := start(t, FileConfig{Path: dir, Period: period}, false)
	h.expect("default/web-node")
	want := []string{
		"Warning InvalidManifest: " + p("comments.yaml") + ": holds no pod (only comments or empty YAML documents)",
		"Warning InvalidManifest: " + p("empty.yaml") + ": is empty: no pod",
	}
	if d := cmp.Diff(want, h.rec.take()); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, p("empty.yaml")+": is empty: no pod") {
		t.Errorf("the empty manifest is not logged at warning:\n%s", logs)
	}
	h.quiet(period)
	if ev := h.rec.take(); len(ev) != 0 {
		t.Errorf("events at the second scan: %v", ev)
	}
	// Written, then emptied again: a change each time, reported again.
	write(t, p("empty.yaml"), manifest("api", "x:1"))
	h.tick(period)
	h.until("default/api-node", "default/web-node")
	write(t, p("empty.yaml"), "")
	h.tick(period)
	h.until("default/web-node")
	if d := cmp.Diff(want[1:], h.rec.take()); d != "" {
		t.Errorf("events after emptying it again (-want +got):\n%s", d)
	}
}
