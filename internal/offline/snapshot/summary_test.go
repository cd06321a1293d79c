package snapshot

import (
	"errors"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// TestParseSummaryStrict: the strict parser names an unknown field with its path;
// the lenient one ignores it, as a newer kubelet's Summary may carry fields the
// vendored type lacks.
func TestParseSummaryStrict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want string // strict error; "" when both parsers accept the document
	}{
		{
			name: "misspelt node memory field",
			data: `{"node": {"nodeName": "n", "memory": {"availableByts": 1, "workingSetBytes": 2}}}`,
			want: `summary.json: unknown field "node.memory.availableByts"`,
		},
		{
			name: "top-level field",
			data: `{"node": {"nodeName": "n", "memory": {}}, "podz": []}`,
			want: `summary.json: unknown field "podz"`,
		},
		{
			name: "field of a container in a pod",
			data: `{"node": {"nodeName": "n", "memory": {}}, "pods": [{"podRef": {"name": "a"}},
				{"podRef": {"name": "b"}, "containers": [{"name": "c", "rootfs": {"usedBytes": 1, "size": 2}}]}]}`,
			want: `summary.json: unknown field "pods[1].containers[0].rootfs.size"`,
		},
		{
			name: "field of a pod reference",
			data: `{"node": {"nodeName": "n", "memory": {}}, "pods": [{"podRef": {"name": "a", "namespaec": "x"}}]}`,
			want: `summary.json: unknown field "pods[0].podRef.namespaec"`,
		},
		{
			name: "YAML",
			data: "node:\n  nodeName: node-1\n  fs:\n    availableBytes: 1\n    capacityByte: 2\n",
			want: `summary.json: unknown field "node.fs.capacityByte"`,
		},
		{
			name: "embedded FsStats fields of a volume and the default network interface",
			data: `{"node": {"nodeName": "n", "memory": {}, "network": {"name": "eth0", "rxBytes": 1, "time": "2024-01-01T00:00:00Z"}},
				"pods": [{"podRef": {"name": "a"}, "volume": [{"name": "v", "usedBytes": 5, "pvcRef": {"name": "p", "namespace": "x"}}]}]}`,
		},
		{
			name: "field names match case-sensitively, as the API server's strict decoding",
			data: `{"node": {"nodeName": "n", "memory": {"AvailableBytes": 1, "WORKINGSETBYTES": 2}}}`,
			want: `summary.json: unknown field "node.memory.AvailableBytes" (and 1 more)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := ParseSummary("summary.json", []byte(tc.data)); err != nil {
				t.Errorf("ParseSummary: %v, want no error", err)
			}
			_, err := ParseSummaryStrict("summary.json", []byte(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Errorf("ParseSummaryStrict: %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("ParseSummaryStrict: %v, want an ErrBadInput", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("ParseSummaryStrict error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseSummaryRange: a gauge above math.MaxInt64 would wrap negative where it
// becomes an int64 (18446744073709551615 available bytes read as -1 set
// MemoryPressure); both parsers reject it, naming the field path and the value.
func TestParseSummaryRange(t *testing.T) {
	t.Parallel()
	const huge = "18446744073709551615"
	tests := []struct {
		name string
		data string
		want string // "" when the document is accepted
	}{
		{
			name: "node memory available",
			data: `{"node": {"nodeName": "n", "memory": {"availableBytes": ` + huge + `, "workingSetBytes": 1}}}`,
			want: "summary.json: node.memory.availableBytes: 18446744073709551615: too large",
		},
		{
			name: "just above MaxInt64",
			data: `{"node": {"nodeName": "n", "fs": {"capacityBytes": 9223372036854775808}}}`,
			want: "summary.json: node.fs.capacityBytes: 9223372036854775808: too large",
		},
		{
			name: "MaxInt64 fits",
			data: `{"node": {"nodeName": "n", "fs": {"capacityBytes": 9223372036854775807, "availableBytes": 9223372036854775807}}}`,
		},
		{
			name: "image filesystem",
			data: `{"node": {"nodeName": "n", "runtime": {"imageFs": {"capacityBytes": 10, "usedBytes": ` + huge + `}}}}`,
			want: "summary.json: node.runtime.imageFs.usedBytes: 18446744073709551615: too large",
		},
		{
			name: "container filesystem inodes",
			data: `{"node": {"nodeName": "n", "runtime": {"containerFs": {"inodesFree": ` + huge + `}}}}`,
			want: "summary.json: node.runtime.containerFs.inodesFree: 18446744073709551615: too large",
		},
		{
			name: "system container",
			data: `{"node": {"nodeName": "n", "systemContainers": [{"name": "kubelet"}, {"name": "pods", "memory": {"workingSetBytes": ` + huge + `}}]}}`,
			want: "summary.json: node.systemContainers[1].memory.workingSetBytes: 18446744073709551615: too large",
		},
		{
			name: "pod container working set",
			data: `{"node": {"nodeName": "n", "memory": {}}, "pods": [{"podRef": {"name": "a"}},
				{"podRef": {"name": "b"}, "containers": [{"name": "c", "memory": {"workingSetBytes": ` + huge + `}}]}]}`,
			want: "summary.json: pods[1].containers[0].memory.workingSetBytes: 18446744073709551615: too large",
		},
		{
			name: "pod volume",
			data: `{"node": {"nodeName": "n", "memory": {}}, "pods": [{"podRef": {"name": "a"}, "volume": [{"name": "v", "usedBytes": ` + huge + `}]}]}`,
			want: "summary.json: pods[0].volume[0].usedBytes: 18446744073709551615: too large",
		},
		{
			name: "pod ephemeral storage",
			data: `{"node": {"nodeName": "n", "memory": {}}, "pods": [{"podRef": {"name": "a"}, "ephemeral-storage": {"usedBytes": ` + huge + `}}]}`,
			want: "summary.json: pods[0].ephemeral-storage.usedBytes: 18446744073709551615: too large",
		},
		{
			name: "pod process count",
			data: `{"node": {"nodeName": "n", "memory": {}}, "pods": [{"podRef": {"name": "a"}, "process_stats": {"process_count": ` + huge + `}}]}`,
			want: "summary.json: pods[0].process_stats.process_count: 18446744073709551615: too large",
		},
		{
			name: "negative rlimit",
			data: `{"node": {"nodeName": "n", "rlimit": {"maxpid": 100, "curproc": -1}}}`,
			want: "summary.json: node.rlimit.curproc: -1: must not be negative",
		},
		{
			name: "cumulative counters may exceed MaxInt64",
			data: `{"node": {"nodeName": "n", "cpu": {"usageCoreNanoSeconds": ` + huge + `},
				"memory": {"pageFaults": ` + huge + `}, "network": {"name": "eth0", "rxBytes": ` + huge + `}}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, parse := range []struct {
				name string
				f    func(string, []byte) error
			}{
				{"ParseSummary", func(n string, d []byte) error { _, err := ParseSummary(n, d); return err }},
				{"ParseSummaryStrict", func(n string, d []byte) error { _, err := ParseSummaryStrict(n, d); return err }},
			} {
				err := parse.f("summary.json", []byte(tc.data))
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s: %v, want no error", parse.name, err)
					}
					continue
				}
				if !errors.Is(err, ErrBadInput) {
					t.Fatalf("%s: %v, want an ErrBadInput", parse.name, err)
				}
				if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
					t.Errorf("%s error (-want +got):\n%s", parse.name, diff)
				}
			}
		})
	}
}

