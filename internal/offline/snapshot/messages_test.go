package snapshot

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParsePodsMessages: the exact one-line message for inputs whose error
// used to name the wrong cause or no field (issue 12, item 9).
func TestParsePodsMessages(t *testing.T) {
	t.Parallel()
	ctr := func(res string) string {
		return `{"kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","resources":{"requests":{"memory":` + res + `}}}]}}`
	}
	yamlPod := func(memory string) string {
		return "kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {memory: " + memory + "}}\n"
	}
	for _, tc := range []struct{ name, data, want string }{
		{"JSON number beyond float64", ctr("1e400"),
			`p.json: pod a: spec.containers[0].resources.requests.memory: "1e400": too large`},
		{"YAML .inf", yamlPod(".inf"),
			`p.json: spec.containers[0].resources.requests.memory: .inf (line 6): not a finite number`},
		{"YAML .nan", yamlPod(".nan"),
			`p.json: spec.containers[0].resources.requests.memory: .nan (line 6): not a finite number`},
		{"YAML 1e400", yamlPod("1e400"),
			`p.json: spec.containers[0].resources.requests.memory: 1e400 (line 6): number out of range (beyond ±1.7976931348623157e+308)`},
		{"truncated JSON", `{"kind":"Pod","metadata":{"name":"a"},"spec":{"contain`,
			`p.json: truncated: unexpected end of input at line 1, column 55 (byte 54)`},
		{"truncated JSON on line 3", "{\"kind\":\"Pod\",\n\"metadata\":{\"name\":\"a\"},\n\"spec\":{",
			`p.json: truncated: unexpected end of input at line 3, column 9 (byte 48)`},
		{"name: y", "kind: Pod\nmetadata: {name: y}\nspec: {containers: [{name: c}]}\n",
			`p.json: metadata.name: y (line 2) is read as the boolean true (YAML 1.1): quote it ("y") for a string, or write true`},
		{"name: y in a second YAML document", "kind: Pod\nmetadata: {name: x}\n---\nkind: Pod\nmetadata:\n  name: no\n",
			`p.json: YAML document 2: metadata.name: no (line 3) is read as the boolean false (YAML 1.1): quote it ("no") for a string, or write false`},
		{"name: true", `{"kind":"Pod","metadata":{"name":true}}`, `p.json: document 1: metadata.name: true: not a string`},
		{"wrong type with its index", `{"kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c"},{"name":5}]}}`,
			`p.json: pod a: spec.containers[1].name: 5: cannot use a JSON number as string`},
		{"duplicate JSON field", `{"kind":"Pod","metadata":{"name":"a","name":"b"}}`, `p.json: pod b: duplicate field "metadata.name"`},
		{"duplicate YAML key", "kind: Pod\nmetadata: {name: a, name: b}\n", `p.json: duplicate field "metadata.name" (line 2; first on line 2)`},
		// Issue 26, item 13: the second kind made the pod an empty List.
		{"duplicate top-level kind", `{"kind":"Pod","kind":"List","metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}]}}`,
			`p.json: duplicate field "kind"`},
		{"duplicate list items", `{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}}],"items":[]}`, `p.json: duplicate field "items"`},
		{"duplicate list metadata", `{"kind":"PodList","metadata":{},"metadata":{},"items":[]}`, `p.json: duplicate field "metadata"`},
		{"duplicate kind in a JSON stream's second object", `{"kind":"Pod","metadata":{"name":"a"}} {"kind":"Pod","metadata":{"name":"b"},"kind":"List"}`,
			`p.json: duplicate field "kind"`},
		{"non-UTF-8 pod name in JSON", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\\u001b[31m\"},\"spec\":{\"priority\":\"x\"}}",
			`p.json: pod a\x1b[31m: spec.priority: "x": cannot use a JSON string as int32`},
		{"non-UTF-8 quantity", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"cpu\":\"1\xff\"}}}]}}",
			`p.json: pod a: spec.containers[0].resources.limits.cpu: "1�": not a valid quantity`},
		{"non-UTF-8 kind", "{\"kind\":\"P\xffod\"}", `p.json: kind "P�od" is not a Pod, PodList or List`},
		{"non-object document", "\"\xff\xfe\"", `p.json: invalid UTF-8 byte 0xff at line 1, column 2 (byte 1)`},
		{"JSON stream, a scalar", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"}} \"\\u001b\"", `p.json: expected an object, found "\"\\u001b\""`},
		{"raw control character in JSON", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\x1b\"}}",
			`p.json: invalid character '\x1b' in string literal at line 1, column 36 (byte 35)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePods("p.json", []byte(tc.data))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrBadInput) {
				t.Errorf("error %q is not ErrBadInput", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseSummaryMessages: the same for Summary files.
func TestParseSummaryMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, data, want string }{
		{"time that is not a time", `{"node":{"nodeName":"n","memory":{"time":"2026-01-01T00:00:00Z"},"systemContainers":[{"name":"pods","memory":{"time":"not-a-time"}}]}}`,
			`s.json: node.systemContainers[0].memory.time: "not-a-time": not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)`},
		{"truncated", "{\"node\": {\"nodeName\": \"n\",\n  \"memory\": {", `s.json: truncated: unexpected end of input at line 2, column 14 (byte 40)`},
		// Both parsers: a Summary is machine output, where a duplicate is corruption.
		{"duplicate field", `{"node": {"nodeName": "n", "memory": {"availableBytes": 1, "availableBytes": 2}}}`,
			`s.json: duplicate field "node.memory.availableBytes"`},
		{"YAML .inf gauge", "node:\n  memory:\n    availableBytes: .inf\n", `s.json: node.memory.availableBytes: .inf (line 3): not a finite number`},
		{"wrong type", `{"node":{"nodeName":"n","memory":{"availableBytes":-1}}}`,
			`s.json: node.memory.availableBytes: -1: out of range for uint64`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, parse := range []func(string, []byte) (any, error){
				func(n string, d []byte) (any, error) { return ParseSummary(n, d) },
				func(n string, d []byte) (any, error) { return ParseSummaryStrict(n, d) },
			} {
				_, err := parse("s.json", []byte(tc.data))
				if err == nil || !errors.Is(err, ErrBadInput) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want a one-line ErrBadInput", err)
				}
				if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
					t.Errorf("message (-want +got):\n%s", diff)
				}
			}
		})
	}
}
