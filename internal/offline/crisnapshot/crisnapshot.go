// Package crisnapshot reads a snapshot of a node's CRI state as crictl prints
// it (images, containers, the image filesystem), or the image filesystem from
// the kubelet's Summary, plus image GC records, validates it, and replays an
// image GC pass on it. It is what nodekeeper explain imagegc runs on.
//
// Errors name the file and, where there is one, the field and value. The
// package keeps no state; its functions may be called from any goroutine.
package crisnapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/offline/snapshot"
)

// Node is a snapshot an image GC pass can be replayed on.
type Node struct {
	// Images are the runtime's images (ParseImages).
	Images []*runtimeapi.Image
	// Containers are all the runtime's containers, exited ones included
	// (ParseContainers); each keeps its image.
	Containers []*runtimeapi.Container
	// Records are the image GC records by image ID (ParseRecords). An image
	// without one was first detected at an unknown time in the past and never
	// used.
	Records map[string]imagegc.Record
	// Fs is the image filesystem's capacity and available bytes.
	Fs imagegc.FsStats
}

// PlanImageGC replays one periodic image GC pass at now with policy p on the
// snapshot: the images of all containers and sandboxImage (when not empty) are
// in use. The maximum age applies as if GC had been running longer than it (a
// snapshot has no start time). It returns imagegc.Decide's plan or error
// (imagegc.ErrInvalidCapacity for a zero capacity). It does not modify n.
func (n Node) PlanImageGC(p imagegc.Policy, sandboxImage string, now time.Time) (imagegc.Plan, error) {
	refs := make([]string, 0, len(n.Containers))
	for _, c := range n.Containers {
		refs = append(refs, imagegc.ContainerImageRef(c))
	}
	inUse := imagegc.NewInUse([]string{sandboxImage}, refs)
	records := make(map[string]*imagegc.Record, len(n.Images))
	for id, r := range n.Records {
		records[id] = &r
	}
	imagegc.Detect(records, n.Images, inUse, time.Time{}, now)
	return imagegc.Decide(records, inUse, n.Fs, p, time.Time{}, now)
}

// ParseImages parses b, 'crictl images -o json' output (a CRI
// ListImagesResponse) read from path, which errors name. Every image must
// have an ID and a size that fits an int64, and no two images the same ID,
// with or without "sha256:".
func ParseImages(path string, b []byte) ([]*runtimeapi.Image, error) {
	var imgs runtimeapi.ListImagesResponse
	if err := parseProtoJSON(path, b, &imgs); err != nil {
		return nil, err
	}
	seen := make(map[string]int, len(imgs.Images)) // ID without "sha256:" -> index
	for i, img := range imgs.Images {
		if img.GetId() == "" {
			return nil, decode.Badf(path, "images[%d]: no id", i)
		}
		// Merged, the two would count once in the plan and its sums.
		id := strings.TrimPrefix(img.GetId(), "sha256:")
		if first, dup := seen[id]; dup {
			return nil, decode.Badf(path, "images[%d].id: %s: the same image as images[%d].id: %s",
				i, decode.Quote(img.GetId()), first, decode.Quote(imgs.Images[first].GetId()))
		}
		seen[id] = i
		// The image GC keeps sizes in an int64; a larger one would wrap negative.
		if _, err := usedBytes(path, fmt.Sprintf("images[%d].size", i), img.GetSize()); err != nil {
			return nil, err
		}
	}
	return imgs.Images, nil
}

// ParseContainers parses b, 'crictl ps -a -o json' output (a CRI
// ListContainersResponse) read from path, which errors name.
func ParseContainers(path string, b []byte) ([]*runtimeapi.Container, error) {
	var ctrs runtimeapi.ListContainersResponse
	if err := parseProtoJSON(path, b, &ctrs); err != nil {
		return nil, err
	}
	return ctrs.Containers, nil
}

// parseProtoJSON decodes crictl's JSON (protobuf JSON) b, read from path, into
// m. Unknown fields are ignored: newer crictl versions add some. Malformed
// JSON is reported with its line and column (or as truncated).
func parseProtoJSON(path string, b []byte, m proto.Message) error {
	if err := jsonSyntax(path, b); err != nil {
		return err
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return decode.Badf(path, "%s", protoError(err))
	}
	return nil
}

