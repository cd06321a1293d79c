// Package snapshot loads the files an SRE takes from a real node or cluster:
// pods as `kubectl get pods -o json|yaml` prints them and the kubelet's Summary API
// JSON. Every error names the file and, where it can, the field and the value.
package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/decode"
	"github.com/nodekeeper/nodekeeper/internal/quantity"
)

// ErrBadInput is the class of every error this package returns for malformed input (decode.ErrBadInput).
var ErrBadInput = decode.ErrBadInput

// LoadPods reads pods from path. The file may hold a PodList or a v1 List of pods
// (kubectl get pods -o json|yaml), a single Pod, or a stream of Pods (JSON objects
// one after another, or YAML documents separated by ---). An empty list, as
// kubectl prints for a node without pods, gives no pods and no error.
func LoadPods(path string) ([]*v1.Pod, error) {
	data, err := decode.ReadFile(context.Background(), path, decode.DefaultMaxInputSize)
	if err != nil {
		return nil, decode.Bad(err)
	}
	return ParsePods(path, data)
}

// LoadPod reads exactly one pod from path (a Pod, or a list holding one pod).
func LoadPod(path string) (*v1.Pod, error) {
	pods, err := LoadPods(path)
	if err != nil {
		return nil, err
	}
	return OnePod(path, pods)
}

// OnePod returns the one pod of pods, read from path, or bad input when there
// are none or more.
func OnePod(path string, pods []*v1.Pod) (*v1.Pod, error) {
	if len(pods) != 1 {
		return nil, decode.Badf(path, "want exactly one pod, found %d", len(pods))
	}
	return pods[0], nil
}

// ParsePods parses data as LoadPods does; name is used in errors. Fields that
// k8s.io/api does not know are ignored, so output of a newer kubectl loads.
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
		var head struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			return nil, decode.Badf(name, "%v", err)
		}
		switch head.Kind {
		case "PodList", "List":
			lists++
			for i, item := range head.Items {
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

// splitDocuments turns a JSON or YAML stream into JSON documents, skipping empty ones.
func splitDocuments(name string, data []byte) ([]json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, decode.Badf(name, "file is empty")
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var docs []json.RawMessage
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, decode.Badf(name, "%v", err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		if bytes.TrimSpace(raw)[0] != '{' {
			return nil, decode.Badf(name, "expected an object, found %s", truncate(string(raw), 40))
		}
		docs = append(docs, raw)
	}
	return docs, nil
}

// decodePod decodes one pod object. Quantities are checked first so that a bad
// one is reported with its field path rather than as a bare parse error.
func decodePod(file, where string, raw []byte, strict bool) (*v1.Pod, error) {
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return nil, decode.Badf(file, "%s: %v", where, err)
	}
	if kind, _ := generic["kind"].(string); kind != "" && kind != "Pod" {
		return nil, decode.Badf(file, "%s: kind %q is not a Pod", where, kind)
	}
	meta, _ := generic["metadata"].(map[string]any)
	podName, _ := meta["name"].(string)
	if podName == "" {
		return nil, decode.Badf(file, "%s: pod has no metadata.name", where)
	}
	where = "pod " + podName
	if ns, _ := meta["namespace"].(string); ns != "" {
		where = "pod " + ns + "/" + podName
	}
	if err := checkQuantities(generic); err != nil {
		return nil, decode.Badf(file, "%s: %v", where, err)
	}
	pod := new(v1.Pod)
	unmarshal := func(js []byte, v any) error { return json.Unmarshal(js, v) }
	if strict {
		unmarshal = decode.Strict
	}
	if err := unmarshal(raw, pod); err != nil {
		return nil, decode.Badf(file, "%s: %v", where, strings.TrimPrefix(err.Error(), "json: "))
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
				if n, isNum := raw.(float64); isNum {
					s = fmt.Sprint(n)
				} else {
					return fmt.Errorf("%s: %v: not a quantity", f, raw)
				}
			}
			q, err := quantity.Parse(s)
			if err != nil {
				return fmt.Errorf("%s: %q: not a valid quantity", f, s)
			}
			if q.Sign() < 0 {
				return fmt.Errorf("%s: %q: must not be negative", f, s)
			}
			if !quantity.FitsInt64(name, q) {
				return fmt.Errorf("%s: %q: too large", f, s)
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

// LoadSummary reads a kubelet Summary API document (the JSON of
// `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary`). It must have node stats.
func LoadSummary(path string) (*statsapi.Summary, error) {
	data, err := decode.ReadFile(context.Background(), path, decode.DefaultMaxInputSize)
	if err != nil {
		return nil, decode.Bad(err)
	}
	return ParseSummary(path, data)
}

// ParseSummary parses data as LoadSummary does; name is used in errors. Fields
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
	} else if err := json.Unmarshal(js, &doc); err != nil {
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
