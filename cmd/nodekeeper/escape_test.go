package main

import (
	"os"
	"path/filepath"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestErrorsEscapeInput: input echoed on stderr (a file name, a field, a
// value) never reaches the terminal as raw bytes: invalid UTF-8 and control
// characters come out escaped, as strconv.Quote escapes them.
func TestErrorsEscapeInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, file, data, want string
	}{
		{"file name", "p\xff\x1b[31m.yaml", "kind: Pod\nmetadata: {name: y}\n",
			`p\xff\x1b[31m.yaml: metadata.name: y (line 2) is read as the boolean true (YAML 1.1): quote it ("y") for a string, or write true`},
		{"escape sequence in a pod name", "esc.json",
			`{"kind":"Pod","metadata":{"name":"a\u001b]0;pwned\u0007"},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"x"}}}]}}`,
			`esc.json: pod a\x1b]0;pwned\a: spec.containers[0].resources.limits.cpu: "x": not a valid quantity`},
		{"newline in an unknown key", "nl.json",
			`{"kind":"Pod","metadata":{"name":"a"},"spec":{"priority":"1\n2"}}`,
			`nl.json: pod a: spec.priority: "1\n2": cannot use a JSON string as int32`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := write(tc.file, tc.data)
			code, _, errOut := runCLI(t, "explain", "oom", "--memory-capacity", "1Gi", "--pods", path)
			want := "nodekeeper: " + filepath.Join(dir, "") + "/" + tc.want + "\n"
			if code != exitUsage || errOut != want {
				t.Errorf("exit %d, stderr %q; want exit %d, %q", code, errOut, exitUsage, want)
			}
			body := errOut[:len(errOut)-1]
			if !utf8.ValidString(body) {
				t.Errorf("stderr %q is not valid UTF-8", errOut)
			}
			for _, r := range body {
				if !unicode.IsPrint(r) {
					t.Errorf("stderr %q has the raw character %U", errOut, r)
				}
			}
		})
	}
}
