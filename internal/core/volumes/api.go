package volumes

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
)

// API is what the volumes and the environment read from the API server. A
// missing object is an error for which apierrors.IsNotFound holds. All
// methods may be called from any goroutine.
type API interface {
	// GetConfigMap returns the ConfigMap namespace/name.
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	// GetSecret returns the Secret namespace/name.
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// CreateToken mints a token for the service account namespace/name
	// (TokenRequest); the request is not changed.
	CreateToken(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	// GetService returns the Service namespace/name.
	GetService(ctx context.Context, namespace, name string) (*v1.Service, error)
	// ListServices returns the Services of namespace.
	ListServices(ctx context.Context, namespace string) ([]v1.Service, error)
}

// Client is the part of the API client ClientAPI uses;
// kubeclient.Interface implements it.
type Client interface {
	ConfigMaps(namespace string) kubeclient.ConfigMapInterface
	Secrets(namespace string) kubeclient.SecretInterface
	ServiceAccounts(namespace string) kubeclient.ServiceAccountInterface
	Services(namespace string) kubeclient.ServiceInterface
}

// ClientAPI is API over a client. Its NotFound errors name the kind in
// the singular, as the kubelet's do (`configmap "x" not found`).
type ClientAPI struct {
	Client Client
}

var _ API = ClientAPI{}

// notFound rewrites a NotFound error to name resource in the singular.
func notFound(err error, resource, name string) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
	}
	return err
}

// GetConfigMap implements API.
func (c ClientAPI) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	cm, err := c.Client.ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	return cm, notFound(err, "configmap", name)
}

// GetSecret implements API.
func (c ClientAPI) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s, err := c.Client.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	return s, notFound(err, "secret", name)
}

// CreateToken implements API.
func (c ClientAPI) CreateToken(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	tr, err := c.Client.ServiceAccounts(namespace).CreateToken(ctx, name, req.DeepCopy(), metav1.CreateOptions{})
	return tr, notFound(err, "serviceaccount", name)
}

// GetService implements API.
func (c ClientAPI) GetService(ctx context.Context, namespace, name string) (*v1.Service, error) {
	s, err := c.Client.Services(namespace).Get(ctx, name, metav1.GetOptions{})
	return s, notFound(err, "service", name)
}

// ListServices implements API.
func (c ClientAPI) ListServices(ctx context.Context, namespace string) ([]v1.Service, error) {
	l, err := c.Client.Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
