package stats

import (
	"strings"
	"testing"
)

func TestMemoryCapacity(t *testing.T) {
	t.Parallel()
	got, err := MemoryCapacity("testdata/v1/proc")
	if err != nil {
		t.Fatal(err)
	}
	want, err := readMeminfo("testdata/v1/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	if got != int64(want.total) || got <= 0 {
		t.Errorf("MemoryCapacity = %d, want MemTotal %d", got, want.total)
	}
	if _, err := MemoryCapacity(t.TempDir()); err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Errorf("MemoryCapacity of a tree without meminfo: %v, want an error naming the file", err)
	}
}
