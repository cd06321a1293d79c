package snapshot

import (
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

// FuzzParsePods checks that ParsePods never panics, fails only with ErrBadInput,
// and returns at least one named pod when it succeeds.
func FuzzParsePods(f *testing.F) {
	addFiles(f, "testdata/*.yaml")
	addFiles(f, "testdata/podlist.json")
	addFiles(f, "testdata/stream.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := ParsePods("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %q is not ErrBadInput", err)
			}
			if pods != nil {
				t.Fatalf("pods returned with error %v", err)
			}
			return
		}
		if len(pods) == 0 {
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
	f.Add([]byte(`{"node": {"nodeName": "n", "memory": {"availableByts": 1}}, "pods": [{"podRef": {"name": "a"}, "volume": [{"usedBytes": 18446744073709551615}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, strictErr := ParseSummaryStrict("fuzz.json", data)
		if strictErr != nil && (!errors.Is(strictErr, ErrBadInput) || strings.Contains(strictErr.Error(), "\n")) {
			t.Fatalf("strict error %q is not a one-line ErrBadInput", strictErr)
		}
		s, err := ParseSummary("fuzz.json", data)
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
