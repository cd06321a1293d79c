package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWriteFileReplacesAtomically(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	for _, content := range []string{"one", "two, longer", "3"} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(content, string(got)); diff != "" {
			t.Errorf("content (-want +got):\n%s", diff)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"state"}, names); diff != "" {
		t.Errorf("directory holds temporary files (-want +got):\n%s", diff)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
}

func TestWriteFileMissingDir(t *testing.T) {
	t.Parallel()
	err := WriteFile(filepath.Join(t.TempDir(), "no", "state"), []byte("x"), 0o600)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestMoveAside(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	if err := os.WriteFile(p, []byte("bad"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	aside, err := MoveAside(p, now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p+".corrupt-20260102T030405.000000006Z", aside); diff != "" {
		t.Errorf("aside name (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("original still present: %v", err)
	}
	if _, err := MoveAside(p, now); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("second move: err = %v, want fs.ErrNotExist", err)
	}
}
