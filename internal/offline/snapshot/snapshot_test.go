package snapshot

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// podView is the part of a pod the tests compare: identity, status and the
// quantities the loader validates, keyed "container/resource".
type podView struct {
	Key      string
	UID      string
	Phase    v1.PodPhase
	QOS      v1.PodQOSClass
	Priority int32
	Requests map[string]string
	Limits   map[string]string
}

func viewPods(pods []*v1.Pod) []podView {
	var out []podView
	for _, p := range pods {
		v := podView{
			Key:   p.Namespace + "/" + p.Name,
			UID:   string(p.UID),
			Phase: p.Status.Phase,
			QOS:   p.Status.QOSClass,
		}
		if p.Spec.Priority != nil {
			v.Priority = *p.Spec.Priority
		}
		for _, c := range append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			for name, q := range c.Resources.Requests {
				if v.Requests == nil {
					v.Requests = map[string]string{}
				}
				v.Requests[c.Name+"/"+string(name)] = q.String()
			}
			for name, q := range c.Resources.Limits {
				if v.Limits == nil {
					v.Limits = map[string]string{}
				}
				v.Limits[c.Name+"/"+string(name)] = q.String()
			}
		}
		out = append(out, v)
	}
	return out
}

// webAndBatch are the two pods of podlist.json and list.yaml.
var webAndBatch = []podView{
	{
		Key:      "default/web-7d4b9c6f5d-x2kqp",
		UID:      "5f3c2a9e-8d7b-4c61-a2f0-1e9d8c7b6a54",
		Phase:    v1.PodRunning,
		QOS:      v1.PodQOSBurstable,
		Requests: map[string]string{"nginx/cpu": "100m", "nginx/memory": "128Mi"},
		Limits:   map[string]string{"nginx/memory": "256Mi"},
	},
	{
		Key:      "jobs/batch-job-8xk2v",
		UID:      "a7e3d1c2-6b5f-4e09-8c3d-9f2e1a0b7c66",
		Phase:    v1.PodRunning,
		QOS:      v1.PodQOSBestEffort,
		Priority: 1000,
	},
}

// streamPods are the pods of stream.yaml and stream.json.
var streamPods = []podView{
	{Key: "default/a", Requests: map[string]string{"c/memory": "64Mi"}},
	{Key: "default/b"},
	{Key: "other/c"},
}

