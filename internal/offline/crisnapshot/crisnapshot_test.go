package crisnapshot

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/imagegc"
)

const example = "../../../examples/imagegc/"

// write writes content to a file name in a temp dir and returns its path.
func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseImagesAndContainers(t *testing.T) {
	t.Parallel()
	imgs, err := loadImages(example + "images.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 8 || imgs[1].GetRepoTags()[0] != "docker.io/library/nginx:1.27" || imgs[1].GetSize() != 73400320 {
		t.Errorf("images: %d, second %v", len(imgs), imgs[1])
	}
	ctrs, err := loadContainers(example + "containers.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs) != 2 || ctrs[1].GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("containers: %v", ctrs)
	}

	for _, tc := range []struct {
		name, content, want string
	}{
		{"no id", `{"images": [{"size": "3"}]}`, "images[0]: no id"},
		{"malformed", "{\"images\": [\n{\"id\": 12}\n]}", "invalid value for string field id"},
		{"size of 2^63", `{"images": [{"id": "a", "size": "1"}, {"id": "b", "size": "9223372036854775808"}]}`, "images[1].size: 9223372036854775808: too large"},
		{"size of 2^64-1", `{"images": [{"id": "a", "size": "18446744073709551615"}]}`, "images[0].size: 18446744073709551615: too large"},
		{"size of 2^63-1", `{"images": [{"id": "a", "size": "9223372036854775807"}]}`, ""},
		{"unknown fields ignored", `{"images": [{"id": "a", "newField": 1}], "other": true}`, ""},
	} {
		path := write(t, "images.json", tc.content)
		_, err := loadImages(path)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: loadImages = %v, want an error naming %s and %q", tc.name, err, path, tc.want)
		}
	}
	if _, err := loadContainers(filepath.Join(t.TempDir(), "none.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("loadContainers(missing) = %v, want ErrNotExist", err)
	}
}

func TestParseRecords(t *testing.T) {
	t.Parallel()
	images := []*runtimeapi.Image{
		{Id: "sha256:aaaaaaaaaaaa1111"},
		{Id: "sha256:aaaaaaaaaaaa2222"},
		{Id: "sha256:bbbbbbbbbbbbbbbb"},
		{Id: "plain-id"},
	}
	day := func(d int) time.Time { return time.Date(2025, 11, d, 12, 0, 0, 0, time.UTC) }
	path := write(t, "records.json", `{
		"sha256:aaaaaaaaaaaa1111": {"firstDetected": "2025-11-01T12:00:00Z", "lastUsed": "2025-11-02T12:00:00Z"},
		"aaaaaaaaaaaa2222": {"lastUsed": "2025-11-03T12:00:00Z"},
		"bbbbbbbbbbbb": {"firstDetected": "2025-11-04T12:00:00Z"},
		"aaaaaaaaaaaa": {"firstDetected": "2025-11-05T12:00:00Z"},
		"bbbbbbbbbbb": {},
		"plain-id": {}
	}`)
	var warnings bytes.Buffer
	got, err := loadRecords(path, images, &warnings)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]imagegc.Record{
		"sha256:aaaaaaaaaaaa1111": {FirstDetected: day(1), LastUsed: day(2)}, // full ID
		"sha256:aaaaaaaaaaaa2222": {LastUsed: day(3)},                        // without sha256:
		"sha256:bbbbbbbbbbbbbbbb": {FirstDetected: day(4)},                   // unique 12-digit prefix
		"plain-id":                {},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	// An ambiguous prefix and one shorter than 12 digits match nothing.
	wantWarnings := "warning: " + path + `: no image matches "aaaaaaaaaaaa"; its record is ignored` + "\n" +
		"warning: " + path + `: no image matches "bbbbbbbbbbb"; its record is ignored` + "\n"
	if diff := cmp.Diff(wantWarnings, warnings.String()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name, content, want string
	}{
		{"not an object", `[1]`, `: want {IMAGE_ID: {"firstDetected": RFC3339, "lastUsed": RFC3339}}: `},
		{"record not an object", `{"plain-id": 3}`, ": [plain-id]: want an object with firstDetected and lastUsed"},
		{"unknown field", `{"plain-id": {"firstSeen": "2025-01-01T00:00:00Z"}}`, `: [plain-id]: unknown field "firstSeen" (want firstDetected, lastUsed)`},
		{"time not a string", `{"plain-id": {"lastUsed": 5}}`, ": [plain-id].lastUsed: 5: want an RFC3339 time string"},
		{"bad time", `{"plain-id": {"firstDetected": "yesterday"}}`, `: [plain-id].firstDetected: "yesterday": not an RFC3339 time`},
	} {
		path := write(t, "records.json", tc.content)
		_, err := loadRecords(path, images, &warnings)
		if err == nil || !strings.HasPrefix(err.Error(), path+tc.want) {
			t.Errorf("%s: loadRecords = %v, want %s%s", tc.name, err, path, tc.want)
		}
	}
}

