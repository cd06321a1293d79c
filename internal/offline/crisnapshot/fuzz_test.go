package crisnapshot

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// FuzzParse feeds the same bytes to each crictl snapshot parser (images,
// containers, image filesystem, GC records): none panics, every error is a
// one-line decode.ErrBadInput, accepted images have distinct IDs and sizes
// below 2^63, an accepted image filesystem has no negative bytes, and a GC
// pass planned on what was accepted has no negative sums.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("../../../examples/imagegc/*.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"status": {"imageFilesystems": [{"usedBytes": {"value": "-1"}}]}}`))
	f.Add([]byte(`{"status": {"usedBytes": {"value": "18446744073709551615"}}}`))
	f.Add([]byte(`{"images": [{"id": "sha256:a", "size": "9223372036854775807"}, {"id": "a"}]}`))
	f.Add([]byte(`{"node": {"nodeName": "n", "runtime": {"imageFs": {"capacityBytes": 10, "availableBytes": 1}}}}`))
	f.Add([]byte(`{"sha256:a": {"firstDetected": "2025-01-01T00:00:00Z", "lastUsed": "x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(what string, err error) {
			t.Helper()
			if err == nil {
				return
			}
			if !errors.Is(err, decode.ErrBadInput) {
				t.Fatalf("%s: error %q is not ErrBadInput", what, err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("%s: error %q is not one line", what, err)
			}
		}
		imgs, err := ParseImages("fuzz.json", data)
		check("images", err)
		seen := map[string]bool{}
		for _, img := range imgs {
			id := strings.TrimPrefix(img.GetId(), "sha256:")
			if img.GetId() == "" || seen[id] || img.GetSize() > 1<<63-1 {
				t.Fatalf("accepted image %v (seen %v)", img, seen[id])
			}
			seen[id] = true
		}
		ctrs, err := ParseContainers("fuzz.json", data)
		check("containers", err)
		fs, err := ParseImageFs("fuzz.json", data)
		check("imagefs", err)
		if err == nil && (fs.UsedBytes < 0 || fs.Stats.CapacityBytes < 0 || fs.Stats.AvailableBytes < 0) {
			t.Fatalf("negative image filesystem %+v", fs)
		}
		recs, err := ParseRecords("fuzz.json", data, imgs, new(bytes.Buffer))
		check("records", err)
		n := Node{Images: imgs, Containers: ctrs, Records: recs, Fs: imagegc.FsStats{CapacityBytes: 1000, AvailableBytes: 10}}
		if fs.FromSummary && fs.Stats.CapacityBytes > 0 {
			n.Fs = fs.Stats
		}
		plan, err := n.PlanImageGC(imagegc.DefaultPolicy(), "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		if err == nil && (plan.Freed < 0 || plan.BytesToFree < 0) {
			t.Fatalf("plan with negative sums: freed %d, to free %d", plan.Freed, plan.BytesToFree)
		}
	})
}
