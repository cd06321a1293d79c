package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// describe rewords an error of decoding js into a Go value so that it names
// the field by its full path, with list indices, and the value as written: a
// *ValueError "spec.containers[1].name: 5: cannot use a JSON number as
// string". Errors it does not know keep their text, without the "json: "
// prefix.
func describe(js []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return describeType(js, te)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errors.New(SyntaxMessage(js, se.Offset, se.Error()))
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		// A time's own decoder says the value but not the field: find the
		// field holding that value.
		path, _ := findString(js, pe.Value)
		return &ValueError{Path: path, Value: Quote(pe.Value), Reason: "not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)"}
	}
	return errors.New(reword(err))
}

// ValueError is an error about one value of a document: its path
// ("spec.containers[1].name", "" for the document itself), its text as an
// error message shows it (quoted and escaped for a string), and why it is
// wrong.
type ValueError struct {
	Path, Value, Reason string
}

func (e *ValueError) Error() string {
	var b strings.Builder
	for _, s := range []string{e.Path, e.Value} {
		if s != "" {
			b.WriteString(s)
			b.WriteString(": ")
		}
	}
	b.WriteString(e.Reason)
	return b.String()
}

// describeType words a wrong-type error with the value's path and text.
func describeType(js []byte, te *json.UnmarshalTypeError) *ValueError {
	kind, _, _ := strings.Cut(te.Value, " ") // "number 1e400" -> "number"
	want := te.Type.String()
	path, value, ok := valueAt(js, te.Offset)
	if !ok {
		path, value = te.Field, ""
	}
	e := &ValueError{Path: path, Value: value}
	switch {
	case kind == "number" && value != "" && isIntKind(want):
		if _, err := strconv.ParseFloat(value, 64); err != nil || !strings.ContainsAny(value, ".eE") {
			e.Reason = "out of range for " + want
		} else {
			e.Reason = "not a whole number (" + want + ")"
		}
	case kind == "number" && value != "" && strings.HasPrefix(want, "float"):
		e.Reason = "out of range for " + want
	default:
		e.Reason = fmt.Sprintf("cannot use a JSON %s as %s", kind, want)
	}
	return e
}

func isIntKind(t string) bool {
	return strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint")
}

// SyntaxMessage words a JSON syntax error of js, msg as the decoder says it
// after reading offset bytes: with the line and column (1-based) and the byte
// offset (0-based) of the offending byte, or, for input that ends too early,
// that the file is truncated and where it ends.
func SyntaxMessage(js []byte, offset int64, msg string) string {
	msg = strings.TrimPrefix(msg, "json: ")
	if msg == "unexpected end of JSON input" || msg == io.ErrUnexpectedEOF.Error() {
		line, col := LineColumn(js, offset)
		return fmt.Sprintf("truncated: unexpected end of input at line %d, column %d (byte %d)", line, col, offset)
	}
	if offset > 0 {
		offset-- // the decoder counts the offending byte as read; point at it
	}
	line, col := LineColumn(js, offset)
	return fmt.Sprintf("%s at line %d, column %d (byte %d)", Escape(msg), line, col, offset)
}

// LineColumn returns the 1-based line and column (in bytes) of offset in data.
func LineColumn(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset < 0 {
		offset = 0
	}
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = len(before) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// jsonError returns the syntax error of js, a document that is not valid
// JSON, worded by SyntaxMessage; nil when js is valid.
func jsonError(js []byte) error {
	var v any
	err := json.Unmarshal(js, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errors.New(SyntaxMessage(js, se.Offset, se.Error()))
	}
	return err
}

// frame is one level of a JSON value being walked: an object (key is the
// current key) or a list (index is the current index).
type frame struct {
	list      bool
	key       string
	index     int
	expectKey bool
}

// jsonWalk calls visit with the path and token of every value of js, in
// order, and the offset just after the token; it stops when visit returns
// false or at the first syntax error.
func jsonWalk(js []byte, visit func(path string, tok json.Token, end int64) bool) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var stack []frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.list {
				fmt.Fprintf(&b, "[%d]", f.index)
			} else {
				b.WriteString(pathKey(b.Len() == 0, f.key))
			}
		}
		return b.String()
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		end := dec.InputOffset()
		if n := len(stack); n > 0 && !stack[n-1].list && stack[n-1].expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				advance(stack)
				continue
			}
			stack[n-1].key, _ = tok.(string)
			stack[n-1].expectKey = false
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == ']' || d == '}') {
			stack = stack[:len(stack)-1]
			advance(stack)
			continue
		}
		if !visit(path(), tok, end) {
			return
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{expectKey: true})
		case json.Delim('['):
			stack = append(stack, frame{list: true})
		default:
			advance(stack)
		}
	}
}

// advance moves the innermost frame past the value just read.
func advance(stack []frame) {
	if n := len(stack); n > 0 {
		if stack[n-1].list {
			stack[n-1].index++
		} else {
			stack[n-1].expectKey = true
		}
	}
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_/-][A-Za-z0-9_./-]*$`)

// pathKey renders an object key as a path element: ".key", or ["key"]
// quoted when it is not a plain name.
func pathKey(first bool, key string) string {
	if !plainKey.MatchString(key) {
		return "[" + strconv.Quote(key) + "]"
	}
	if first {
		return key
	}
	return "." + key
}

// valueAt returns the path and the text of the value of js that ends at
// offset end (a scalar) or starts just before it (an object or list, which
// the decoder reports at its opening delimiter).
func valueAt(js []byte, end int64) (path, value string, ok bool) {
	jsonWalk(js, func(p string, tok json.Token, e int64) bool {
		if e < end {
			return true
		}
		path, value, ok = p, tokenText(tok), true
		return false
	})
	return path, value, ok
}

// findString returns the path of the first string value of js equal to s.
func findString(js []byte, s string) (path string, ok bool) {
	jsonWalk(js, func(p string, tok json.Token, _ int64) bool {
		if v, isStr := tok.(string); isStr && v == s {
			path, ok = p, true
			return false
		}
		return true
	})
	return path, ok
}

// tokenText renders a JSON token for an error message: strings quoted and
// escaped, numbers as written, an object or list by its kind.
func tokenText(tok json.Token) string {
	switch v := tok.(type) {
	case string:
		return Quote(v)
	case json.Number:
		return Escape(string(v))
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "a list"
	}
	return fmt.Sprint(tok)
}

// maxQuoted is the longest value, in bytes, an error message quotes whole.
const maxQuoted = 80

// Quote returns s double-quoted and escaped as strconv.Quote does (no raw
// control characters or invalid UTF-8), cut to a readable length.
func Quote(s string) string {
	if len(s) > maxQuoted {
		cut := maxQuoted
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// Escape returns msg with every invalid UTF-8 byte and every control or
// non-printable character escaped as strconv.Quote escapes them (\xff, \x1b,
// \n, \u200b), and the rest as is: an error message or warning that echoes
// input is safe to print on a terminal and stays on one line.
func Escape(msg string) string {
	clean := true
	for _, r := range msg {
		if r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); {
		r, size := utf8.DecodeRuneInString(msg[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, msg[i])
		case r == ' ' || unicode.IsPrint(r) && r != utf8.RuneError:
			b.WriteString(msg[i : i+size])
		default:
			q := strconv.QuoteRune(r) // 'x' with the escape inside
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
