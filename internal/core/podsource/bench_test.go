package podsource

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkParseManifest: decoding, defaulting, validating and making static
// one typical manifest.
func BenchmarkParseManifest(b *testing.B) {
	data := []byte(pod("web", "volumes:\n- name: v\n  emptyDir: {}",
		"ports:\n- containerPort: 80\nresources:\n  limits: {cpu: 500m, memory: 128Mi}\nvolumeMounts:\n- {name: v, mountPath: /v}\n"+
			"livenessProbe:\n  httpGet: {port: 80, path: /healthz}\nreadinessProbe:\n  tcpSocket: {port: 80}\nenv:\n- name: A\n  value: b"))
	for b.Loop() {
		if pods, errs := ParseManifest("/m/web.yaml", data, "node"); len(pods) != 1 || len(errs) > 0 {
			b.Fatalf("ParseManifest: %d pods, %v", len(pods), errs)
		}
	}
}

// BenchmarkRescan100: a rescan of a directory of 100 unchanged manifests (the
// periodic rescan and every inotify event cost this).
func BenchmarkRescan100(b *testing.B) {
	dir := b.TempDir()
	for i := range 100 {
		name := fmt.Sprintf("pod%03d", i)
		if err := writeFile(filepath.Join(dir, name+".yaml"), manifest(name, "x:1")); err != nil {
			b.Fatal(err)
		}
	}
	f, err := NewFile(FileConfig{Path: dir, NodeName: "node"}, FileDeps{})
	if err != nil {
		b.Fatal(err)
	}
	st := &scanState{files: map[string]*fileResult{}, problems: map[string]bool{}, seen: map[types.UID]string{}}
	ctx := context.Background()
	for b.Loop() {
		if pods, _, _, ok := f.scan(ctx, st); !ok || len(pods) != 100 {
			b.Fatalf("scan: %d pods, ok %v", len(pods), ok)
		}
	}
}
