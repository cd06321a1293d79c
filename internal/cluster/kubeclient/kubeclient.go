// Package kubeclient is nodekeeper's API server client: typed clients for
// only the resources the agent uses (core/v1 nodes, pods, events,
// configmaps, secrets, services, service account tokens; coordination/v1
// leases; TokenReviews and SubjectAccessReviews), over client-go's REST
// client with a scheme of those four API groups.
//
// client-go's kubernetes.Clientset would do the same, but importing it (or
// any of its typed packages, informers or listers) registers every API group
// of k8s.io/api in its scheme, which links them all into the binary (with
// discovery and OpenAPI): 33 MB of the agent's 81 MB binary when measured,
// much of it paged in. The interfaces here have
// the method signatures of client-go's typed interfaces, so a
// kubernetes.Interface's clients (and client-go's fake clientset, in tests)
// satisfy them; see package clientgo.
package kubeclient

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the whole client. Every method returns a client safe for
// concurrent use; namespaced ones take the namespace ("" for all, where
// listing allows it).
type Interface interface {
	Nodes() NodeInterface
	Pods(namespace string) PodInterface
	Events(namespace string) EventInterface
	ConfigMaps(namespace string) ConfigMapInterface
	Secrets(namespace string) SecretInterface
	Services(namespace string) ServiceInterface
	ServiceAccounts(namespace string) ServiceAccountInterface
	Leases(namespace string) LeaseInterface
	TokenReviews() TokenReviewInterface
	SubjectAccessReviews() SubjectAccessReviewInterface
}

// NodeInterface is the Node calls the agent makes.
type NodeInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, node *corev1.Node, opts metav1.CreateOptions) (*corev1.Node, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// PodInterface is the Pod calls the agent makes.
type PodInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// EventInterface is the Event calls of an event sink.
type EventInterface interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
	Update(ctx context.Context, event *corev1.Event, opts metav1.UpdateOptions) (*corev1.Event, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error)
}

// ConfigMapInterface reads ConfigMaps.
type ConfigMapInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
}

// SecretInterface reads Secrets.
type SecretInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
}

// ServiceInterface reads Services.
type ServiceInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Service, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ServiceList, error)
}

// ServiceAccountInterface requests service account tokens.
type ServiceAccountInterface interface {
	CreateToken(ctx context.Context, serviceAccountName string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// LeaseInterface is the Lease calls of the node's heartbeat.
type LeaseInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// TokenReviewInterface creates TokenReviews.
type TokenReviewInterface interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// SubjectAccessReviewInterface creates SubjectAccessReviews.
type SubjectAccessReviewInterface interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// NewScheme returns a scheme of the four API groups the client speaks and
// the option types of every request.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, coordinationv1.AddToScheme, authenticationv1.AddToScheme, authorizationv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s, nil
}

// Clientset implements Interface.
type Clientset struct {
	params                           runtime.ParameterCodec
	core, coordination, authn, authz rest.Interface
}

var _ Interface = (*Clientset)(nil)

// NewForConfig returns a client for cfg's API server, as client-go's
// kubernetes.NewForConfig: one HTTP client and, when cfg sets QPS but no
// RateLimiter, one rate limiter shared by all groups.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	c := *cfg
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubeclient: burst %d: must be positive when QPS is set", c.Burst)
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %w", err)
	}
	s, err := NewScheme()
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %w", err)
	}
	ns := rest.CodecFactoryForGeneratedClient(s, serializer.NewCodecFactory(s)).WithoutConversion()
	group := func(gv schema.GroupVersion) (rest.Interface, error) {
		gc := c
		gc.GroupVersion = &gv
		gc.APIPath = "/apis"
		if gv.Group == "" {
			gc.APIPath = "/api"
		}
		gc.NegotiatedSerializer = ns
		return rest.RESTClientForConfigAndClient(&gc, hc)
	}
	cs := &Clientset{params: runtime.NewParameterCodec(s)}
	for _, g := range []struct {
		gv  schema.GroupVersion
		dst *rest.Interface
	}{
		{corev1.SchemeGroupVersion, &cs.core},
		{coordinationv1.SchemeGroupVersion, &cs.coordination},
		{authenticationv1.SchemeGroupVersion, &cs.authn},
		{authorizationv1.SchemeGroupVersion, &cs.authz},
	} {
		if *g.dst, err = group(g.gv); err != nil {
			return nil, fmt.Errorf("kubeclient: %s: %w", g.gv, err)
		}
	}
	return cs, nil
}

// newOf returns a constructor of empty T.
func newOf[T any]() func() *T { return func() *T { return new(T) } }

// object is what every resource the client speaks is.
type object interface {
	runtime.Object
	metav1.Object
}