// jsonSyntax returns bad input naming where b, read from path, is not valid
// JSON; nil when it is.
func jsonSyntax(path string, b []byte) error {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return decode.Badf(path, "%s", decode.SyntaxMessage(b, se.Offset, se.Error()))
	}
	return nil
}

// protoPosition is the position in a protojson error: "(line 1:5): ".
var protoPosition = regexp.MustCompile(`\(line \d+:\d+\): `)

// protoError words a protojson error without its "proto: " prefix, escaped.
func protoError(err error) string {
	return decode.Escape(strings.TrimPrefix(strings.Join(strings.Fields(err.Error()), " "), "proto: "))
}

// ParseRecords parses b, image GC records read from path (which errors name),
// {IMAGE_ID: {"firstDetected": RFC3339, "lastUsed": RFC3339}}, both fields
// optional, and returns them by the ID of the image in images they match. A key matches an image by its ID, with or
// without "sha256:", or by a unique prefix of at least 12 hex digits (as
// crictl's table prints IDs). A key that matches no image is reported on
// warnings and ignored, as the kubelet drops the records of vanished images.
func ParseRecords(path string, b []byte, images []*runtimeapi.Image, warnings io.Writer) (map[string]imagegc.Record, error) {
	if err := jsonSyntax(path, b); err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := decode.Lenient(b, &raw); err != nil {
		return nil, decode.Badf(path, "want {IMAGE_ID: {\"firstDetected\": RFC3339, \"lastUsed\": RFC3339}}: %v", err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]imagegc.Record, len(raw))
	for _, key := range keys {
		rec, err := parseRecord(path, key, raw[key])
		if err != nil {
			return nil, err
		}
		id, ok := matchImage(key, images)
		if !ok {
			fmt.Fprintf(warnings, "warning: %s: no image matches %s; its record is ignored\n", decode.Escape(path), decode.Quote(key))
			continue
		}
		out[id] = rec
	}
	return out, nil
}

// parseRecord parses the record of key in path.
func parseRecord(path, key string, raw json.RawMessage) (imagegc.Record, error) {
	k := decode.Escape(key)
	var fields map[string]json.RawMessage
	if err := decode.Lenient(raw, &fields); err != nil {
		return imagegc.Record{}, decode.Badf(path, "[%s]: want an object with firstDetected and lastUsed", k)
	}
	var rec imagegc.Record
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		v := fields[name]
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return imagegc.Record{}, decode.Badf(path, "[%s].%s: %s: want an RFC3339 time string", k, decode.Escape(name), decode.Escape(string(v)))
		}
		t, err := time.Parse(time.RFC3339, str)
		if err != nil {
			return imagegc.Record{}, decode.Badf(path, "[%s].%s: %s: not an RFC3339 time", k, decode.Escape(name), decode.Quote(str))
		}
		switch name {
		case "firstDetected":
			rec.FirstDetected = t
		case "lastUsed":
			rec.LastUsed = t
		default:
			return imagegc.Record{}, decode.Badf(path, "[%s]: unknown field %s (want firstDetected, lastUsed)", k, decode.Quote(name))
		}
	}
	return rec, nil
}

// matchImage resolves a record key to an image ID.
func matchImage(key string, images []*runtimeapi.Image) (string, bool) {
	bare := strings.TrimPrefix(key, "sha256:")
	var found string
	for _, img := range images {
		id := img.GetId()
		if id == key || strings.TrimPrefix(id, "sha256:") == bare {
			return id, true
		}
		if len(bare) >= 12 && strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), bare) {
			if found != "" {
				return "", false // ambiguous
			}
			found = id
		}
	}
	return found, found != ""
}

// ImageFs is what an image filesystem snapshot tells: the kubelet Summary has
// capacity and available bytes; crictl imagefsinfo has the used bytes only.
type ImageFs struct {
	// FromSummary: the file was a kubelet Summary; Stats is set.
	FromSummary bool
	// Stats is the Summary's node.runtime.imageFs capacity and available bytes.
	Stats imagegc.FsStats
	// UsedBytes is crictl's used bytes of the first image filesystem (when
	// FromSummary is false).
	UsedBytes int64
}

