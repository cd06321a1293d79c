package snapshot

import (
	"errors"
	"strings"
	"testing"
)

// A quantity with a huge exponent would keep resource.ParseQuantity busy for
// minutes; the loader must reject it at once, naming the field.
func TestParsePodsRejectsHugeExponent(t *testing.T) {
	t.Parallel()
	doc := `{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"requests":{"memory":"1e-999999999"}}}]}}`
	_, err := ParsePods("pods.json", []byte(doc))
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("err = %v, want ErrBadInput", err)
	}
	if want := `spec.containers[0].resources.requests.memory: "1e-999999999"`; !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to contain %q", err, want)
	}
}

// A node object without any stats is as useless as no node: rejected.
func TestParseSummaryRejectsEmptyNode(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"node": {}}`, `{"node": {"nodeName": "x"}, "pods": []}`} {
		_, err := ParseSummary("s.json", []byte(doc))
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "s.json: summary has no node stats") {
			t.Errorf("ParseSummary(%s) = %v, want a no-node-stats error", doc, err)
		}
	}
}

// TestParsePodsLongLastLine: a YAML pods file whose last line has no newline
// and is a multiple of 4096 bytes long keeps that line (the YAML reader
// dropped it: here the pod's name, so "no metadata.name").
func TestParsePodsLongLastLine(t *testing.T) {
	t.Parallel()
	for _, size := range []int{4096, 8192} {
		const head, last = "kind: Pod\nmetadata:\n  annotations: {a: b}\n", "  name: "
		name := strings.Repeat("a", size-len(last))
		pods, err := ParsePods("p.yaml", []byte(head+last+name))
		if err != nil || len(pods) != 1 || pods[0].Name != name {
			t.Errorf("last line of %d bytes: %d pods, %v; want the pod with its long name", size, len(pods), err)
		}
	}
}