func TestLoadPods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want []podView
	}{
		{name: "PodList JSON", file: "testdata/podlist.json", want: webAndBatch},
		{name: "kubectl List YAML", file: "testdata/list.yaml", want: webAndBatch},
		{
			name: "single Pod",
			file: "testdata/pod.yaml",
			want: []podView{{
				Key:   "data/db-0",
				UID:   "1c9d7e2a-4b3f-4a8e-9d61-7b2c0e5f3a98",
				Phase: v1.PodRunning,
				QOS:   v1.PodQOSGuaranteed,
				Requests: map[string]string{
					"init-perms/cpu": "50m", "init-perms/memory": "32Mi",
					"postgres/cpu": "1", "postgres/memory": "2Gi", "postgres/ephemeral-storage": "1Gi",
				},
				Limits: map[string]string{
					"postgres/cpu": "1", "postgres/memory": "2Gi", "postgres/ephemeral-storage": "2Gi",
				},
			}},
		},
		{name: "YAML documents separated by ---", file: "testdata/stream.yaml", want: streamPods},
		{name: "concatenated JSON objects", file: "testdata/stream.json", want: streamPods},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pods, err := loadPods(tc.file)
			if err != nil {
				t.Fatalf("loadPods(%q): %v", tc.file, err)
			}
			if diff := cmp.Diff(tc.want, viewPods(pods)); diff != "" {
				t.Errorf("loadPods(%q) (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

func TestLoadPodsKeepsEverything(t *testing.T) {
	t.Parallel()
	pods, err := loadPods("testdata/pod.yaml")
	if err != nil {
		t.Fatalf("loadPods: %v", err)
	}
	p := pods[0]
	if got := p.Spec.Overhead.Memory().String(); got != "16Mi" {
		t.Errorf("overhead memory = %s, want 16Mi", got)
	}
	if got := p.Spec.Volumes[0].EmptyDir.SizeLimit.String(); got != "500Mi" {
		t.Errorf("emptyDir sizeLimit = %s, want 500Mi", got)
	}
}

func TestLoadPod(t *testing.T) {
	t.Parallel()
	p, err := loadPod("testdata/pod.yaml")
	if err != nil {
		t.Fatalf("loadPod: %v", err)
	}
	if p.Name != "db-0" {
		t.Errorf("loadPod name = %q, want db-0", p.Name)
	}
	_, err = loadPod("testdata/podlist.json")
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "testdata/podlist.json") ||
		!strings.Contains(err.Error(), "found 2") {
		t.Errorf("loadPod of two pods: %v, want an ErrBadInput naming the file and the count", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	for _, load := range []func(string) error{
		func(p string) error { _, err := loadPods(p); return err },
		func(p string) error { _, err := loadPod(p); return err },
		func(p string) error { _, err := loadSummary(p); return err },
	} {
		err := load("testdata/no-such-file")
		if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrBadInput) ||
			!strings.Contains(err.Error(), "testdata/no-such-file") {
			t.Errorf("load of a missing file: %v, want fs.ErrNotExist and ErrBadInput naming the file", err)
		}
	}
}

func TestParsePodsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want []string // substrings of the message besides the file name
	}{
		{name: "empty file", data: "", want: []string{"file is empty"}},
		{name: "blank file", data: " \n\t\n", want: []string{"file is empty"}},
		{name: "only empty documents", data: "---\n---\n", want: []string{"no pods found"}},
		{
			name: "malformed JSON",
			data: `{"kind": "Pod", "metadata": {"name": "a"`,
			want: []string{"truncated: unexpected end of input at line 1, column 41 (byte 40)"},
		},
		{
			name: "malformed YAML",
			data: "kind: Pod\nmetadata:\n  name: [a\n",
			want: []string{"yaml"},
		},
		{
			name: "a document that is not an object",
			data: "- kind: Pod\n",
			want: []string{"expected an object"},
		},
		{
			name: "pod without name",
			data: "kind: Pod\nmetadata:\n  namespace: default\n",
			want: []string{"document 1", "no metadata.name"},
		},
		{
			name: "list item without name",
			data: `{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "a"}}, {"kind": "Pod", "metadata": {}}]}`,
			want: []string{"items[1]", "no metadata.name"},
		},
		{
			name: "wrong kind",
			data: "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n",
			want: []string{`kind "Service"`},
		},
		{
			name: "wrong kind in a list",
			data: `{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "node-1"}}]}`,
			want: []string{"items[0]", `kind "Node"`},
		},
		{
			name: "items of the wrong type",
			data: `{"kind": "PodList", "items": {"a": 1}}`,
			want: []string{`items: want a list of pods, found "{\"a\": 1}"`},
		},
		{
			name: "bad request quantity",
			data: "kind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n        memory: 12XB\n",
			want: []string{"pod default/web", "spec.containers[0].resources.requests.memory", `"12XB"`},
		},
		{
			name: "negative request",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: a\n  - name: b\n    resources:\n      requests:\n        cpu: -100m\n",
			want: []string{"pod web", "spec.containers[1].resources.requests.cpu", `"-100m"`, "negative"},
		},
		{
			name: "bad init container limit",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  initContainers:\n  - name: i\n    resources:\n      limits:\n        memory: lots\n",
			want: []string{"spec.initContainers[0].resources.limits.memory", `"lots"`},
		},
		{
			name: "quantity of the wrong type",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n        cpu: true\n",
			want: []string{"spec.containers[0].resources.requests.cpu", "true", "not a quantity"},
		},
		{
			name: "bad overhead",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  overhead:\n    memory: -1Mi\n",
			want: []string{"spec.overhead.memory", `"-1Mi"`},
		},
		{
			name: "bad pod-level resources",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  resources:\n    limits:\n      cpu: 1x\n",
			want: []string{"spec.resources.limits.cpu", `"1x"`},
		},
		{
			name: "bad emptyDir size limit",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  volumes:\n  - name: v\n    emptyDir:\n      sizeLimit: big\n",
			want: []string{"spec.volumes[0].emptyDir.sizeLimit", `"big"`},
		},
		{
			name: "field of the wrong type",
			data: "kind: Pod\nmetadata:\n  name: web\nspec:\n  priority: high\n",
			want: []string{"pod web", "priority"},
		},
		{
			name: "second document bad",
			data: "kind: Pod\nmetadata:\n  name: a\n---\nkind: Pod\nmetadata:\n  name: b\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n        memory: x\n",
			want: []string{"pod b", "spec.containers[0].resources.requests.memory", `"x"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pods, err := ParsePods("pods.yaml", []byte(tc.data))
			if err == nil {
				t.Fatalf("ParsePods = %v, want an error", viewPods(pods))
			}
			if !errors.Is(err, ErrBadInput) {
				t.Errorf("error %q is not ErrBadInput", err)
			}
			msg := err.Error()
			for _, s := range append([]string{"pods.yaml: "}, tc.want...) {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not contain %q", msg, s)
				}
			}
		})
	}
}

// summaryView is the part of a Summary the tests compare.
type summaryView struct {
	Node           string
	MemAvailable   uint64
	NodeFsAvail    uint64
	ImageFsAvail   uint64
	MaxPID         int64
	SysContainers  []string
	PodWorkingSets map[string]uint64
}

func viewSummary(s *statsapi.Summary) summaryView {
	v := summaryView{Node: s.Node.NodeName}
	if m := s.Node.Memory; m != nil && m.AvailableBytes != nil {
		v.MemAvailable = *m.AvailableBytes
	}
	if f := s.Node.Fs; f != nil && f.AvailableBytes != nil {
		v.NodeFsAvail = *f.AvailableBytes
	}
	if r := s.Node.Runtime; r != nil && r.ImageFs != nil && r.ImageFs.AvailableBytes != nil {
		v.ImageFsAvail = *r.ImageFs.AvailableBytes
	}
	if r := s.Node.Rlimit; r != nil && r.MaxPID != nil {
		v.MaxPID = *r.MaxPID
	}
	for _, c := range s.Node.SystemContainers {
		v.SysContainers = append(v.SysContainers, c.Name)
	}
	for _, p := range s.Pods {
		if v.PodWorkingSets == nil {
			v.PodWorkingSets = map[string]uint64{}
		}
		var ws uint64
		if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			ws = *p.Memory.WorkingSetBytes
		}
		v.PodWorkingSets[p.PodRef.Namespace+"/"+p.PodRef.Name] = ws
	}
	return v
}

func TestLoadSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want summaryView
	}{
		{
			name: "node and pods",
			file: "testdata/summary.json",
			want: summaryView{
				Node:          "node-1",
				MemAvailable:  6000000000,
				NodeFsAvail:   40000000000,
				ImageFsAvail:  40000000000,
				MaxPID:        4194304,
				SysContainers: []string{"kubelet", "pods"},
				PodWorkingSets: map[string]uint64{
					"default/web-7d4b9c6f5d-x2kqp": 181000000,
					"jobs/batch-job-8xk2v":         1500000000,
				},
			},
		},
		{
			name: "node only, as YAML",
			file: "testdata/summary-node-only.yaml",
			want: summaryView{Node: "node-2", MemAvailable: 1000000},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := loadSummary(tc.file)
			if err != nil {
				t.Fatalf("loadSummary(%q): %v", tc.file, err)
			}
			if diff := cmp.Diff(tc.want, viewSummary(s)); diff != "" {
				t.Errorf("loadSummary(%q) (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

func TestLoadSummaryWithoutNode(t *testing.T) {
	t.Parallel()
	_, err := loadSummary("testdata/summary-no-node.json")
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "testdata/summary-no-node.json") ||
		!strings.Contains(err.Error(), `"node"`) {
		t.Errorf("loadSummary without node stats: %v, want an ErrBadInput naming the file and the field", err)
	}
}

func TestParseSummaryErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want []string
	}{
		{name: "empty file", data: "", want: []string{"file is empty"}},
		{name: "no node", data: `{"pods": []}`, want: []string{"no node stats", `"node"`}},
		{name: "null node", data: `{"node": null}`, want: []string{"no node stats"}},
		{name: "null document", data: "null", want: []string{"no node stats"}},
		{name: "truncated JSON", data: `{"node": {"nodeName": "n"}`, want: []string{"truncated: unexpected end of input at line 1, column 27 (byte 26)"}},
		{name: "not an object", data: `[{"node": {}}]`, want: []string{"not a stats Summary object"}},
		{name: "field of the wrong type", data: `{"node": {"nodeName": 5}}`, want: []string{"nodeName"}},
		{
			name: "pod without podRef.name",
			data: `{"node": {"nodeName": "n"}, "pods": [{"podRef": {"name": "a", "namespace": "x"}}, {"podRef": {"namespace": "x"}}]}`,
			want: []string{"pods[1]", "podRef.name"},
		},
		{
			name: "pod without podRef",
			data: `{"node": {"nodeName": "n"}, "pods": [{"cpu": {}}]}`,
			want: []string{"pods[0]", "podRef.name"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSummary("summary.json", []byte(tc.data))
			if err == nil {
				t.Fatalf("ParseSummary = %+v, want an error", s)
			}
			if !errors.Is(err, ErrBadInput) {
				t.Errorf("error %q is not ErrBadInput", err)
			}
			msg := err.Error()
			for _, want := range append([]string{"summary.json: "}, tc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
		})
	}
}

// TestParsePodsEmptyList: kubectl prints an empty List for a node without
// pods; that is no pods, not an error. A single pod is still required where
// one is asked for.
func TestParsePodsEmptyList(t *testing.T) {
	t.Parallel()
	for _, data := range []string{`{"kind": "List", "apiVersion": "v1", "items": []}`, "apiVersion: v1\nkind: PodList\nitems: []\n"} {
		pods, err := ParsePods("empty.json", []byte(data))
		if err != nil || len(pods) != 0 {
			t.Errorf("ParsePods(%q) = %d pods, %v; want none and no error", data, len(pods), err)
		}
	}
	if _, err := loadPod("testdata/emptylist.json"); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "found 0") {
		t.Errorf("loadPod of an empty list: %v, want an ErrBadInput saying it found 0", err)
	}
}
