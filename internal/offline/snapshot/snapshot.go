// Package snapshot loads the files an SRE takes from a real node or cluster:
// pods as `kubectl get pods -o json|yaml` prints them and the kubelet's Summary API
// JSON. Every error names the file and, where it can, the field and the value.
package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
)

// ErrBadInput is the class of every error this package returns for malformed input (decode.ErrBadInput).
var ErrBadInput = decode.ErrBadInput

// OnePod returns the one pod of pods, read from path, or bad input when there
// are none or more.
func OnePod(path string, pods []*v1.Pod) (*v1.Pod, error) {
	if len(pods) != 1 {
		return nil, decode.Badf(path, "want exactly one pod, found %d", len(pods))
	}
	return pods[0], nil
}

// ParsePods parses pods from data, read from name (which errors name). It may
// hold a PodList or a v1 List of pods (kubectl get pods -o json|yaml), a
// single Pod, or a stream of Pods (JSON objects one after another, or YAML
// documents separated by ---). An empty list, as kubectl prints for a node
// without pods, gives no pods and no error. Fields that k8s.io/api does not
// know are ignored, so output of a newer kubectl loads.
func ParsePods(name string, data []byte) ([]*v1.Pod, error) {
	return parsePods(name, data, false)
}

// ParsePodsStrict parses like ParsePods but rejects fields that are not Pod
// fields, naming them: for hand-written input such as simulation scenarios.
func ParsePodsStrict(name string, data []byte) ([]*v1.Pod, error) {
	return parsePods(name, data, true)
}

func parsePods(name string, data []byte, strict bool) ([]*v1.Pod, error) {
	docs, err := splitDocuments(name, data)
	if err != nil {
		return nil, err
	}
	var pods []*v1.Pod
	lists := 0 // a list with no items is a node with no pods, not an error
	for _, doc := range docs {
		// A key given twice is refused ({"kind":"Pod","kind":"List"} read
		// as an empty List dropped the pod); the items, each decoded as a
		// pod, are checked at every level there.
		var head struct {
			APIVersion string          `json:"apiVersion"`
			Kind       string          `json:"kind"`
			Metadata   json.RawMessage `json:"metadata"`
			Items      json.RawMessage `json:"items"`
		}
		if err := decode.Lenient(doc, &head); err != nil {
			return nil, decode.Badf(name, "%v", err)
		}
		switch head.Kind {
		case "PodList", "List":
			lists++
			var items []json.RawMessage
			if t := bytes.TrimSpace(head.Items); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
				if t[0] != '[' || json.Unmarshal(t, &items) != nil {
					return nil, decode.Badf(name, "items: want a list of pods, found %s", decode.Quote(truncate(string(t), 40)))
				}
			}
			for i, item := range items {
				p, err := decodePod(name, fmt.Sprintf("items[%d]", i), item, strict)
				if err != nil {
					return nil, err
				}
				pods = append(pods, p)
			}
		case "Pod", "":
			p, err := decodePod(name, fmt.Sprintf("document %d", len(pods)+1), doc, strict)
			if err != nil {
				return nil, err
			}
			pods = append(pods, p)
		default:
			return nil, decode.Badf(name, "kind %q is not a Pod, PodList or List", head.Kind)
		}
	}
	if len(pods) == 0 && lists == 0 {
		return nil, decode.Badf(name, "no pods found")
	}
	return pods, nil
}

// splitDocuments turns a JSON or YAML stream into JSON documents, skipping
// empty ones. A stream that starts with { is JSON objects one after another;
// anything else is YAML documents separated by ---, each converted as
// decode.ToJSON converts (duplicate keys and ambiguous scalars rejected).
func splitDocuments(name string, data []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, decode.Badf(name, "file is empty")
	}
	var docs []json.RawMessage
	add := func(where string, raw []byte) error {
		t := bytes.TrimSpace(raw)
		if len(t) == 0 || bytes.Equal(t, []byte("null")) {
			return nil
		}
		if t[0] != '{' {
			return decode.Badf(name, "%sexpected an object, found %s", where, decode.Quote(truncate(string(t), 40)))
		}
		docs = append(docs, t)
		return nil
	}
	if trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			if err != nil {
				return nil, decode.Badf(name, "%s", jsonStreamError(data, dec, err))
			}
			if err := add("", raw); err != nil {
				return nil, err
			}
		}
	}
	r := decode.NewYAMLReader(data)
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, decode.Badf(name, "%v", err)
		}
		where := ""
		if n > 1 {
			where = fmt.Sprintf("YAML document %d: ", n)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := decode.ToJSON(doc)
		if err != nil {
			return nil, decode.Badf(name, "%s%v", where, err)
		}
		if err := add(where, js); err != nil {
			return nil, err
		}
	}
}

// jsonStreamError words an error of dec, a JSON stream decoder over data,
// with where it happened.
func jsonStreamError(data []byte, dec *json.Decoder, err error) string {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return decode.SyntaxMessage(data, se.Offset, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return decode.SyntaxMessage(data, int64(len(data)), err.Error())
	}
	return decode.Escape(strings.TrimPrefix(err.Error(), "json: "))
}