func TestLoadImageFs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content string
		want          ImageFs
		wantErr       string // after the path
	}{
		{
			name:    "summary",
			content: `{"node": {"nodeName": "n1", "runtime": {"imageFs": {"capacityBytes": 1000, "availableBytes": 300}}}}`,
			want:    ImageFs{FromSummary: true, Stats: imagegc.FsStats{CapacityBytes: 1000, AvailableBytes: 300}},
		},
		{
			name:    "summary without image filesystem",
			content: `{"node": {"nodeName": "n1", "runtime": {"imageFs": {"capacityBytes": 1000}}}}`,
			wantErr: ": node.runtime.imageFs has no capacityBytes/availableBytes",
		},
		{
			name:    "summary capacity beyond int64",
			content: `{"node": {"nodeName": "n1", "runtime": {"imageFs": {"capacityBytes": 18446744073709551615, "availableBytes": 1}}}}`,
			wantErr: ": node.runtime.imageFs.capacityBytes: 18446744073709551615: too large",
		},
		{
			name:    "crictl 1.29+",
			content: `{"status": {"imageFilesystems": [{"usedBytes": {"value": "4089446400"}}], "containerFilesystems": []}}`,
			want:    ImageFs{UsedBytes: 4089446400},
		},
		{
			name:    "older crictl",
			content: `{"status": {"timestamp": "1", "usedBytes": {"value": "1000"}}}`,
			want:    ImageFs{UsedBytes: 1000},
		},
		{
			name:    "crictl used bytes beyond int64",
			content: `{"status": {"imageFilesystems": [{"usedBytes": {"value": "18446744073709551615"}}]}}`,
			wantErr: ": status.imageFilesystems[0].usedBytes.value: 18446744073709551615: too large",
		},
		{
			name:    "older crictl used bytes beyond int64",
			content: `{"status": {"usedBytes": {"value": "9223372036854775808"}}}`,
			wantErr: ": status.usedBytes.value: 9223372036854775808: too large",
		},
		{
			name:    "crictl without used bytes",
			content: `{"status": {}}`,
			wantErr: ": status has no image filesystem with usedBytes",
		},
		{
			name:    "neither",
			content: `{"foo": 1}`,
			wantErr: `: neither crictl imagefsinfo JSON (no "status") nor a kubelet Summary (no "node")`,
		},
		{
			name:    "not JSON",
			content: `nope`,
			wantErr: ": invalid character",
		},
	} {
		path := write(t, "imagefs.json", tc.content)
		got, err := loadImageFs(path)
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), path+tc.wantErr) {
				t.Errorf("%s: loadImageFs = %+v, %v; want error %s%s", tc.name, got, err, path, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestPlanImageGC(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 11, 21, 12, 0, 0, 0, time.UTC)
	n := Node{
		Images: []*runtimeapi.Image{
			{Id: "sha256:pause", RepoTags: []string{"pause:3.10"}, Size: 10},
			{Id: "sha256:running", Size: 100},
			{Id: "sha256:exited", Size: 100},
			{Id: "sha256:old", Size: 100},
			{Id: "sha256:recent", Size: 100},
			{Id: "sha256:young", Size: 100},
		},
		Containers: []*runtimeapi.Container{
			{Id: "c1", ImageRef: "sha256:running", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			{Id: "c2", ImageId: "sha256:exited", State: runtimeapi.ContainerState_CONTAINER_EXITED},
		},
		Records: map[string]imagegc.Record{
			"sha256:recent": {LastUsed: now.Add(-time.Hour)},
			"sha256:young":  {FirstDetected: now.Add(-time.Minute)},
		},
		Fs: imagegc.FsStats{CapacityBytes: 1000, AvailableBytes: 100}, // 90%: free 100 to reach 80%
	}
	plan, err := n.PlanImageGC(imagegc.DefaultPolicy(), "pause:3.10", now)
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, r := range plan.Remove {
		removed = append(removed, r.ID)
	}
	kept := map[string]imagegc.KeepReason{}
	for _, k := range plan.Kept {
		kept[k.ID] = k.Reason
	}
	if diff := cmp.Diff([]string{"sha256:old"}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	wantKept := map[string]imagegc.KeepReason{
		"sha256:pause":   imagegc.KeepSandbox, // by tag
		"sha256:running": imagegc.KeepInUse,
		"sha256:exited":  imagegc.KeepInUse, // an exited container keeps its image
		"sha256:recent":  imagegc.KeepNotNeeded,
		"sha256:young":   imagegc.KeepTooYoung,
	}
	if diff := cmp.Diff(wantKept, kept); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if n.Records["sha256:recent"].LastUsed != now.Add(-time.Hour) || len(n.Records) != 2 {
		t.Errorf("PlanImageGC modified the records: %v", n.Records)
	}

	n.Fs = imagegc.FsStats{}
	if _, err := n.PlanImageGC(imagegc.DefaultPolicy(), "", now); !errors.Is(err, imagegc.ErrInvalidCapacity) {
		t.Errorf("zero capacity: %v, want ErrInvalidCapacity", err)
	}
}
