package kubebuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRequiredVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, gomod, want, err string
	}{
		{name: "block", gomod: "module x\n\nrequire (\n\tk8s.io/api v0.36.3\n\tk8s.io/kubernetes v1.36.3 // indirect\n)\n", want: "v1.36.3"},
		{name: "line", gomod: "module x\nrequire k8s.io/kubernetes v1.35.0\n", want: "v1.35.0"},
		{name: "tool line only", gomod: "module x\ntool k8s.io/kubernetes/cmd/kube-apiserver\n", err: "no requirement of k8s.io/kubernetes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := requiredVersion([]byte(tc.gomod), "k8s.io/kubernetes")
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff([]string{tc.want, tc.err}, []string{got, gotErr}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