// A document that is not an object is named by its kind, on one line.
func TestParseSummaryNotAnObject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data, want string
	}{
		{name: "JSON array over lines", data: "[\n{\"node\": {}}\n]", want: "summary.json: not a stats Summary object: found an array"},
		{name: "YAML list", data: "- node: {}\n", want: "summary.json: not a stats Summary object: found an array"},
		{name: "number", data: "42", want: "summary.json: not a stats Summary object: found a number"},
		{name: "text", data: "just text", want: "summary.json: not a stats Summary object: found a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, strict := range []bool{false, true} {
				_, err := parseSummary("summary.json", []byte(tc.data), strict)
				if err == nil || err.Error() != tc.want {
					t.Errorf("parseSummary(strict=%v) = %v, want %q", strict, err, tc.want)
				}
			}
		})
	}
}

// summaryDoc must decode every field of statsapi.Summary, under the same JSON
// names; a newer vendored Summary with more fields fails here.
func TestSummaryDocMatchesSummary(t *testing.T) {
	t.Parallel()
	fields := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			out = append(out, f.Name+" "+f.Tag.Get("json")+" "+ft.String())
		}
		return out
	}
	if diff := cmp.Diff(fields(statsapi.Summary{}), fields(summaryDoc{})); diff != "" {
		t.Errorf("summaryDoc fields (-Summary +summaryDoc):\n%s", diff)
	}
}