// ParseImageFs parses b, read from path (which errors name): the kubelet's
// /stats/summary JSON (an object with "node"), whose node.runtime.imageFs
// must have capacityBytes and availableBytes, or 'crictl imagefsinfo -o json'
// output (an object with "status"). Values beyond int64 are rejected.
func ParseImageFs(path string, b []byte) (ImageFs, error) {
	if err := jsonSyntax(path, b); err != nil {
		return ImageFs{}, err
	}
	var probe map[string]json.RawMessage
	if err := decode.Lenient(b, &probe); err != nil {
		return ImageFs{}, decode.Badf(path, "want a JSON object: %v", err)
	}
	if _, ok := probe["node"]; ok {
		// The Summary loader rejects gauges above math.MaxInt64, which would
		// wrap negative below.
		s, err := snapshot.ParseSummary(path, b)
		if err != nil {
			return ImageFs{}, err
		}
		var fs *statsapi.FsStats
		if s.Node.Runtime != nil {
			fs = s.Node.Runtime.ImageFs
		}
		if fs == nil || fs.CapacityBytes == nil || fs.AvailableBytes == nil {
			return ImageFs{}, decode.Badf(path, "node.runtime.imageFs has no capacityBytes/availableBytes")
		}
		return ImageFs{FromSummary: true, Stats: imagegc.FsStats{CapacityBytes: int64(*fs.CapacityBytes), AvailableBytes: int64(*fs.AvailableBytes)}}, nil
	}
	used, err := crictlUsedBytes(path, probe)
	if err != nil {
		return ImageFs{}, err
	}
	return ImageFs{UsedBytes: used}, nil
}

// crictlUsedBytes returns the first image filesystem's used bytes from crictl
// imagefsinfo JSON: {"status": ImageFsInfoResponse} (crictl ≥ 1.29) or
// {"status": FilesystemUsage} (older crictl), told apart by their fields.
func crictlUsedBytes(path string, probe map[string]json.RawMessage) (int64, error) {
	status, ok := probe["status"]
	if !ok {
		return 0, decode.Badf(path, "neither crictl imagefsinfo JSON (no \"status\") nor a kubelet Summary (no \"node\")")
	}
	type uint64Value struct {
		Value json.RawMessage `json:"value"`
	}
	var st struct {
		ImageFilesystems []struct {
			UsedBytes *uint64Value `json:"usedBytes"`
		} `json:"imageFilesystems"`
		UsedBytes *uint64Value `json:"usedBytes"`
	}
	// Only the used bytes are read here, to name them in an error; the
	// protobuf decoding below checks the rest.
	_ = json.Unmarshal(status, &st)
	var field string
	var used *uint64Value
	var m proto.Message
	switch {
	case len(st.ImageFilesystems) > 0:
		field, used, m = "status.imageFilesystems[0].usedBytes.value", st.ImageFilesystems[0].UsedBytes, &runtimeapi.ImageFsInfoResponse{}
	case st.UsedBytes != nil:
		field, used, m = "status.usedBytes.value", st.UsedBytes, &runtimeapi.FilesystemUsage{}
	default:
		return 0, decode.Badf(path, "status has no image filesystem with usedBytes")
	}
	if used == nil || len(used.Value) == 0 {
		return 0, decode.Badf(path, "%s: missing", field)
	}
	v, err := byteCount(used.Value)
	if err != nil {
		return 0, decode.Badf(path, "%s: %s: %v", field, decode.Escape(string(used.Value)), err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(status, m); err != nil {
		// Its position would be within status, not the file: leave it out.
		return 0, decode.Badf(path, "status: %s", protoPosition.ReplaceAllString(protoError(err), ""))
	}
	return usedBytes(path, field, v)
}

// byteCount parses a protobuf JSON uint64: a number or a string of digits.
func byteCount(raw json.RawMessage) (uint64, error) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("not a byte count (want a whole number from 0 to 9223372036854775807)")
	}
	return v, nil
}

// usedBytes returns v, a byte count at field, as an int64, rejecting a value
// that would wrap negative.
func usedBytes(path, field string, v uint64) (int64, error) {
	if v > math.MaxInt64 {
		return 0, decode.Badf(path, "%s: %d: too large", field, v)
	}
	return int64(v), nil
}
