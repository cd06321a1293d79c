package decode

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzToJSON: ToJSON never panics; it returns valid JSON or a one-line error;
// and Strict on what it returns fails on one line too, naming the path.
func FuzzToJSON(f *testing.F) {
	for _, pattern := range []string{"../../../examples/*/*.yaml", "../../../examples/*/*.json", "../../../examples/scenarios/*.yaml", "../../config/testdata/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		if len(files) == 0 {
			f.Fatalf("no seed file matches %s", pattern)
		}
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("name: y\ninner: {size: .inf}\n"))
	f.Add([]byte(`{"name": "a", "inner": {"size": 1e400}}`))
	f.Add([]byte("{\"name\":\n \"a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		js, err := ToJSON(data)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("ToJSON error %q is not one line", err)
			}
			return
		}
		if !json.Valid(js) {
			t.Fatalf("ToJSON returned invalid JSON %q", js)
		}
		var d doc
		if err := Strict(js, &d); err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Strict error %q is not one line", err)
			}
			var ve *ValueError
			if errors.As(err, &ve) && ve.Reason == "" {
				t.Fatalf("ValueError without a reason: %q", err)
			}
		}
	})
}
