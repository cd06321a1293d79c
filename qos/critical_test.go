package qos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestCriticality(t *testing.T) {
	t.Parallel()
	type verdict struct {
		Static, Mirror, Critical, NodeCritical bool
		Priority                               int32
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want verdict
	}{
		{
			name: "plain API pod",
			pod:  newPod(nil),
			want: verdict{},
		},
		{
			name: "source api is not static",
			pod:  newPod(nil, withAnnotation(ConfigSourceAnnotation, "api")),
			want: verdict{},
		},
		{
			name: "static pod from file",
			pod:  newPod(nil, withAnnotation(ConfigSourceAnnotation, "file")),
			want: verdict{Static: true, Critical: true},
		},
		{
			name: "static pod from http",
			pod:  newPod(nil, withAnnotation(ConfigSourceAnnotation, "http")),
			want: verdict{Static: true, Critical: true},
		},
		{
			name: "empty source annotation is present and not api",
			pod:  newPod(nil, withAnnotation(ConfigSourceAnnotation, "")),
			want: verdict{Static: true, Critical: true},
		},
		{
			name: "mirror pod, annotation value irrelevant",
			pod:  newPod(nil, withAnnotation(ConfigMirrorAnnotation, "")),
			want: verdict{Mirror: true, Critical: true},
		},
		{
			name: "mirror pod of a static node-critical pod",
			pod: newPod(nil, withAnnotation(ConfigSourceAnnotation, "api"), withAnnotation(ConfigMirrorAnnotation, "3b1f0a"),
				withPriority(2_000_001_000, "system-node-critical")),
			want: verdict{Mirror: true, Critical: true, NodeCritical: true, Priority: 2_000_001_000},
		},
		{
			name: "priority just below critical",
			pod:  newPod(nil, withPriority(SystemCriticalPriority-1, "high")),
			want: verdict{Priority: 1_999_999_999},
		},
		{
			name: "system-cluster-critical",
			pod:  newPod(nil, withPriority(SystemCriticalPriority, "system-cluster-critical")),
			want: verdict{Critical: true, Priority: 2_000_000_000},
		},
		{
			name: "system-node-critical",
			pod:  newPod(nil, withPriority(2_000_001_000, "system-node-critical")),
			want: verdict{Critical: true, NodeCritical: true, Priority: 2_000_001_000},
		},
		{
			name: "node-critical class name without priority is not critical",
			pod:  newPod(nil, withPriorityClassName("system-node-critical")),
			want: verdict{},
		},
		{
			name: "node-critical class name with a low priority is not critical",
			pod:  newPod(nil, withPriority(0, "system-node-critical")),
			want: verdict{},
		},
		{
			name: "static pod with the node-critical class name",
			pod:  newPod(nil, withAnnotation(ConfigSourceAnnotation, "file"), withPriorityClassName("system-node-critical")),
			want: verdict{Static: true, Critical: true, NodeCritical: true},
		},
		{
			name: "negative priority",
			pod:  newPod(nil, withPriority(-10, "low")),
			want: verdict{Priority: -10},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := verdict{
				Static:       IsStatic(tc.pod),
				Mirror:       IsMirror(tc.pod),
				Critical:     IsCritical(tc.pod),
				NodeCritical: IsNodeCritical(tc.pod),
				Priority:     Priority(tc.pod),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