// resource is the typed client of one resource of a group, in one namespace
// ("" for all, or for a cluster-scoped resource). Its methods have the
// signatures and meaning of client-go's generated clients. (client-go's
// generic gentype client would do, but it imports client-go's fake-client
// package, which links OpenAPI and structured merge code into the agent.)
type resource[T object] struct {
	name      string
	client    rest.Interface
	params    runtime.ParameterCodec
	namespace string
	newObj    func() T
}

// resourceWithList adds List, for the resources the agent lists.
type resourceWithList[T object, L runtime.Object] struct {
	resource[T]
	newList func() L
}

// request starts a request of verb r's resource in its namespace.
func (r resource[T]) request(verb func() *rest.Request) *rest.Request {
	return verb().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name)
}

// timeout is a list or watch's server-side timeout, as a client timeout.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// Get returns the named object.
func (r resource[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObj()
	err := r.request(r.client.Get).Name(name).VersionedParams(&opts, r.params).Do(ctx).Into(out)
	return out, err
}

// Watch watches the resource's objects that opts selects.
func (r resource[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request(r.client.Get).VersionedParams(&opts, r.params).Timeout(timeout(opts)).Watch(ctx)
}

// Create creates obj and returns it as the server stored it.
func (r resource[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObj()
	err := r.request(r.client.Post).VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj (without its status) and returns it as stored.
func (r resource[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := r.newObj()
	err := r.request(r.client.Put).Name(obj.GetName()).VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus replaces obj's status and returns it as stored.
func (r resource[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := r.newObj()
	err := r.request(r.client.Put).Name(obj.GetName()).SubResource("status").VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Patch applies data, a patch of type pt, to the named object (or to its
// subresource) and returns it as stored.
func (r resource[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := r.newObj()
	err := r.request(func() *rest.Request { return r.client.Patch(pt) }).Name(name).SubResource(subresources...).
		VersionedParams(&opts, r.params).Body(data).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the named object.
func (r resource[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.request(r.client.Delete).Name(name).Body(&opts).Do(ctx).Error()
}

// List lists the resource's objects that opts selects.
func (r resourceWithList[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.request(r.client.Get).VersionedParams(&opts, r.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func newResource[T any, PT interface {
	*T
	object
}](c *Clientset, name string, group rest.Interface, namespace string) resource[PT] {
	return resource[PT]{name: name, client: group, params: c.params, namespace: namespace,
		newObj: func() PT { return PT(new(T)) }}
}

// Nodes implements Interface.
func (c *Clientset) Nodes() NodeInterface {
	return resourceWithList[*corev1.Node, *corev1.NodeList]{newResource[corev1.Node](c, "nodes", c.core, ""), newOf[corev1.NodeList]()}
}

// Pods implements Interface.
func (c *Clientset) Pods(namespace string) PodInterface {
	return resourceWithList[*corev1.Pod, *corev1.PodList]{newResource[corev1.Pod](c, "pods", c.core, namespace), newOf[corev1.PodList]()}
}

// Events implements Interface.
func (c *Clientset) Events(namespace string) EventInterface {
	return newResource[corev1.Event](c, "events", c.core, namespace)
}

// ConfigMaps implements Interface.
func (c *Clientset) ConfigMaps(namespace string) ConfigMapInterface {
	return newResource[corev1.ConfigMap](c, "configmaps", c.core, namespace)
}

// Secrets implements Interface.
func (c *Clientset) Secrets(namespace string) SecretInterface {
	return newResource[corev1.Secret](c, "secrets", c.core, namespace)
}

// Services implements Interface.
func (c *Clientset) Services(namespace string) ServiceInterface {
	return resourceWithList[*corev1.Service, *corev1.ServiceList]{newResource[corev1.Service](c, "services", c.core, namespace), newOf[corev1.ServiceList]()}
}

// ServiceAccounts implements Interface.
func (c *Clientset) ServiceAccounts(namespace string) ServiceAccountInterface {
	return serviceAccounts{c: c, namespace: namespace}
}

// Leases implements Interface.
func (c *Clientset) Leases(namespace string) LeaseInterface {
	return newResource[coordinationv1.Lease](c, "leases", c.coordination, namespace)
}

// TokenReviews implements Interface.
func (c *Clientset) TokenReviews() TokenReviewInterface {
	return newResource[authenticationv1.TokenReview](c, "tokenreviews", c.authn, "")
}

// SubjectAccessReviews implements Interface.
func (c *Clientset) SubjectAccessReviews() SubjectAccessReviewInterface {
	return newResource[authorizationv1.SubjectAccessReview](c, "subjectaccessreviews", c.authz, "")
}

// serviceAccounts posts to the token subresource.
type serviceAccounts struct {
	c         *Clientset
	namespace string
}

// CreateToken implements ServiceAccountInterface.
func (s serviceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	err := s.c.core.Post().Namespace(s.namespace).Resource("serviceaccounts").Name(name).SubResource("token").
		VersionedParams(&opts, s.c.params).Body(tr).Do(ctx).Into(out)
	return out, err
}
