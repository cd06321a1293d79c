package podsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// Error is an error about a manifest file, or about one pod in it. It is of
// class decode.ErrBadInput, and its text is one line: the file, where in the
// file, the pod, then the field path, the value and what is wrong with it.
type Error struct {
	File  string // the manifest file
	Where string // the pod's place in the file ("document 2", "document 1 items[3]"); empty for the whole file
	Pod   string // the pod's namespace/name as written, when known
	Err   error  // what is wrong
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Where != "" {
		b.WriteString(": ")
		b.WriteString(e.Where)
	}
	if e.Pod != "" {
		fmt.Fprintf(&b, ": pod %q", e.Pod)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	// One line, whatever a decoder put in its message.
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(b.String())
}

// Unwrap returns what is wrong.
func (e *Error) Unwrap() error { return e.Err }

// Is makes an Error match decode.ErrBadInput.
func (e *Error) Is(target error) bool { return target == decode.ErrBadInput }

// decoded is one pod object of a manifest, as written, with its place.
type decoded struct {
	where string
	pod   *v1.Pod
}

// decodeManifest splits data, the content of file, into its pods: YAML
// documents separated by "---" or a JSON object, each a v1 Pod, PodList or
// List of pods. An error that spoils the whole file (not UTF-8, a YAML syntax
// error) is returned as fileErr; an error in one document or list item skips
// that pod only and is returned in podErrs. Documents that are empty or only
// comments hold no pod.
func decodeManifest(file string, data []byte) (pods []decoded, podErrs []error, fileErr error) {
	if !utf8.Valid(data) {
		return nil, nil, &Error{File: file, Err: fmt.Errorf("not UTF-8 text (invalid byte at offset %d)", invalidUTF8At(data))}
	}
	r := decode.NewYAMLReader(data)
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return pods, podErrs, nil
		}
		if err != nil {
			return nil, nil, &Error{File: file, Err: err}
		}
		where := fmt.Sprintf("document %d", n)
		js, err := decode.ToJSON(doc)
		if err != nil {
			// A YAML syntax error: the split into documents cannot be trusted either.
			return nil, nil, &Error{File: file, Where: where, Err: err}
		}
		js = bytes.TrimSpace(js)
		if len(js) == 0 || bytes.Equal(js, []byte("null")) {
			continue
		}
		got, errs := decodeObject(file, where, js)
		pods = append(pods, got...)
		podErrs = append(podErrs, errs...)
	}
}

// invalidUTF8At returns the offset of the first byte of data that is not part
// of valid UTF-8.
func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}

// typeHead is the part of an object that tells what it is.
type typeHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// podList is a v1 PodList or List whose items are decoded one by one, so
// that a bad item skips only itself.
type podList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []json.RawMessage `json:"items"`
}

// decodeObject decodes one JSON document: a Pod, or a PodList or List of pods.
func decodeObject(file, where string, js []byte) ([]decoded, []error) {
	if js[0] != '{' {
		return nil, []error{&Error{File: file, Where: where, Err: fmt.Errorf("not an object: found %s", truncate(string(js), 40))}}
	}
	var head typeHead
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, []error{&Error{File: file, Where: where, Err: errors.New(strings.TrimPrefix(err.Error(), "json: "))}}
	}
	switch {
	case head.APIVersion == "v1" && head.Kind == "Pod":
		p, err := decodePod(file, where, js)
		if err != nil {
			return nil, []error{err}
		}
		return []decoded{{where, p}}, nil
	case head.APIVersion == "v1" && (head.Kind == "PodList" || head.Kind == "List"):
		var list podList
		if err := decode.Strict(js, &list); err != nil {
			return nil, []error{&Error{File: file, Where: where, Err: err}}
		}
		var pods []decoded
		var errs []error
		for i, item := range list.Items {
			iw := fmt.Sprintf("%s items[%d]", where, i)
			var ih typeHead
			if err := json.Unmarshal(item, &ih); err != nil {
				errs = append(errs, &Error{File: file, Where: iw, Err: errors.New(strings.TrimPrefix(err.Error(), "json: "))})
				continue
			}
			// PodList items may leave out their type; a List's must say it.
			if !(ih.APIVersion == "v1" && ih.Kind == "Pod") && !(head.Kind == "PodList" && ih.APIVersion == "" && ih.Kind == "") {
				errs = append(errs, &Error{File: file, Where: iw, Err: kindError(ih)})
				continue
			}
			p, err := decodePod(file, iw, item)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			pods = append(pods, decoded{iw, p})
		}
		return pods, errs
	}
	return nil, []error{&Error{File: file, Where: where, Err: kindError(head)}}
}

