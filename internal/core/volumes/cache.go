package volumes

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DefaultCacheTTL is how long CachedAPI keeps an object it read.
const DefaultCacheTTL = 30 * time.Second

// CachedAPI is an API whose reads of ConfigMaps and Secrets are kept for a
// TTL per object, as the kubelet's TTL-based object cache does: the pods of a
// node that share an object (every pod's kube-root-ca.crt) read it once per
// TTL, not on each pod sync. A missing object is kept as missing for the TTL
// too. Services pass through: they are read only when a container starts (its
// service environment), and a Service created just before the pod must be in
// it, as the kubelet's Service informer has it. Tokens pass through (the token
// cache keeps them). All methods may be called from any goroutine.
type CachedAPI struct {
	api API
	ttl time.Duration

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
	// reads makes concurrent misses of one object (every pod's resync at
	// once) share one API read.
	reads singleflight.Group
}

type cacheKey struct{ kind, namespace, name string }

type cacheEntry struct {
	obj any
	err error
	at  time.Time
}

// NewCachedAPI returns api with its reads cached for ttl (DefaultCacheTTL when
// 0), measured on the time package's clock.
func NewCachedAPI(api API, ttl time.Duration) *CachedAPI {
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	return &CachedAPI{api: api, ttl: ttl, entries: map[cacheKey]cacheEntry{}}
}

var _ API = (*CachedAPI)(nil)

// get returns the cached result of key when younger than the TTL, else
// calls read and keeps its result (an error other than NotFound is not kept).
func get[T any](c *CachedAPI, key cacheKey, read func() (T, error)) (T, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		obj, _ := e.obj.(T)
		return obj, e.err
	}
	v, err, _ := c.reads.Do(fmt.Sprintf("%s/%s/%s", key.kind, key.namespace, key.name), func() (any, error) {
		return read()
	})
	obj, _ := v.(T)
	if err != nil && !apierrors.IsNotFound(err) {
		return obj, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Drop what has expired, so objects no pod reads any more go.
	for k, old := range c.entries {
		if now.Sub(old.at) >= c.ttl {
			delete(c.entries, k)
		}
	}
	c.entries[key] = cacheEntry{obj: obj, err: err, at: now}
	return obj, err
}

// GetConfigMap implements API.
func (c *CachedAPI) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return get(c, cacheKey{"configmap", namespace, name}, func() (*v1.ConfigMap, error) {
		return c.api.GetConfigMap(ctx, namespace, name)
	})
}

// GetSecret implements API.
func (c *CachedAPI) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return get(c, cacheKey{"secret", namespace, name}, func() (*v1.Secret, error) {
		return c.api.GetSecret(ctx, namespace, name)
	})
}

// GetService implements API: never cached.
func (c *CachedAPI) GetService(ctx context.Context, namespace, name string) (*v1.Service, error) {
	return c.api.GetService(ctx, namespace, name)
}

// ListServices implements API: never cached.
func (c *CachedAPI) ListServices(ctx context.Context, namespace string) ([]v1.Service, error) {
	return c.api.ListServices(ctx, namespace)
}

// CreateToken implements API: never cached.
func (c *CachedAPI) CreateToken(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return c.api.CreateToken(ctx, namespace, name, req)
}
