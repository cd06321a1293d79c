package volumes

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
)

// API is what the volumes and the environment read from the API server
// (kubeclient.PodObjects over the node's client, which the daemon wires). A
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
