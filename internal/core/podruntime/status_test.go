package podruntime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

// A container's termination message is its termination-log file's content,
// read where the file is mounted.
func TestTerminationMessageFile(t *testing.T) {
	t.Parallel()
	msg := filepath.Join(t.TempDir(), "msg")
	if err := os.WriteFile(msg, []byte("bye"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &runtimeapi.ContainerStatus{ExitCode: 2, Annotations: map[string]string{criconfig.AnnotationTermMsgPath: "/dev/termination-log"},
		Mounts: []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: msg}}}
	if got := terminationMessage(c); got != "bye" {
		t.Errorf("terminationMessage = %q, want bye", got)
	}
}

func TestLogTail(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "0.log")
	log := "2026-01-01T00:00:00Z stdout F one\n2026-01-01T00:00:00Z stderr P tw\n2026-01-01T00:00:00Z stderr F o\n2026-01-01T00:00:00Z stdout F three\n"
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(p, 2, 100), "two\nthree\n"; got != want {
		t.Errorf("logTail = %q, want %q", got, want)
	}
	if got, want := logTail(p, 80, 7), "\nthree\n"; got != want {
		t.Errorf("logTail bytes = %q, want %q", got, want)
	}
	// Output that ends without a newline is a last partial line: kept as it is.
	q := filepath.Join(t.TempDir(), "1.log")
	if err := os.WriteFile(q, []byte("2026-01-01T00:00:00Z stdout P DONE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(q, 80, 2048), "DONE"; got != want {
		t.Errorf("logTail of a last partial line = %q, want %q", got, want)
	}
	st := &runtimeapi.ContainerStatus{ExitCode: 1, LogPath: p, Annotations: map[string]string{criconfig.AnnotationTermMsgPolicy: "FallbackToLogsOnError"}}
	if got := terminationMessage(st); got != "one\ntwo\nthree\n" {
		t.Errorf("fallback message = %q", got)
	}
	st.ExitCode = 0
	if got := terminationMessage(st); got != "" {
		t.Errorf("fallback on success = %q, want none", got)
	}
}

// TestSortStatusTies: two containers (or sandboxes) made in the same
// instant are ordered by attempt, the newer first, whatever order the
// runtime listed them in (a coarse clock, or a test's synctest bubble, gives
// equal creation times).
func TestSortStatusTies(t *testing.T) {
	t.Parallel()
	ctr := func(id string, attempt uint32) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: id, CreatedAt: 100, Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: attempt}}
	}
	sb := func(id string, attempt uint32) *runtimeapi.PodSandboxStatus {
		return &runtimeapi.PodSandboxStatus{Id: id, CreatedAt: 100, Metadata: &runtimeapi.PodSandboxMetadata{Attempt: attempt}}
	}
	p := &PodStatus{
		Sandboxes:  []*runtimeapi.PodSandboxStatus{sb("s0", 0), sb("s1", 1)},
		Containers: []*runtimeapi.ContainerStatus{ctr("c0", 0), {Id: "old", CreatedAt: 50, Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 5}}, ctr("c1", 1)},
	}
	sortStatus(p)
	var got []string
	for _, s := range p.Sandboxes {
		got = append(got, s.Id)
	}
	for _, c := range p.Containers {
		got = append(got, c.Id)
	}
	if diff := cmp.Diff([]string{"s1", "s0", "c1", "c0", "old"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
