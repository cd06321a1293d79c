package main

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

// explain eviction --live reads /pods, /stats/summary and /configz from a
// running agent, through its unix socket: the served configuration decides (a 50Mi hard memory
// threshold is not met by the 80Mi the example node has; the default 100Mi
// would be).
func TestExplainEvictionLive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pods, err := loadPods(ctx, "../../examples/eviction/memory/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	summary, err := loadSummary(ctx, "../../examples/eviction/memory/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	deps := server.Deps{
		Pods:    func() []*v1.Pod { return pods },
		Summary: func(context.Context) (*statsapi.Summary, error) { return summary, nil },
	}
	for _, tc := range []struct {
		name      string
		hard      map[string]string
		wantConds []string
		wantEvict string
	}{
		{"served threshold not met", map[string]string{"memory.available": "50Mi"}, []string{}, ""},
		{"served threshold met", map[string]string{"memory.available": "1Gi"}, []string{"MemoryPressure"}, "pod-c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := deps
			d.Configz = func() any {
				return map[string]any{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1", "evictionHard": tc.hard}
			}
			_, sock := serveSocket(t, d)
			for _, arg := range []string{"--live=" + sock} {
				doc := explainEvictionJSON(t, arg)
				if diff := cmp.Diff(tc.wantConds, doc.Conditions); diff != "" {
					t.Errorf("%s: conditions (-want +got):\n%s", arg, diff)
				}
				got := ""
				if doc.Evict != nil {
					got = doc.Evict.Name
				}
				if got != tc.wantEvict {
					t.Errorf("%s: evict %q, want %q", arg, got, tc.wantEvict)
				}
			}
		})
	}
}

func TestExplainEvictionLiveBadInput(t *testing.T) {
	t.Parallel()
	noConfigz := serve(t, server.Deps{Pods: func() []*v1.Pod { return nil }})
	// A read-only port serves no /configz, even with one to serve.
	readOnly := serve(t, server.Deps{Pods: func() []*v1.Pod { return nil }, Configz: func() any { return map[string]any{} }})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"with --pods", []string{"--live", "--pods", "x.json"}},
		{"not a URL", []string{"--live=localhost:10255"}},
		{"no configz", []string{"--live=" + noConfigz}},
		{"read-only port", []string{"--live=" + readOnly + "/"}},
		{"relative socket path", []string{"--live=nodekeeper.sock"}},
		{"no agent", []string{"--live=" + t.TempDir() + "/nodekeeper.sock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(t, append([]string{"explain", "eviction"}, tc.args...)...)
			if code == 0 || errOut == "" {
				t.Errorf("exit %d, stderr %q; want a failure with a message", code, errOut)
			}
			t.Log(errOut)
		})
	}
}
