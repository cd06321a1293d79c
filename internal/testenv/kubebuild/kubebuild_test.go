package kubebuild

import (
	"path"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
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

// TestBinaryNames checks that each build names its binaries as go build -o
// DIR/ writes them, after the package's last path element: toolbuild finds
// a cached build complete by those names (the sample device plugin was first
// named "sampledeviceplugin", and its stand-in found no binary).
func TestBinaryNames(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func() (toolbuild.Spec, error){
		"APIServer": APIServer, "Node": Node, "Agnhost": Agnhost, "SampleDevicePlugin": SampleDevicePlugin,
	} {
		s, err := build()
		if err != nil {
			t.Fatal(err)
		}
		for bin, pkg := range s.Binaries {
			if want := path.Base(pkg); bin != want {
				t.Errorf("%s: binary %q of %s, want %q (go build names it so)", name, bin, pkg, want)
			}
		}
	}
}
