// Package rawget reads a path through a kubeconfig as `kubectl --kubeconfig
// FILE get --raw PATH` does: client-go's kubeconfig loader, then a REST
// client's GET. The tests of `nodekeeper kubeconfig` use it where no
// kubectl binary is built.
package rawget

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Get returns the body of GET path through the kubeconfig file, failing t
// on any error.
func Get(t testing.TB, file, path string) []byte {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := rc.Get().RequestURI(path).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, file, err)
	}
	return data
}
