package qos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

func TestClass(t *testing.T) {
	t.Parallel()
	guaranteed := list(t, "cpu", "500m", "memory", "1Gi")
	tests := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{
			name: "pod without containers",
			pod:  newPod(nil),
			want: v1.PodQOSBestEffort,
		},
		{
			name: "no requests or limits",
			pod:  newPod(ctrs(ctr("a", nil, nil), ctr("b", nil, nil))),
			want: v1.PodQOSBestEffort,
		},
		{
			name: "explicit zero requests count as none",
			pod:  newPod(ctrs(ctr("a", list(t, "cpu", "0", "memory", "0"), nil))),
			want: v1.PodQOSBestEffort,
		},
		{
			name: "status class is ignored",
			pod:  newPod(ctrs(ctr("a", nil, nil)), withStatusClass(v1.PodQOSGuaranteed)),
			want: v1.PodQOSBestEffort,
		},
		{
			name: "status class is ignored the other way",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withStatusClass(v1.PodQOSBestEffort)),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "requests equal limits",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed), ctr("b", guaranteed, guaranteed))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "equal quantities in different notation",
			pod: newPod(ctrs(ctr("a",
				list(t, "cpu", "1", "memory", "1073741824"),
				list(t, "cpu", "1000m", "memory", "1Gi")))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "limits only: requests default to limits",
			pod:  newPod(ctrs(ctr("a", nil, guaranteed))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "memory request defaults to limit, cpu request given",
			pod:  newPod(ctrs(ctr("a", list(t, "cpu", "500m"), guaranteed))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "explicit request below limit is not replaced by the default",
			pod:  newPod(ctrs(ctr("a", list(t, "memory", "512Mi"), guaranteed))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "memory request only",
			pod:  newPod(ctrs(ctr("a", list(t, "memory", "4Gi"), nil))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "requests below limits",
			pod:  newPod(ctrs(ctr("a", list(t, "cpu", "100m", "memory", "1Gi"), list(t, "cpu", "1", "memory", "2Gi")))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "cpu guaranteed, memory unset",
			pod:  newPod(ctrs(ctr("a", list(t, "cpu", "1"), list(t, "cpu", "1")))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "guaranteed and best-effort containers",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed), ctr("b", nil, nil))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "best-effort init container makes a guaranteed pod burstable",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withInit(ctr("init", nil, nil))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "guaranteed init and regular containers",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withInit(ctr("init", nil, list(t, "cpu", "2", "memory", "64Mi")))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "burstable init container",
			pod:  newPod(ctrs(ctr("a", nil, nil)), withInit(ctr("init", list(t, "memory", "64Mi"), nil))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "best-effort sidecar makes a guaranteed pod burstable",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withInit(sidecar("proxy", nil, nil))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "guaranteed sidecar and regular container",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withInit(sidecar("proxy", guaranteed, guaranteed))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "extended resources alone are best effort",
			pod:  newPod(ctrs(ctr("a", list(t, "nvidia.com/gpu", "1"), list(t, "nvidia.com/gpu", "1")))),
			want: v1.PodQOSBestEffort,
		},
		{
			name: "other resources do not spoil guaranteed",
			pod: newPod(ctrs(ctr("a",
				list(t, "cpu", "1", "memory", "1Gi", "ephemeral-storage", "1Gi", "hugepages-2Mi", "64Mi"),
				list(t, "cpu", "1", "memory", "1Gi", "hugepages-2Mi", "128Mi")))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "pod-level requests equal limits override best-effort containers",
			pod:  newPod(ctrs(ctr("a", nil, nil), ctr("b", nil, nil)), withPodResources(guaranteed, guaranteed)),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "pod-level requests only",
			pod:  newPod(ctrs(ctr("a", nil, nil)), withPodResources(list(t, "cpu", "1", "memory", "1Gi"), nil)),
			want: v1.PodQOSBurstable,
		},
		{
			name: "pod-level cpu only overrides guaranteed containers",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withPodResources(list(t, "cpu", "1"), list(t, "cpu", "1"))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "pod-level limits only: requests default to the pod limits",
			pod:  newPod(ctrs(ctr("a", nil, nil)), withPodResources(nil, list(t, "cpu", "2", "memory", "2Gi"))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "pod-level limits only: requests default to smaller container requests",
			pod: newPod(ctrs(ctr("a", list(t, "cpu", "1", "memory", "1Gi"), nil)),
				withPodResources(nil, list(t, "cpu", "2", "memory", "2Gi"))),
			want: v1.PodQOSBurstable,
		},
		{
			name: "pod-level limits only: container limits become the pod requests",
			pod: newPod(ctrs(ctr("a", nil, list(t, "cpu", "1", "memory", "1Gi")), ctr("b", nil, list(t, "cpu", "1", "memory", "1Gi"))),
				withPodResources(nil, list(t, "cpu", "2", "memory", "2Gi"))),
			want: v1.PodQOSGuaranteed,
		},
		{
			name: "empty pod-level resources still take precedence",
			pod:  newPod(ctrs(ctr("a", guaranteed, guaranteed)), withPodResources(nil, nil)),
			want: v1.PodQOSBestEffort,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := tc.pod.DeepCopy()
			got := Class(tc.pod)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Class() (-want +got):\n%s", diff)
			}
			if !equality.Semantic.DeepEqual(before, tc.pod) {
				t.Errorf("Class() modified the pod:\n%s", cmp.Diff(before.Spec, tc.pod.Spec, cmp.Comparer(func(a, b v1.ResourceList) bool { return equality.Semantic.DeepEqual(a, b) })))
			}
		})
	}
}
