package snapshot

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// TestParsePodsQuantityRange: a pod quantity that does not fit the int64 the fit
// check and eviction use (millicores for cpu) is "too large", as --memory-capacity
// is; the parser clamps 8Ei and above to MaxInt64, so those are too large too.
func TestParsePodsQuantityRange(t *testing.T) {
	t.Parallel()
	pod := func(field string) string {
		return `{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {` + field + `}}`
	}
	ctr := func(resources string) string {
		return pod(`"containers": [{"name": "c", "resources": ` + resources + `}]`)
	}
	tests := []struct {
		name string
		data string
		want string // "" when the pod loads
	}{
		{
			name: "memory request beyond int64",
			data: ctr(`{"requests": {"memory": "1e30"}}`),
			want: `pods.json: pod ns/p: spec.containers[0].resources.requests.memory: "1e30": too large`,
		},
		{
			name: "memory limit given as a JSON number",
			data: ctr(`{"limits": {"memory": 1e30}}`),
			want: `pods.json: pod ns/p: spec.containers[0].resources.limits.memory: "1e30": too large`,
		},
		{
			name: "8Ei overhead, clamped to MaxInt64 by the parser",
			data: pod(`"containers": [{"name": "c"}], "overhead": {"memory": "8Ei"}`),
			want: `pods.json: pod ns/p: spec.overhead.memory: "8Ei": too large`,
		},
		{
			name: "cpu whose millicores overflow",
			data: ctr(`{"requests": {"cpu": "1e16"}}`),
			want: `pods.json: pod ns/p: spec.containers[0].resources.requests.cpu: "1e16": too large`,
		},
		{
			name: "emptyDir size limit",
			data: pod(`"containers": [{"name": "c"}], "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "16Ei"}}]`),
			want: `pods.json: pod ns/p: spec.volumes[0].emptyDir.sizeLimit: "16Ei": too large`,
		},
		{
			name: "7Ei memory and 9e15 cpu fit",
			data: ctr(`{"requests": {"memory": "7Ei", "cpu": "9e15"}}`),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, parse := range []func(string, []byte) ([]*v1.Pod, error){ParsePods, ParsePodsStrict} {
				_, err := parse("pods.json", []byte(tc.data))
				if tc.want == "" {
					if err != nil {
						t.Errorf("%v, want no error", err)
					}
					continue
				}
				if !errors.Is(err, ErrBadInput) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("%v, want a one-line ErrBadInput", err)
				}
				if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
			}
		})
	}
}
