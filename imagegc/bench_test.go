package imagegc

import (
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchNode is a node with n images and m running containers using the first m/2
// images (two containers per image), a quarter of the images recently used.
func benchNode(n, m int) ([]*runtimeapi.Image, []*runtimeapi.Container, map[string]*Record) {
	images := make([]*runtimeapi.Image, n)
	records := make(map[string]*Record, n)
	for i := range images {
		id := fmt.Sprintf("sha256:%064x", i)
		images[i] = &runtimeapi.Image{Id: id, Size: uint64(1<<20 + i), RepoTags: []string{fmt.Sprintf("registry.example.com/app-%d:v1", i)}}
		r := &Record{FirstDetected: t0.Add(-time.Duration(i%1000) * time.Hour)}
		if i%4 == 0 {
			r.LastUsed = t0.Add(-time.Duration(i%97) * time.Minute)
		}
		records[id] = r
	}
	containers := make([]*runtimeapi.Container, m)
	for i := range containers {
		containers[i] = &runtimeapi.Container{
			Id: fmt.Sprintf("c%d", i), ImageRef: images[i/2].Id,
			State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		}
	}
	return images, containers, records
}

// BenchmarkGCPlan is one periodic pass's decision on a node with 10,000 images
// and 1,000 running containers: the in-use set, detection and the plan.
func BenchmarkGCPlan(b *testing.B) {
	images, containers, records := benchNode(10_000, 1_000)
	fs := FsStats{CapacityBytes: 100 << 30, AvailableBytes: 5 << 30} // 95%: frees 15 GiB
	p := DefaultPolicy()
	b.ReportAllocs()
	for b.Loop() {
		inUse := make(InUse, len(containers))
		for _, c := range containers {
			inUse[ContainerImageRef(c)] = KeepInUse
		}
		Detect(records, images, inUse, t0, t0)
		pl, err := Decide(records, inUse, fs, p, t0.Add(-time.Hour), t0)
		if err != nil || len(pl.Remove) == 0 {
			b.Fatalf("plan: %v, %d removals", err, len(pl.Remove))
		}
	}
}

// BenchmarkDecide is the plan alone (records already detected).
func BenchmarkDecide(b *testing.B) {
	_, containers, records := benchNode(10_000, 1_000)
	inUse := make(InUse, len(containers))
	for _, c := range containers {
		inUse[ContainerImageRef(c)] = KeepInUse
	}
	fs := FsStats{CapacityBytes: 100 << 30, AvailableBytes: 5 << 30}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(records, inUse, fs, DefaultPolicy(), t0.Add(-time.Hour), t0); err != nil {
			b.Fatal(err)
		}
	}
}
