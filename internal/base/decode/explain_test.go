package decode

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestToJSONErrors: each input that the YAML decoder reads unlike what it
// looks like, or that is cut short, is an error naming the field, the value
// and where it is.
func TestToJSONErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"yaml 1.1 boolean", "metadata:\n  name: y\n",
			`metadata.name: y (line 2) is read as the boolean true (YAML 1.1): quote it ("y") for a string, or write true`},
		{"yaml 1.1 boolean off in a list", "args: [a, off]\n",
			`args[1]: off (line 1) is read as the boolean false (YAML 1.1): quote it ("off") for a string, or write false`},
		{"yaml 1.1 boolean key", "metadata:\n  labels:\n    on: x\n",
			`metadata.labels: key on (line 3) is read as the boolean true, the key "true" (YAML 1.1): quote it ("on")`},
		{"duplicate key", "a:\n  b: 1\n  c: 2\n  b: 3\n", `duplicate field "a.b" (line 4; first on line 2)`},
		{"duplicate key in a list item", "l:\n- {x: 1, x: 1}\n", `duplicate field "l[0].x" (line 2; first on line 2)`},
		{"inf", "spec:\n  containers:\n  - resources: {requests: {memory: .inf}}\n",
			"spec.containers[0].resources.requests.memory: .inf (line 3): not a finite number"},
		{"minus inf", "a: -.Inf\n", "a: -.Inf (line 1): not a finite number"},
		{"nan", "a:\n  b: .nan\n", "a.b: .nan (line 2): not a finite number"},
		{"number beyond float64", "apiVersion: v1\nmaxPods: 1e400\n",
			"maxPods: 1e400 (line 2): number out of range (beyond ±1.7976931348623157e+308)"},
		{"odd key quoted", "\"a\\eb\": {c: yes}\n", `["a\x1bb"].c: yes (line 1) is read as the boolean true`},
		{"truncated json", "{\"kind\": \"Pod\",\n \"metadata\": {\"na",
			"truncated: unexpected end of input at line 2, column 18 (byte 33)"},
		{"truncated json list", "[1, 2", "truncated: unexpected end of input at line 1, column 6 (byte 5)"},
		{"bad json character", "{\"a\": 1,\n \"b\": [}", "invalid character '}' looking for beginning of value at line 2, column 8 (byte 16)"},
		{"non-utf8 yaml", "a: b\nc: \"\xff\"\n", `invalid UTF-8 byte 0xff at line 2, column 5 (byte 9)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ToJSON([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ToJSON(%q) error = %v, want one containing %q", tc.in, err, tc.want)
			}
		})
	}
}

// TestToJSONKeeps: what the checks must not reject.
func TestToJSONKeeps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"a: \"y\"\nb: 'off'\nc: true\nd: false\n", `{"a":"y","b":"off","c":true,"d":false}`},
		{"a: !!str yes\n", `{"a":"yes"}`},
		{"a: 1e300\nb: '1e400'\nc: \"1e400\"\n", `{"a":1e+300,"b":"1e400","c":"1e400"}`},
		{"{a: 1}\n", `{"a":1}`},
		{"true: 1\n'yes': 2\n", `{"true":1,"yes":2}`},
	} {
		js, err := ToJSON([]byte(tc.in))
		if err != nil {
			t.Errorf("ToJSON(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, string(js)); diff != "" {
			t.Errorf("ToJSON(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

type typed struct {
	Name  string `json:"name"`
	Count int32  `json:"count"`
	List  []struct {
		Name string      `json:"name"`
		At   metav1.Time `json:"at"`
	} `json:"list"`
	Ratio float32 `json:"ratio"`
}

// TestStrictTypeErrors: a wrong-type value is named by its full path, with
// list indices, and its text.
func TestStrictTypeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"bool as string", `{"name":true}`, "name: true: cannot use a JSON bool as string"},
		{"indexed", `{"list":[{"name":"a"},{"name":5}]}`, "list[1].name: 5: cannot use a JSON number as string"},
		{"object as string", `{"list":[{"name":{"x":1}}]}`, "list[0].name: an object: cannot use a JSON object as string"},
		{"number beyond int32", `{"count":1e400}`, "count: 1e400: out of range for int32"},
		{"big int", `{"count":99999999999}`, "count: 99999999999: out of range for int32"},
		{"fraction", `{"count":1.5}`, "count: 1.5: not a whole number (int32)"},
		{"float range", `{"ratio":1e400}`, "ratio: 1e400: out of range for float32"},
		{"string as int", `{"count":"1e400"}`, `count: "1e400": cannot use a JSON string as int32`},
		{"escaped value", `{"count":"a\u001b\u200b"}`, `count: "a\x1b\u200b": cannot use a JSON string as int32`},
		{"time", `{"list":[{"at":"2026-01-01T00:00:00Z"},{"at":"not-a-time"}]}`,
			`list[1].at: "not-a-time": not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v typed
			err := Strict([]byte(tc.in), &v)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Strict(%s) error = %v, want %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain: ünïcode ok", "plain: ünïcode ok"},
		{"raw \xff\xfe bytes", `raw \xff\xfe bytes`},
		{"esc \x1b[31m red", `esc \x1b[31m red`},
		{"two\nlines\ttab", `two\nlines\ttab`},
		{"zero\u200bwidth", `zero\u200bwidth`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got, want := Quote(strings.Repeat("é", 50)), strings.Repeat("é", 40)+`"...`; got != `"`+want {
		t.Errorf("Quote(long) = %s", got)
	}
}