// decodePod decodes one pod object. Quantities are checked first so that a bad
// one is reported with its field path rather than as a bare parse error.
func decodePod(file, where string, raw []byte, strict bool) (*v1.Pod, error) {
	var generic map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a number beyond float64 (1e400) is then checked as a quantity
	if err := dec.Decode(&generic); err != nil {
		return nil, decode.Badf(file, "%s: %s", where, jsonStreamError(raw, dec, err))
	}
	if kind, _ := generic["kind"].(string); kind != "" && kind != "Pod" {
		return nil, decode.Badf(file, "%s: kind %s is not a Pod", where, decode.Quote(kind))
	}
	meta, _ := generic["metadata"].(map[string]any)
	podName, isString := meta["name"].(string)
	if v, set := meta["name"]; set && !isString {
		return nil, decode.Badf(file, "%s: metadata.name: %s: not a string", where, decode.Show(v))
	}
	if podName == "" {
		return nil, decode.Badf(file, "%s: pod has no metadata.name", where)
	}
	where = "pod " + decode.Escape(podName)
	if ns, _ := meta["namespace"].(string); ns != "" {
		where = "pod " + decode.Escape(ns+"/"+podName)
	}
	if err := checkQuantities(generic); err != nil {
		return nil, decode.Badf(file, "%s: %v", where, err)
	}
	pod := new(v1.Pod)
	unmarshal := decode.Lenient
	if strict {
		unmarshal = decode.Strict
	}
	if err := unmarshal(raw, pod); err != nil {
		return nil, decode.Badf(file, "%s: %v", where, err)
	}
	return pod, nil
}

// checkQuantities validates every resource quantity in a pod's spec and reports
// the first bad one as "field: value: reason". Quantities must not be negative,
// and must fit the int64 the fit check and eviction keep them in (see
// quantity.FitsInt64): a larger one would wrap into a wrong answer.
func checkQuantities(pod map[string]any) error {
	spec, _ := pod["spec"].(map[string]any)
	if spec == nil {
		return nil
	}
	check := func(field string, list any) error {
		m, _ := list.(map[string]any)
		for name, raw := range m {
			f := field + "." + name
			s, ok := raw.(string)
			if !ok {
				n, isNum := raw.(json.Number)
				if !isNum {
					return fmt.Errorf("%s: %s: not a quantity", f, decode.Show(raw))
				}
				s = string(n)
			}
			q, err := quantity.Parse(s)
			if err != nil {
				return fmt.Errorf("%s: %s: not a valid quantity", f, decode.Quote(s))
			}
			if q.Sign() < 0 {
				return fmt.Errorf("%s: %s: must not be negative", f, decode.Quote(s))
			}
			if !quantity.FitsInt64(name, q) {
				return fmt.Errorf("%s: %s: too large", f, decode.Quote(s))
			}
		}
		return nil
	}
	for _, group := range []string{"initContainers", "containers", "ephemeralContainers"} {
		ctrs, _ := spec[group].([]any)
		for i, c := range ctrs {
			cm, _ := c.(map[string]any)
			res, _ := cm["resources"].(map[string]any)
			for _, kind := range []string{"requests", "limits"} {
				if err := check(fmt.Sprintf("spec.%s[%d].resources.%s", group, i, kind), res[kind]); err != nil {
					return err
				}
			}
		}
	}
	if err := check("spec.overhead", spec["overhead"]); err != nil {
		return err
	}
	res, _ := spec["resources"].(map[string]any)
	for _, kind := range []string{"requests", "limits"} {
		if err := check("spec.resources."+kind, res[kind]); err != nil {
			return err
		}
	}
	vols, _ := spec["volumes"].([]any)
	for i, v := range vols {
		vm, _ := v.(map[string]any)
		ed, _ := vm["emptyDir"].(map[string]any)
		if sl, ok := ed["sizeLimit"]; ok {
			if err := check(fmt.Sprintf("spec.volumes[%d].emptyDir", i), map[string]any{"sizeLimit": sl}); err != nil {
				return err
			}
		}
	}
	return nil
}

// ParseSummary parses data, read from name (which errors name), as a kubelet
// Summary API document (the JSON of
// `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary`). It must have
// node stats. Fields
// the vendored stats API does not know are ignored, so a newer kubelet's
// Summary loads. A byte, inode or count gauge above math.MaxInt64 is rejected.
func ParseSummary(name string, data []byte) (*statsapi.Summary, error) {
	return parseSummary(name, data, false)
}

// ParseSummaryStrict parses like ParseSummary but rejects fields that are not
// Summary fields, naming them with their path: for hand-written input such as
// simulation scenarios.
func ParseSummaryStrict(name string, data []byte) (*statsapi.Summary, error) {
	return parseSummary(name, data, true)
}

func parseSummary(name string, data []byte, strict bool) (*statsapi.Summary, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, decode.Badf(name, "file is empty")
	}
	js, err := decode.ToJSON(data)
	if err != nil {
		return nil, decode.Badf(name, "%v", err)
	}
	if t := bytes.TrimSpace(js); len(t) > 0 && t[0] != '{' && !bytes.Equal(t, []byte("null")) {
		return nil, decode.Badf(name, "not a stats Summary object: found %s", jsonKind(t[0]))
	}
	// One decoding pass, which also tells a missing node from an empty one.
	var doc summaryDoc
	if strict {
		if err := decode.Strict(js, &doc); err != nil {
			return nil, decode.Badf(name, "%v", err)
		}
	} else if err := decode.Lenient(js, &doc); err != nil {
		return nil, decode.Badf(name, "%v", err)
	}
	if doc.Node == nil {
		return nil, decode.Badf(name, "summary has no node stats (field \"node\")")
	}
	s := &statsapi.Summary{Node: *doc.Node, Pods: doc.Pods}
	if err := checkGauges(s); err != nil {
		return nil, decode.Badf(name, "%v", err)
	}
	for i, p := range s.Pods {
		if p.PodRef.Name == "" {
			return nil, decode.Badf(name, "pods[%d]: podRef.name is empty", i)
		}
	}
	if n := s.Node; n.Memory == nil && n.Fs == nil && n.Runtime == nil && n.Rlimit == nil && len(n.SystemContainers) == 0 {
		return nil, decode.Badf(name, "summary has no node stats (node has no memory, fs, runtime, rlimit or systemContainers)")
	}
	return s, nil
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