func kindError(h typeHead) error {
	return fmt.Errorf("apiVersion %q kind %q: want apiVersion v1 and kind Pod, PodList or List", h.APIVersion, h.Kind)
}

// decodePod decodes one pod object strictly. Quantities are checked first:
// the quantity parser takes time exponential in an exponent's digits, and a
// bad one is reported with its field path.
func decodePod(file, where string, js []byte) (*v1.Pod, error) {
	var generic any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // 1e400 is a valid JSON number, but not a float64
	if err := dec.Decode(&generic); err != nil {
		return nil, &Error{File: file, Where: where, Err: errors.New(strings.TrimPrefix(err.Error(), "json: "))}
	}
	podName := nameOf(generic)
	if err := checkTree("", generic, reflect.TypeFor[v1.Pod](), ""); err != nil {
		return nil, &Error{File: file, Where: where, Pod: podName, Err: err}
	}
	pod := new(v1.Pod)
	if err := decode.Strict(js, pod); err != nil {
		return nil, &Error{File: file, Where: where, Pod: podName, Err: err}
	}
	return pod, nil
}

// nameOf returns "namespace/name" (or "name") of a generic pod object, or "".
func nameOf(obj any) string {
	m, _ := obj.(map[string]any)
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	if ns != "" && name != "" {
		return ns + "/" + name
	}
	return name
}

var (
	quantityType    = reflect.TypeFor[resource.Quantity]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// checkTree walks the generic JSON value v along the Go type t it is decoded
// into and returns the first value that does not fit, naming its path
// (spec.containers[0].ports[1].containerPort) and the value. Every
// resource.Quantity must parse (with bounded exponents: the parser takes time
// exponential in an exponent's digits) and fit an int64 in the unit its
// consumers keep it in (millicores for cpu); resName is the map key when v is
// a ResourceList value. Numbers must fit their field. What the walk does not
// know (other types with their own JSON decoding) is left to the typed decoder.
func checkTree(path string, v any, t reflect.Type, resName string) error {
	if v == nil {
		return nil // null leaves any field at its zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == quantityType {
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		default:
			return fmt.Errorf("%s: %s: want a quantity", path, jsonKind(v))
		}
		q, err := quantity.Parse(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%s: %q: not a valid quantity", path, s)
		}
		if !quantity.FitsInt64(resName, q) {
			return fmt.Errorf("%s: %q: too large", path, s)
		}
		return nil
	}
	if t.Kind() != reflect.Interface && reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %s: want an object", orTop(path), jsonKind(v))
		}
		return checkFields(path, m, t)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			if _, ok := v.(string); !ok {
				return fmt.Errorf("%s: %s: want a base64 string", path, jsonKind(v))
			}
			return nil
		}
		items, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %s: want a list", path, jsonKind(v))
		}
		for i, item := range items {
			if err := checkTree(fmt.Sprintf("%s[%d]", path, i), item, t.Elem(), ""); err != nil {
				return err
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %s: want an object", path, jsonKind(v))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := checkTree(join(path, k), m[k], t.Elem(), k); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: %s: want a string", path, jsonKind(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %s: want true or false", path, jsonKind(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %s: want a whole number", path, jsonKind(v))
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%s: %s: want a whole number that fits %s", path, n, t.Kind())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %s: want a whole number", path, jsonKind(v))
		}
		if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%s: %s: want a non-negative whole number that fits %s", path, n, t.Kind())
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %s: want a number", path, jsonKind(v))
		}
		if _, err := strconv.ParseFloat(n.String(), t.Bits()); err != nil {
			return fmt.Errorf("%s: %s: want a number that fits %s", path, n, t.Kind())
		}
	}
	return nil
}

// checkFields checks the fields of object m, decoded into struct type t.
func checkFields(path string, m map[string]any, t reflect.Type) error {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && (strings.Contains(opts, "inline") || f.Anonymous) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := checkFields(path, m, ft); err != nil {
					return err
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		fv, ok := m[name]
		if !ok {
			continue
		}
		if err := checkTree(join(path, name), fv, f.Type, ""); err != nil {
			return err
		}
	}
	return nil
}

// jsonKind renders a generic JSON value for an error: strings quoted and cut
// short, numbers as written, objects and lists by kind.
func jsonKind(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(truncate(x, 40))
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}

func orTop(path string) string {
	if path == "" {
		return "document"
	}
	return path
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
