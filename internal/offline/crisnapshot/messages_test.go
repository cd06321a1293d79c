package crisnapshot

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// TestParseMessages: the one-line message of each bad crictl input, of class
// decode.ErrBadInput.
func TestParseMessages(t *testing.T) {
	t.Parallel()
	images := func(b []byte) error { _, err := ParseImages("f.json", b); return err }
	containers := func(b []byte) error { _, err := ParseContainers("f.json", b); return err }
	imageFs := func(b []byte) error { _, err := ParseImageFs("f.json", b); return err }
	records := func(b []byte) error {
		_, err := ParseRecords("f.json", b, nil, new(bytes.Buffer))
		return err
	}
	for _, tc := range []struct {
		name  string
		parse func([]byte) error
		data  string
		want  string
	}{
		{"negative used bytes", imageFs, `{"status": {"imageFilesystems": [{"usedBytes": {"value": "-1"}}]}}`,
			`f.json: status.imageFilesystems[0].usedBytes.value: "-1": not a byte count (want a whole number from 0 to 9223372036854775807)`},
		{"negative used bytes, older crictl", imageFs, `{"status": {"usedBytes": {"value": -1}}}`,
			`f.json: status.usedBytes.value: -1: not a byte count (want a whole number from 0 to 9223372036854775807)`},
		{"used bytes missing", imageFs, `{"status": {"imageFilesystems": [{"fsId": {"mountpoint": "/"}}]}}`,
			`f.json: status.imageFilesystems[0].usedBytes.value: missing`},
		{"other field of the wrong type", imageFs, `{"status": {"imageFilesystems": [{"usedBytes": {"value": "1"}, "timestamp": "x"}]}}`,
			`f.json: status: invalid value for int64 field timestamp: "x"`},
		{"truncated imagefs", imageFs, `{"status": {"imageFilesystems": [`, `f.json: truncated: unexpected end of input at line 1, column 34 (byte 33)`},
		{"truncated images", images, "{\"images\": [\n{\"id\": \"a\"", `f.json: truncated: unexpected end of input at line 2, column 11 (byte 23)`},
		{"truncated containers", containers, `{"containers": [{`, `f.json: truncated: unexpected end of input at line 1, column 18 (byte 17)`},
		{"truncated records", records, `{"a": {"lastUsed": `, `f.json: truncated: unexpected end of input at line 1, column 20 (byte 19)`},
		{"duplicate image id", images, `{"images": [{"id": "sha256:aa", "size": "1"}, {"id": "sha256:bb"}, {"id": "sha256:aa", "size": "2"}]}`,
			`f.json: images[2].id: "sha256:aa": the same image as images[0].id: "sha256:aa"`},
		{"duplicate image id after normalisation", images, `{"images": [{"id": "aa"}, {"id": "sha256:aa"}]}`,
			`f.json: images[1].id: "sha256:aa": the same image as images[0].id: "aa"`},
		{"image id with control characters", images, `{"images": [{"id": "a\u001b"}, {"id": "sha256:a\u001b"}]}`,
			`f.json: images[1].id: "sha256:a\x1b": the same image as images[0].id: "a\x1b"`},
		{"duplicate record key", records, `{"a": {}, "a": {}}`,
			`f.json: want {IMAGE_ID: {"firstDetected": RFC3339, "lastUsed": RFC3339}}: duplicate field "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.parse([]byte(tc.data))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, decode.ErrBadInput) {
				t.Errorf("error %q is not ErrBadInput", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
		})
	}
}
