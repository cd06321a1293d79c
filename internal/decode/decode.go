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
	"strings"

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
		return nil, errors.New(reword(err))
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
	return msg
}

// ToJSON returns data, YAML or JSON, as JSON: as is when it already is a JSON
// object (the common case, and much faster than the YAML path for large
// documents), else converted from YAML, where a duplicate key is an error.
func ToJSON(data []byte) ([]byte, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t, nil
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// The YAML decoder lists its errors one per line; keep them on one.
		return nil, errors.New(strings.Join(strings.Fields(err.Error()), " "))
	}
	return js, nil
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
