package decode

import (
	"strings"
	"testing"
)

type doc struct {
	Name  string `json:"name"`
	Inner struct {
		Size int `json:"size"`
	} `json:"inner"`
}

func TestStrict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"ok", `{"name":"a","inner":{"size":1}}`, ""},
		{"unknown nested", `{"name":"a","inner":{"sise":1}}`, `unknown field "inner.sise"`},
		{"case sensitive", `{"Name":"a"}`, `unknown field "Name"`},
		{"duplicate", `{"name":"a","name":"b"}`, `duplicate field "name"`},
		{"several", `{"x":1,"y":2,"z":3}`, `unknown field "x" (and 2 more)`},
		{"wrong type", `{"name":1}`, "cannot use a JSON number as string"},
		{"wrong nested type", `{"inner":{"size":"x"}}`, "cannot use a JSON string as int"},
		{"malformed", `{"name":`, "unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var d doc
			err := Strict([]byte(tc.in), &d)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Strict: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Strict error = %v, want one containing %q", err, tc.want)
			case err != nil && strings.HasPrefix(err.Error(), "json: "):
				t.Errorf("error %q keeps the json: prefix", err)
			}
		})
	}
}

func TestToJSON(t *testing.T) {
	t.Parallel()
	js, err := ToJSON([]byte("name: a\ninner: {size: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var d doc
	if err := Strict(js, &d); err != nil || d.Name != "a" || d.Inner.Size != 2 {
		t.Fatalf("decoded %+v, %v", d, err)
	}
	if _, err := ToJSON([]byte("name: a\nname: b\n")); err == nil || err.Error() != `duplicate field "name" (line 2; first on line 1)` {
		t.Errorf("duplicate YAML key: err = %v", err)
	}
	in := []byte(` {"name":"b"} `)
	if js, _ := ToJSON(in); string(js) != `{"name":"b"}` {
		t.Errorf("JSON object not passed through: %s", js)
	}
}
