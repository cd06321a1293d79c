package decode

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// The YAML decoder (sigs.k8s.io/yaml, YAML 1.1, as kubectl and the kubelet
// read YAML) reads some plain scalars unlike what most readers, and YAML 1.2,
// expect. checkYAML finds them, so that the error names the field, the value
// as written and its line, instead of a wrong-type error about a value the
// user never wrote.

// yaml11Bools are the plain scalars YAML 1.1 reads as booleans and YAML 1.2
// as strings (true and false are booleans in both).
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// yamlNonFinite are the plain scalars YAML reads as an infinity or NaN, which
// JSON, and so every field, cannot hold.
var yamlNonFinite = regexp.MustCompile(`^([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))$`)

// yamlFloat is the syntax of a YAML 1.1 float (as the YAML decoder matches it).
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// checkYAML returns an error for the first plain scalar of the YAML document
// data that is a YAML 1.1-only boolean (y, yes, on, n, no, off; as a value
// or as a key, which would become "true" or "false"), a key given twice in
// one mapping (named by its path, as for JSON), an infinity
// or NaN (.inf, .nan), or a number beyond the range of a float64 (1e400,
// which the decoder would keep as a string). It returns nil when data has
// none, or is not YAML the checker can read (the decoder reports that).
func checkYAML(data []byte) error {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil {
		return nil
	}
	return checkNode(&doc, "")
}

func checkNode(n *yamlv3.Node, path string) error {
	switch n.Kind {
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			if err := checkNode(c, path); err != nil {
				return err
			}
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			if err := checkNode(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case yamlv3.MappingNode:
		first := make(map[string]int, len(n.Content)/2) // scalar key -> its line
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yamlv3.ScalarNode && k.Value != "<<" {
				if line, dup := first[k.Value]; dup {
					return fmt.Errorf("duplicate field %q (line %d; first on line %d)", path+pathKey(path == "", k.Value), k.Line, line)
				}
				first[k.Value] = k.Line
			}
			if b, ok := yaml11Bools[k.Value]; ok && k.Kind == yamlv3.ScalarNode && k.Style == 0 {
				at := path
				if at == "" {
					at = "document"
				}
				return fmt.Errorf("%s: key %s (line %d) is read as the boolean %t, the key %q (YAML 1.1): quote it (%q)",
					at, k.Value, k.Line, b, strconv.FormatBool(b), k.Value)
			}
			if err := checkNode(v, path+pathKey(path == "", k.Value)); err != nil {
				return err
			}
		}
	case yamlv3.ScalarNode:
		return checkScalar(n, path)
	}
	// Aliases are checked where their anchor is defined.
	return nil
}

func checkScalar(n *yamlv3.Node, path string) error {
	if n.Style != 0 { // quoted, block or explicitly tagged: read as written
		return nil
	}
	at := path
	if at == "" {
		at = "document"
	}
	v := n.Value
	if b, ok := yaml11Bools[v]; ok {
		return fmt.Errorf("%s: %s (line %d) is read as the boolean %t (YAML 1.1): quote it (%q) for a string, or write %t",
			at, v, n.Line, b, v, b)
	}
	if yamlNonFinite.MatchString(v) {
		return fmt.Errorf("%s: %s (line %d): not a finite number", at, v, n.Line)
	}
	plain := strings.ReplaceAll(v, "_", "")
	if yamlFloat.MatchString(plain) {
		if f, err := strconv.ParseFloat(plain, 64); errors.Is(err, strconv.ErrRange) && math.IsInf(f, 0) {
			return fmt.Errorf("%s: %s (line %d): number out of range (beyond ±%g)", at, Escape(v), n.Line, math.MaxFloat64)
		}
	}
	return nil
}
