package volumes

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Token refresh, as the kubelet times it: a token is renewed once 80 % of its
// lifetime has passed, or 24 hours after it was issued, whichever comes
// first, each a little early by a random jitter of up to maxJitter so that
// the pods of a node do not all ask at once.
const (
	maxTokenAge       = 24 * time.Hour
	maxJitter         = 10 * time.Second
	defaultTokenTTL   = 3600 // the API's default expirationSeconds
	refreshPercentage = 20   // renew when this much of the lifetime is left
)

// needsRefresh reports whether the token tr must be renewed at now, jitter
// being this call's random head start.
func needsRefresh(tr *authenticationv1.TokenRequest, now time.Time, jitter time.Duration) bool {
	if tr.Spec.ExpirationSeconds == nil {
		return true
	}
	ttl := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	exp := tr.Status.ExpirationTimestamp.Time
	issued := exp.Add(-ttl)
	if now.After(issued.Add(maxTokenAge - jitter)) {
		return true
	}
	return now.After(exp.Add(-ttl*refreshPercentage/100 - jitter))
}

// tokens caches the service-account tokens the node minted, one per service
// account, audience, lifetime and pod. Its methods may be called from any
// goroutine.
type tokens struct {
	api    API
	log    *slog.Logger
	jitter func() time.Duration

	mu sync.Mutex // guards byKey
	// byKey is the newest token per tokenKey.
	byKey map[string]*authenticationv1.TokenRequest
}

// tokenKey identifies the token a request asks for.
func tokenKey(namespace, name string, req *authenticationv1.TokenRequest) string {
	var exp int64
	if req.Spec.ExpirationSeconds != nil {
		exp = *req.Spec.ExpirationSeconds
	}
	var uid types.UID
	if ref := req.Spec.BoundObjectRef; ref != nil {
		uid = ref.UID
	}
	return fmt.Sprintf("%s/%s/%q/%d/%s", namespace, name, strings.Join(req.Spec.Audiences, ","), exp, uid)
}

func newTokens(api API, log *slog.Logger) *tokens {
	return &tokens{
		api: api, log: log,
		jitter: func() time.Duration { return time.Duration(rand.Int64N(int64(maxJitter/time.Second))) * time.Second },
		byKey:  map[string]*authenticationv1.TokenRequest{},
	}
}

// get returns a token for the service account namespace/name as req asks
// (its expirationSeconds nil: an hour): the cached one while it needs no
// refresh, else a new one. When minting fails but the cached token has not
// expired, the cached one is returned and the failure logged.
func (t *tokens) get(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if req.Spec.ExpirationSeconds == nil {
		req = req.DeepCopy()
		ttl := int64(defaultTokenTTL)
		req.Spec.ExpirationSeconds = &ttl
	}
	key := tokenKey(namespace, name, req)
	now := time.Now()
	t.mu.Lock()
	t.dropExpired(now)
	cached := t.byKey[key]
	t.mu.Unlock()
	if cached != nil && !needsRefresh(cached, now, t.jitter()) {
		return cached, nil
	}
	tr, err := t.api.CreateToken(ctx, namespace, name, req)
	if err != nil {
		if cached != nil && now.Before(cached.Status.ExpirationTimestamp.Time) {
			t.log.Error("renewing a service account token failed; the current one stays until it expires",
				"serviceAccount", namespace+"/"+name, "expires", cached.Status.ExpirationTimestamp.Time, "err", err)
			return cached, nil
		}
		return nil, fmt.Errorf("failed to fetch token: %w", err)
	}
	if tr.Spec.ExpirationSeconds == nil {
		tr.Spec.ExpirationSeconds = req.Spec.ExpirationSeconds
	}
	t.mu.Lock()
	t.byKey[key] = tr
	t.mu.Unlock()
	return tr, nil
}

// dropExpired forgets expired tokens. t.mu is held.
func (t *tokens) dropExpired(now time.Time) {
	for k, tr := range t.byKey {
		if !now.Before(tr.Status.ExpirationTimestamp.Time) {
			delete(t.byKey, k)
		}
	}
}

// forget drops the tokens bound to the pod uid.
func (t *tokens) forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.byKey {
		if strings.HasSuffix(k, "/"+string(uid)) { // tokenKey ends with the bound pod's UID
			delete(t.byKey, k)
		}
	}
}
