package decode

import (
	"bufio"
	"bytes"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// NewYAMLReader returns apimachinery's reader of the YAML documents of data
// (separated by "---" lines), which the caller owns. data is read as if it
// ended with a newline: the reader drops a last line without one when it
// comes with io.EOF (a line of at least its 4096-byte buffer, ending the
// input at a multiple of it), so a one-line JSON manifest of 8192 bytes held
// no document at all.
func NewYAMLReader(data []byte) *utilyaml.YAMLReader {
	var in io.Reader = bytes.NewReader(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		in = io.MultiReader(in, strings.NewReader("\n"))
	}
	return utilyaml.NewYAMLReader(bufio.NewReader(in))
}
