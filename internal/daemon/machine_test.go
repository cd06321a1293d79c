package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestHugePages: each size's pre-allocated pages become hugepages-<size> in
// bytes (0 when none); other entries are ignored, a missing directory is none.
func TestHugePages(t *testing.T) {
	dir := t.TempDir()
	for name, n := range map[string]string{"hugepages-2048kB": "3\n", "hugepages-1048576kB": "0\n"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "nr_hugepages"), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "README"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := hugePages(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := v1.ResourceList{"hugepages-2Mi": resource.MustParse("6Mi"), "hugepages-1Gi": resource.MustParse("0")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("hugePages (-want +got):\n%s", diff)
	}
	if got, err := hugePages(filepath.Join(dir, "none")); err != nil || len(got) != 0 {
		t.Errorf("hugePages of a missing directory = %v, %v; want none", got, err)
	}
}
