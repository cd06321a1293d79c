// Package decode holds the one strict decoding rule for every input nodekeeper
// reads (configuration files, pod and stats snapshots, scenarios): YAML or JSON
// in, decoded as the API server decodes strict requests, through
// sigs.k8s.io/json. Field names match case-sensitively, and an unknown or
// duplicate field is an error naming its path.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Strict decodes the JSON document js into v. An unknown or duplicate field is
// an error naming its path (`unknown field "node.memory.availableByts"`); only
// the first such field is named, with a count of the others, to keep the error
// on one line. Use StrictFields to see them all.
func Strict(js []byte, v any) error {
	fields, err := StrictFields(js, v)
	if err != nil {
		return err
	}
	switch len(fields) {
	case 0:
		return nil
	case 1:
		return fields[0]
	}
	return fmt.Errorf("%w (and %d more)", fields[0], len(fields)-1)
}

// StrictFields decodes js into v and returns, apart, the strict-field errors
// (unknown and duplicate fields, each naming its path) and the error that
// stopped decoding (malformed JSON, a value of the wrong type), without the
// "json: " prefix. v holds what was decoded even when fields is not empty.
func StrictFields(js []byte, v any) (fields []error, err error) {
	fields, err = kjson.UnmarshalStrict(js, v, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, describe(js, err)
	}
	return fields, nil
}

// typeError matches the decoder's wrong-type message, which names Go types:
// "cannot unmarshal string into Go struct field KubeletConfiguration.maxPods of type int32".
var typeError = regexp.MustCompile(`^cannot unmarshal (\S+) into Go (?:struct field \S+|value) of type (.+)$`)

// reword drops the "json: " prefix and the Go struct names, which mean nothing to
// someone editing a YAML file: "cannot use a JSON string as int32".
func reword(err error) string {
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if m := typeError.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("cannot use a JSON %s as %s", m[1], m[2])
	}
	return Escape(msg)
}

// ToJSON returns data, YAML or JSON, as JSON: as is when it already is a JSON
// object (the common case, and much faster than the YAML path for large
// documents), else converted from YAML, where a duplicate key is an error.
//
// A document that looks like JSON (it starts with {" or [) and is not valid
// YAML either gets the JSON error, with its line and column ("truncated:
// unexpected end of input at line 3, column 9 (byte 52)"). In YAML, a plain
// scalar that YAML 1.1 reads unlike YAML 1.2 or that JSON cannot hold is an
// error naming its path, value and line: y, yes, on, n, no and off (booleans
// in YAML 1.1; quote them for strings, write true or false for booleans),
// .inf and .nan, and numbers beyond the range of a float64.
func ToJSON(data []byte) ([]byte, error) {
	t := bytes.TrimSpace(data)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t, nil
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		if looksLikeJSON(t) {
			if jerr := jsonError(data); jerr != nil {
				return nil, syntaxError{jerr}
			}
		}
		if cerr := checkYAML(data); cerr != nil {
			return nil, cerr
		}
		if bad := invalidUTF8(data); bad >= 0 {
			line, col := LineColumn(data, int64(bad))
			return nil, syntaxError{fmt.Errorf("invalid UTF-8 byte 0x%02x at line %d, column %d (byte %d)", data[bad], line, col, bad)}
		}
		// The YAML decoder lists its errors one per line; keep them on one.
		return nil, syntaxError{errors.New(Escape(strings.Join(strings.Fields(err.Error()), " ")))}
	}
	if err := checkYAML(data); err != nil {
		return nil, err
	}
	return js, nil
}

// invalidUTF8 returns the offset of the first byte of data that is not
// UTF-8, or -1. It is only asked once the YAML decoder has failed, so a
// UTF-16 file with a byte order mark, which it reads, is not refused.
func invalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// ErrSyntax is the class of the errors of ToJSON about malformed YAML or
// JSON, as opposed to a well-formed document with a value it rejects. The
// class does not show in the error's text.
var ErrSyntax = errors.New("malformed YAML or JSON")

// syntaxError is an error of class ErrSyntax whose text is only its message.
type syntaxError struct{ error }

func (e syntaxError) Unwrap() error        { return e.error }
func (e syntaxError) Is(target error) bool { return target == ErrSyntax }

// looksLikeJSON reports whether t, trimmed, starts as a JSON object with a
// quoted key or as a JSON list, rather than as a YAML flow mapping ({a: 1}).
func looksLikeJSON(t []byte) bool {
	if len(t) == 0 {
		return false
	}
	if t[0] == '[' {
		return true
	}
	rest := bytes.TrimSpace(t[1:])
	return t[0] == '{' && (len(rest) == 0 || rest[0] == '"' || rest[0] == '}')
}

// ErrBadInput is the class of every error about the content of an input file:
// the caller reports it as a usage error (exit 2), one line naming the file,
// the field and the value.
var ErrBadInput = errors.New("bad input")

// inputError is an error of class ErrBadInput whose text is only its message.
type inputError struct{ err error }

func (e *inputError) Error() string        { return e.err.Error() }
func (e *inputError) Unwrap() error        { return e.err }
func (e *inputError) Is(target error) bool { return target == ErrBadInput }

// Bad marks err as bad input without changing its text.
func Bad(err error) error { return &inputError{err: err} }

// Badf returns bad input about file: "FILE: message".
func Badf(file, format string, args ...any) error {
	return Bad(fmt.Errorf("%s: %s", file, fmt.Sprintf(format, args...)))
}

// Lenient decodes the JSON document js into v as Strict does, except that
// fields v does not have are ignored (for output of newer tools than our API
// types); a duplicate field is still an error naming its path.
func Lenient(js []byte, v any) error {
	fields, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields)
	if err != nil {
		return describe(js, err)
	}
	switch len(fields) {
	case 0:
		return nil
	case 1:
		return fields[0]
	}
	return fmt.Errorf("%w (and %d more)", fields[0], len(fields)-1)
}

// Show renders a value decoded from JSON (with json.Decoder.UseNumber or
// not) for an error message: a string quoted and escaped, a number or
// boolean as written, an object or list by its kind.
func Show(v any) string {
	switch x := v.(type) {
	case string:
		return Quote(x)
	case json.Number:
		return Escape(string(x))
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return Escape(fmt.Sprint(v))
}
