package snapshot

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addFiles adds the files matching pattern to f's seed corpus.
func addFiles(f *testing.F, pattern string) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzParsePods checks that ParsePods and ParsePodsStrict never panic, fail
// only with ErrBadInput on one line, that what the strict parser accepts the
// lenient one accepts too, and that ParsePods returns named pods, none only
// for an empty list, when it succeeds.
func FuzzParsePods(f *testing.F) {
	addFiles(f, "testdata/*.yaml")
	addFiles(f, "testdata/podlist.json")
	addFiles(f, "testdata/stream.json")
	addFiles(f, "../../../examples/preemption/critical-pod.yaml")
	addFiles(f, "../../../examples/preemption/running.json")
	f.Add([]byte("kind: Pod\nmetadata: {name: y}\n"))
	f.Add([]byte(`{"kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","resources":{"limits":{"memory":1e400}}}]}}`))
	f.Add([]byte("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, resources: {requests: {cpu: .inf}}}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, strictErr := ParsePodsStrict("fuzz.yaml", data)
		oneLine(t, strictErr)
		pods, err := ParsePods("fuzz.yaml", data)
		oneLine(t, err)
		if err != nil && strictErr == nil {
			t.Fatalf("ParsePodsStrict accepted what ParsePods rejects: %v", err)
		}
		if err != nil {
			if pods != nil {
				t.Fatalf("pods returned with error %v", err)
			}
			return
		}
		// No pods is an empty list (kubectl's output for a node without
		// pods), never a file of documents that are all empty.
		if len(pods) == 0 && !bytes.Contains(data, []byte("List")) {
			t.Fatal("no pods and no error")
		}
		for i, p := range pods {
			if p == nil || p.Name == "" {
				t.Fatalf("pod %d is nil or has no name: %+v", i, p)
			}
		}
	})
}

// FuzzParseSummary checks that ParseSummary and ParseSummaryStrict never panic,
// fail only with ErrBadInput on one line, that what the strict parser accepts the
// lenient one accepts too, and that ParseSummary returns node stats, named pods
// and gauges that fit an int64 when it succeeds.
func FuzzParseSummary(f *testing.F) {
	addFiles(f, "testdata/summary*")
	addFiles(f, "../../../examples/eviction/memory/summary.json")
	f.Add([]byte(`{"node": {"nodeName": "n", "memory": {"time": "not-a-time"}}}`))
	f.Add([]byte("node:\n  memory: {availableBytes: .nan}\n"))
	f.Add([]byte(`{"node": {"nodeName": "n", "memory": {"availableByts": 1}}, "pods": [{"podRef": {"name": "a"}, "volume": [{"usedBytes": 18446744073709551615}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, strictErr := ParseSummaryStrict("fuzz.json", data)
		oneLine(t, strictErr)
		s, err := ParseSummary("fuzz.json", data)
		oneLine(t, err)
		if err != nil && strictErr == nil {
			t.Fatalf("ParseSummaryStrict accepted what ParseSummary rejects: %v", err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %q is not ErrBadInput", err)
			}
			if s != nil {
				t.Fatalf("summary returned with error %v", err)
			}
			return
		}
		if s == nil {
			t.Fatal("nil summary and no error")
		}
		for i, p := range s.Pods {
			if p.PodRef.Name == "" {
				t.Fatalf("pods[%d] has no podRef.name", i)
			}
		}
		if m := s.Node.Memory; m != nil && m.AvailableBytes != nil && *m.AvailableBytes > math.MaxInt64 {
			t.Fatalf("node.memory.availableBytes %d accepted", *m.AvailableBytes)
		}
	})
}

// oneLine fails t unless err is nil or a one-line ErrBadInput.
func oneLine(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("error %q is not ErrBadInput", err)
	}
	if strings.ContainsAny(err.Error(), "\r\n") {
		t.Fatalf("error %q is not one line", err)
	}
}
