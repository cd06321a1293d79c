package kubeclient

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PodObjects is what a pod's volumes and environment read from the API
// server (ConfigMaps, Secrets, service account tokens, Services) over a
// client: it implements volumes.API, which the daemon passes to the pod
// runtime. Its NotFound errors name the kind in the singular, as the
// kubelet's do (`configmap "x" not found`). Its methods may be called from
// any goroutine, as the client's.
type PodObjects struct {
	Client Interface
}

// notFound rewrites a NotFound error to name resource in the singular.
func notFound(err error, resource, name string) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
	}
	return err
}

// GetConfigMap returns the ConfigMap namespace/name.
func (c PodObjects) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	cm, err := c.Client.ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	return cm, notFound(err, "configmap", name)
}

// GetSecret returns the Secret namespace/name.
func (c PodObjects) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s, err := c.Client.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	return s, notFound(err, "secret", name)
}

// CreateToken mints a token for the service account namespace/name
// (TokenRequest); req is not changed.
func (c PodObjects) CreateToken(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	tr, err := c.Client.ServiceAccounts(namespace).CreateToken(ctx, name, req.DeepCopy(), metav1.CreateOptions{})
	return tr, notFound(err, "serviceaccount", name)
}

// GetService returns the Service namespace/name.
func (c PodObjects) GetService(ctx context.Context, namespace, name string) (*v1.Service, error) {
	s, err := c.Client.Services(namespace).Get(ctx, name, metav1.GetOptions{})
	return s, notFound(err, "service", name)
}

// ListServices returns the Services of namespace.
func (c PodObjects) ListServices(ctx context.Context, namespace string) ([]v1.Service, error) {
	l, err := c.Client.Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
