package imagegc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFileStoreRoundTrip(t *testing.T) {
	t.Parallel()
	s := FileStore{Path: filepath.Join(t.TempDir(), "images.json")}
	got, err := s.Load()
	if err != nil || got != nil {
		t.Fatalf("Load of a missing file = %v, %v; want nil, nil", got, err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	want := map[string]*Record{
		"sha256:a": {FirstDetected: t0, LastUsed: t0.Add(time.Hour), Size: 42, Tags: []string{"a:1"}},
		"sha256:b": {Size: 7, Pinned: true, Digests: []string{"b@sha256:x"}},
	}
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err = s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestFileStoreCorruptMovedAside(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content, wantErr string }{
		{"not json", "{nope", "invalid character"},
		{"other version", `{"version":9,"records":{}}`, "field version: 9, want 1"},
		{"null record", `{"version":1,"records":{"x":null}}`, `field records: empty entry "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "images.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s := FileStore{Path: path, Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }}
			_, err := s.Load()
			if !errors.Is(err, ErrCorruptRecords) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load error = %v; want ErrCorruptRecords naming %s and %q", err, path, tc.wantErr)
			}
			aside := path + ".corrupt-20260101T000000.000000000Z"
			if b, err := os.ReadFile(aside); err != nil || string(b) != tc.content {
				t.Errorf("moved-aside file %s = %q, %v; want the old content", aside, b, err)
			}
			if got, err := s.Load(); got != nil || err != nil {
				t.Errorf("Load after moving aside = %v, %v; want a fresh start", got, err)
			}
		})
	}
}

// TestManagerRecordsSurviveRestart: a Manager with a store saves its records
// at each detection; a new Manager on the same store starts from them, so an
// image first detected before the restart keeps that time, and one new since
// then counts as new (not "there before").
func TestManagerRecordsSurviveRestart(t *testing.T) {
	t.Parallel()
	store := FileStore{Path: filepath.Join(t.TempDir(), "images.json")}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f1 := newConfiguredFixture(t, Config{Start: now}, map[string]uint64{"a": 10})
	f1.m.deps.Store = store
	ctx := t.Context()
	if err := f1.m.Detect(ctx, now); err != nil { // first detection: "a" there before, zero time
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	f1.images.SetFakeImages([]string{"a", "b"})
	if err := f1.m.Detect(ctx, now); err != nil { // "b" first seen at 01:00
		t.Fatal(err)
	}
	saved, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"a": {}, "b": now}
	first := func(recs map[string]*Record) map[string]time.Time {
		out := map[string]time.Time{}
		for id, r := range recs {
			out[id] = r.FirstDetected
		}
		return out
	}
	if diff := cmp.Diff(want, first(saved)); diff != "" {
		t.Fatalf("saved first detections (-want +got):\n%s", diff)
	}

	now = now.Add(time.Hour)
	f2 := newConfiguredFixture(t, Config{Start: now}, map[string]uint64{"a": 10, "b": 10, "c": 10})
	m2, err := New(f2.m.cfg, func() Deps { d := f2.m.deps; d.Store = store; return d }())
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Detect(ctx, now); err != nil {
		t.Fatal(err)
	}
	want["c"] = now
	if diff := cmp.Diff(want, first(m2.records)); diff != "" {
		t.Errorf("first detections after restart (-want +got):\n%s", diff)
	}
}
