package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const imagegcExample = "../../examples/imagegc/"

func exampleArgs(extra ...string) []string {
	return append([]string{"explain", "imagegc",
		"--images", imagegcExample + "images.json",
		"--containers", imagegcExample + "containers.json",
		"--now", "2025-11-21T12:00:00Z",
	}, extra...)
}

func explainImageGCJSON(t *testing.T, args ...string) imageGCDoc {
	t.Helper()
	code, out, errOut := runCLI(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc imageGCDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return doc
}

// tag returns the first tag of the example image with this ID.
func keptByTag(t *testing.T, doc imageGCDoc) map[string]string {
	t.Helper()
	b, err := os.ReadFile(imagegcExample + "images.json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Images []struct {
			ID       string   `json:"id"`
			RepoTags []string `json:"repoTags"`
		} `json:"images"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, img := range list.Images {
		tags[img.ID] = img.RepoTags[0]
	}
	out := map[string]string{}
	for _, k := range doc.Kept {
		out[tags[k.ID]] = k.Reason
	}
	return out
}

func removedTags(doc imageGCDoc) []string {
	var out []string
	for _, r := range doc.Remove {
		out = append(out, r.Tags[0]+" "+r.Reason)
	}
	return out
}

func TestExplainImageGCExample(t *testing.T) {
	t.Parallel()
	doc := explainImageGCJSON(t, exampleArgs(
		"--imagefs", imagegcExample+"imagefs.json", "--capacity", "20Gi", "--available", "2Gi",
		"--records", imagegcExample+"records.json", "--config", imagegcExample+"kubelet-config.yaml",
		"--sandbox-image", "registry.k8s.io/pause:3.10")...)
	if doc.UsagePercent != 90 || doc.BytesToFree != 2<<30 {
		t.Errorf("usage %d%%, bytes to free %d; want 90%%, %d", doc.UsagePercent, doc.BytesToFree, 2<<30)
	}
	wantRemove := []string{
		"docker.io/library/busybox:1.36 space",
		"registry.example.com/shop/app:v1 space",
		"docker.io/library/redis:7.4 space",
		"registry.example.com/ml/model-server:2.1 space",
	}
	if diff := cmp.Diff(wantRemove, removedTags(doc)); diff != "" {
		t.Errorf("remove (-want +got):\n%s", diff)
	}
	wantKept := map[string]string{
		"registry.example.com/shop/app:v2":  "in use", // its container has exited but still exists
		"docker.io/library/nginx:1.27":      "in use",
		"registry.k8s.io/pause:3.10":        "sandbox",
		"docker.io/nicolaka/netshoot:v0.13": "too young",
	}
	if diff := cmp.Diff(wantKept, keptByTag(t, doc)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if want := int64((4 + 1200 + 140 + 900) << 20); doc.Freed != want {
		t.Errorf("freed = %d, want %d", doc.Freed, want)
	}
}

func TestExplainImageGCVariants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	summary := filepath.Join(dir, "summary.json")
	// 10Gi capacity, 0.5Gi available: 95% used, free 1.5Gi to reach 80%.
	if err := os.WriteFile(summary, []byte(`{"node": {"nodeName": "n1", "runtime": {"imageFs": {"capacityBytes": 10737418240, "availableBytes": 536870912}}}, "pods": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	maxAge := filepath.Join(dir, "maxage.yaml")
	if err := os.WriteFile(maxAge, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageMaximumGCAge: 96h\nimageGCHighThresholdPercent: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantUsage  int
		wantRemove []string
		wantKept   map[string]string
	}{
		{
			name:      "summary input, no records: every image long ago and never used; pinned pause kept",
			args:      exampleArgs("--imagefs", summary),
			wantUsage: 95,
			// All unused images tie (never used, detected long ago): by ID, until
			// 1536Mi are freed (1200 + 180 + 140 + 900).
			wantRemove: []string{
				"registry.example.com/shop/app:v1 space",
				"docker.io/nicolaka/netshoot:v0.13 space",
				"docker.io/library/redis:7.4 space",
				"registry.example.com/ml/model-server:2.1 space",
			},
			wantKept: map[string]string{
				"docker.io/library/nginx:1.27":     "in use",
				"registry.example.com/shop/app:v2": "in use",
				"registry.k8s.io/pause:3.10":       "pinned",
				"docker.io/library/busybox:1.36":   "not needed",
			},
		},
		{
			name:      "maximum age removes regardless of usage",
			args:      exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "100Gi", "--records", imagegcExample+"records.json", "--config", maxAge),
			wantUsage: 4,
			// netshoot, pulled a minute ago and never used, has expired: as in the
			// kubelet the age counts from the last use and the minimum age does not
			// protect it.
			wantRemove: []string{
				"docker.io/library/busybox:1.36 age",
				"docker.io/nicolaka/netshoot:v0.13 age",
				"registry.example.com/shop/app:v1 age",
			},
			wantKept: map[string]string{
				"docker.io/library/nginx:1.27":             "in use",
				"registry.k8s.io/pause:3.10":               "pinned",
				"docker.io/library/redis:7.4":              "below threshold",
				"registry.example.com/ml/model-server:2.1": "below threshold",
				"registry.example.com/shop/app:v2":         "in use",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := explainImageGCJSON(t, tc.args...)
			if doc.UsagePercent != tc.wantUsage {
				t.Errorf("usage = %d, want %d", doc.UsagePercent, tc.wantUsage)
			}
			if diff := cmp.Diff(tc.wantRemove, removedTags(doc)); diff != "" {
				t.Errorf("remove (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKept, keptByTag(t, doc)); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
		})
	}
}

// Exabyte image filesystems: available*100 and capacity*(100-low) exceed an
// int64, which once reported 100% used yet 0 bytes to free.
func TestExplainImageGCExabytes(t *testing.T) {
	t.Parallel()
	summary := filepath.Join(t.TempDir(), "summary.json")
	// The largest capacity a Summary may report (2^63-1), 1Gi available.
	if err := os.WriteFile(summary, []byte(`{"node": {"nodeName": "n1", "runtime": {"imageFs": {"capacityBytes": 9223372036854775807, "availableBytes": 1073741824}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		args        []string
		wantUsage   int
		wantToFree  int64
		wantRemoved int
	}{
		{
			name:      "4Ei capacity, 3.8Gi used",
			args:      exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "4Ei"),
			wantUsage: 1,
		},
		{
			// 4Ei*20/100 - 1Gi = 922337203685477580 - 1073741824.
			name:        "4Ei capacity, 1Gi available",
			args:        exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "4Ei", "--available", "1Gi"),
			wantUsage:   100,
			wantToFree:  922337203685477580 - 1<<30,
			wantRemoved: 5, // every unused image, and still short
		},
		{
			// (2^63-1)*20/100 - 1Gi = 1844674407370955161 - 1073741824.
			name:        "summary with a 2^63-1 byte capacity",
			args:        exampleArgs("--imagefs", summary),
			wantUsage:   100,
			wantToFree:  1844674407370955161 - 1<<30,
			wantRemoved: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := explainImageGCJSON(t, tc.args...)
			got := []int64{int64(doc.UsagePercent), doc.BytesToFree, int64(len(doc.Remove))}
			want := []int64{int64(tc.wantUsage), tc.wantToFree, int64(tc.wantRemoved)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[usagePercent bytesToFree len(remove)] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExplainImageGCTable(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "20Gi", "--available", "2Gi",
		"--records", imagegcExample+"records.json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, pattern := range []string{
		`^Image filesystem: 90% used \(capacity 20Gi, available 2Gi\); high threshold 85%, low 80%$`,
		`^Bytes to free: 2147483648 \(2Gi\) to reach 80%$`,
		`^1\s+d55432289a2f\s+docker.io/library/busybox:1.36\s+4Mi\s+space: never used$`,
		`^4\s+\S+\s+registry.example.com/ml/model-server:2.1\s+900Mi\s+space: last used 2025-11-19T12:00:00Z$`,
		`^\S+\s+registry.k8s.io/pause:3.10\s+736Ki\s+pinned$`,
		`^Would free: 2353004544 \(2244Mi\)$`,
	} {
		if !regexpLine(out, pattern) {
			t.Errorf("output has no line matching %q:\n%s", pattern, out)
		}
	}
}

// When the eligible images cannot bring usage down to the low threshold, the
// table ends with the kubelet's FreeDiskSpaceFailed message.
func TestExplainImageGCNotEnough(t *testing.T) {
	t.Parallel()
	// 20Gi, 100Mi available: 100% used, 3996Mi to free; 2244Mi eligible.
	code, out, errOut := runCLI(t, exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "20Gi", "--available", "100Mi",
		"--records", imagegcExample+"records.json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, pattern := range []string{
		`^Would free: 2353004544 \(2244Mi\)$`,
		`^Less than wanted: the kubelet emits FreeDiskSpaceFailed: ` + regexp.QuoteMeta(
			"Insufficient free disk space on the node's image filesystem (100% of 20.0 GiB used). "+
				"Failed to free sufficient space by deleting unused images (freed 2353004544 bytes). "+
				"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.") + `$`,
	} {
		if !regexpLine(out, pattern) {
			t.Errorf("output has no line matching %q:\n%s", pattern, out)
		}
	}
	code, out, errOut = runCLI(t, exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "20Gi", "--available", "2Gi",
		"--records", imagegcExample+"records.json")...)
	if code != 0 || strings.Contains(out, "FreeDiskSpaceFailed") {
		t.Errorf("enough freed: exit %d, output mentions FreeDiskSpaceFailed:\n%s%s", code, out, errOut)
	}
}

func TestExplainImageGCBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badJSON := write("bad.json", "{\"images\": [\n{\"id\": 12}\n]}")
	noID := write("noid.json", `{"images": [{"size": "3"}]}`)
	badCfg := write("bad.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 80\n")
	zero := write("zero.json", `{"node": {"runtime": {"imageFs": {"capacityBytes": 0, "availableBytes": 0}}}}`)
	other := write("other.json", `{"foo": 1}`)
	badRecords := write("records.json", `{"sha256:x": {"firstSeen": "2025-01-01T00:00:00Z"}}`)
	badTime := write("badtime.json", `{"d55432289a2f": {"firstDetected": "yesterday"}}`)
	hugeSummary := write("huge-summary.json", `{"node": {"nodeName": "n1", "runtime": {"imageFs": {"capacityBytes": 18446744073709551615, "availableBytes": 1}}}}`)
	hugeUsed := write("huge-used.json", `{"status": {"imageFilesystems": [{"usedBytes": {"value": "18446744073709551615"}}]}}`)
	hugeUsedOld := write("huge-used-old.json", `{"status": {"usedBytes": {"value": "9223372036854775808"}}}`)
	fsArgs := []string{"--imagefs", imagegcExample + "imagefs.json", "--capacity", "20Gi"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing flags", []string{"explain", "imagegc", "--images", imagegcExample + "images.json"}, "--images, --containers and --imagefs are required"},
		{"malformed images", append([]string{"explain", "imagegc", "--images", badJSON, "--containers", imagegcExample + "containers.json"}, fsArgs...), badJSON},
		{"image without id", append([]string{"explain", "imagegc", "--images", noID, "--containers", imagegcExample + "containers.json"}, fsArgs...), "images[0]: no id"},
		{"missing file", append([]string{"explain", "imagegc", "--images", filepath.Join(dir, "nope.json"), "--containers", imagegcExample + "containers.json"}, fsArgs...), "no such file"},
		{"invalid policy", exampleArgs(append(fsArgs, "--config", badCfg)...), "imageGCLowThresholdPercent"},
		{"bad now", append(exampleArgs(fsArgs...), "--now", "yesterday"), "--now"},
		{"crictl imagefsinfo without capacity", exampleArgs("--imagefs", imagegcExample+"imagefs.json"), "--capacity"},
		{"bad capacity", exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "lots"), "--capacity"},
		{"zero capacity", exampleArgs("--imagefs", zero), "InvalidDiskCapacity"},
		{"unknown imagefs format", exampleArgs("--imagefs", other), "neither crictl imagefsinfo"},
		{"unknown records field", exampleArgs(append(fsArgs, "--records", badRecords)...), "firstSeen"},
		{"bad record time", exampleArgs(append(fsArgs, "--records", badTime)...), `[d55432289a2f].firstDetected: "yesterday": not an RFC3339 time`},
		{"available above capacity", exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "10Gi", "--available", "20Gi"), `--available: "20Gi" exceeds --capacity "10Gi"`},
		{"bad output", exampleArgs(append(fsArgs, "-o", "yaml")...), "--output"},
		{"capacity beyond int64", exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "16Ei"), `--capacity "16Ei": too large`},
		{"available beyond int64", exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "4Ei", "--available", "1e30"), `--available "1e30": too large`},
		{"summary capacity beyond int64", exampleArgs("--imagefs", hugeSummary), "huge-summary.json: node.runtime.imageFs.capacityBytes: 18446744073709551615: too large"},
		{"crictl used bytes beyond int64", exampleArgs("--imagefs", hugeUsed, "--capacity", "4Ei"), "huge-used.json: status.imageFilesystems[0].usedBytes.value: 18446744073709551615: too large"},
		{"old crictl used bytes beyond int64", exampleArgs("--imagefs", hugeUsedOld, "--capacity", "4Ei"), "huge-used-old.json: status.usedBytes.value: 9223372036854775808: too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, exitUsage, out, errOut)
			}
			if lines := strings.Count(strings.TrimSpace(errOut), "\n"); lines != 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr = %q, want one line containing %q", errOut, tc.want)
			}
		})
	}
}

// Records match images by full ID, by ID without "sha256:", or by a unique prefix
// of 12+ digits (crictl's table IDs); unknown ones are reported and ignored.
func TestExplainImageGCRecordKeys(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "records.json")
	// busybox (d55432289a2f...) first detected a minute before --now: too young.
	rec := `{"d55432289a2f": {"firstDetected": "2025-11-21T11:59:00Z"}, "sha256:0000000000000000": {"lastUsed": "2025-11-21T11:00:00Z"}}`
	if err := os.WriteFile(p, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, exampleArgs("--imagefs", imagegcExample+"imagefs.json", "--capacity", "20Gi", "--available", "2Gi", "--records", p, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := `no image matches "sha256:0000000000000000"`; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
	var doc imageGCDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if got := keptByTag(t, doc)["docker.io/library/busybox:1.36"]; got != "too young" {
		t.Errorf("busybox kept as %q, want too young (its record matched by short ID)", got)
	}
}
