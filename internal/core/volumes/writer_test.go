package volumes

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// seen is what a container would see in a volume directory: every visible
// path (through the links) with its content and mode, and the visible
// top-level names.
type seen struct {
	Files map[string]string
	Modes map[string]os.FileMode
	Names []string
}

func look(t *testing.T, dir string) seen {
	t.Helper()
	s := seen{Files: map[string]string{}, Modes: map[string]os.FileMode{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		s.Names = append(s.Names, e.Name())
		if e.Type()&fs.ModeSymlink == 0 {
			t.Errorf("%s is not a symbolic link", e.Name())
		}
	}
	target, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, target)
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		// Read it the way a container does: through the visible name.
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		info, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		s.Files[rel] = string(b)
		s.Modes[rel] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWriteAtomic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 11, 24, 5, 0, 0, 0, time.UTC)

	// First write.
	changed, err := writeAtomic(dir, Payload{
		"a":       {Data: []byte("one"), Mode: 0o644},
		"sub/b":   {Data: []byte("two"), Mode: 0o400},
		"sub/c/d": {Data: []byte("three"), Mode: 0o600},
	}, nil, now)
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, err %v", changed, err)
	}
	want := seen{
		Files: map[string]string{"a": "one", "sub/b": "two", "sub/c/d": "three"},
		Modes: map[string]os.FileMode{"a": 0o644, "sub/b": 0o400, "sub/c/d": 0o600},
		Names: []string{"a", "sub"},
	}
	if diff := cmp.Diff(want, look(t, dir)); diff != "" {
		t.Errorf("after first write (-want +got):\n%s", diff)
	}
	first, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil || !strings.HasPrefix(first, "..2026_11_24_05_00_00.") {
		t.Fatalf("..data -> %q, %v; want a timestamped directory", first, err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "a")); target != "..data/a" {
		t.Errorf("a -> %q, want ..data/a", target)
	}

	// The same payload again: nothing is rewritten.
	changed, err = writeAtomic(dir, Payload{
		"a":       {Data: []byte("one"), Mode: 0o644},
		"sub/b":   {Data: []byte("two"), Mode: 0o400},
		"sub/c/d": {Data: []byte("three"), Mode: 0o600},
	}, nil, now.Add(time.Minute))
	if err != nil || changed {
		t.Fatalf("same payload: changed %v, err %v", changed, err)
	}
	if again, _ := os.Readlink(filepath.Join(dir, dataLink)); again != first {
		t.Errorf("..data moved to %q for an unchanged payload", again)
	}

	// An update: a changed value, a changed mode, a removed key, a new one.
	changed, err = writeAtomic(dir, Payload{
		"a": {Data: []byte("uno"), Mode: 0o440},
		"e": {Data: []byte("new"), Mode: 0o644},
	}, nil, now.Add(2*time.Minute))
	if err != nil || !changed {
		t.Fatalf("update: changed %v, err %v", changed, err)
	}
	want = seen{
		Files: map[string]string{"a": "uno", "e": "new"},
		Modes: map[string]os.FileMode{"a": 0o440, "e": 0o644},
		Names: []string{"a", "e"},
	}
	if diff := cmp.Diff(want, look(t, dir)); diff != "" {
		t.Errorf("after update (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	var hidden []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			hidden = append(hidden, e.Name())
		}
	}
	second, _ := os.Readlink(filepath.Join(dir, dataLink))
	if diff := cmp.Diff([]string{second, dataLink}, hidden); diff != "" || second == first {
		t.Errorf("hidden entries (-want +got):\n%s (first payload directory %s)", diff, first)
	}

	// An empty payload leaves an empty volume.
	if _, err := writeAtomic(dir, Payload{}, nil, now.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(seen{Files: map[string]string{}, Modes: map[string]os.FileMode{}}, look(t, dir)); diff != "" {
		t.Errorf("after empty payload (-want +got):\n%s", diff)
	}
}

func TestWriteAtomicFSGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "chown needs root")
	}
	dir := t.TempDir()
	gid := int64(2000)
	uid := int64(1000)
	if _, err := writeAtomic(dir, Payload{"token": {Data: []byte("t"), Mode: 0o600, UID: &uid}}, &gid, time.Now()); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscallStat)
	if got := [3]int64{int64(st.Uid), int64(st.Gid), int64(info.Mode().Perm())}; got != [3]int64{1000, 2000, 0o640} {
		t.Errorf("uid, gid, mode = %v, want [1000 2000 0640]", got)
	}
	// The fsGroup's bits count when comparing: an unchanged payload stays.
	changed, err := writeAtomic(dir, Payload{"token": {Data: []byte("t"), Mode: 0o600, UID: &uid}}, &gid, time.Now())
	if err != nil || changed {
		t.Errorf("same payload with fsGroup: changed %v, err %v", changed, err)
	}
}

func TestWriteAtomicRejectsBadPaths(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "/abs", "../out", "a/../../out", "..data", "..x", strings.Repeat("n", 256)} {
		dir := t.TempDir()
		if _, err := writeAtomic(dir, Payload{p: {Data: []byte("x"), Mode: 0o644}}, nil, time.Now()); err == nil {
			t.Errorf("path %q: no error", p)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("path %q: the volume has %d entries after a refused payload", p, len(entries))
		}
	}
}

// TestSetOwnership: the kubelet's ownership change for a pod's fsGroup —
// the group on everything, read and write for it (read only for a
// read-only volume), directories also search and set-group-ID.
func TestSetOwnership(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "chown needs root")
	}
	for _, tc := range []struct {
		readOnly          bool
		wantFile, wantDir os.FileMode
	}{
		{false, 0o660, os.ModeDir | os.ModeSetgid | 0o770},
		{true, 0o640, os.ModeDir | os.ModeSetgid | 0o750},
	} {
		root := t.TempDir()
		if err := os.Chmod(root, 0o700); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(root, "f")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("f", filepath.Join(root, "link")); err != nil {
			t.Fatal(err)
		}
		if err := SetOwnership(root, 2000, tc.readOnly); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			path string
			want os.FileMode
		}{{root, tc.wantDir}, {file, tc.wantFile}} {
			info, err := os.Stat(c.path)
			if err != nil {
				t.Fatal(err)
			}
			if gid := info.Sys().(*syscallStat).Gid; gid != 2000 || info.Mode() != c.want {
				t.Errorf("readOnly %v: %s: gid %d mode %v, want 2000 %v", tc.readOnly, filepath.Base(c.path), gid, info.Mode(), c.want)
			}
		}
		info, err := os.Lstat(filepath.Join(root, "link"))
		if err != nil {
			t.Fatal(err)
		}
		if gid := info.Sys().(*syscallStat).Gid; gid != 2000 {
			t.Errorf("readOnly %v: link gid %d, want 2000", tc.readOnly, gid)
		}
	}
}
