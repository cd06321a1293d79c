package kubeletserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/asn1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// TokenReviewer creates TokenReviews on the API server. client-go's
// AuthenticationV1().TokenReviews() implements it; it must be safe for
// concurrent use.
type TokenReviewer interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// errInvalidToken is the error of a bearer token the API server did not
// authenticate.
var errInvalidToken = errors.New("invalid bearer token")

// authenticator.Request implementations below; requestAuth combines them as
// the kubelet's delegating authenticator does.

// requestAuth authenticates a request with a client certificate or else a
// bearer token (header or WebSocket protocol); a request with neither is
// anonymous when anonymous is set; one whose credential is refused is not.
// Authenticated users get the group system:authenticated.
type requestAuth struct {
	methods   []authenticator.Request
	anonymous bool
}

func (a requestAuth) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	var errs []error
	for _, m := range a.methods {
		resp, ok, err := m.AuthenticateRequest(r)
		if ok {
			return withAuthenticatedGroup(resp), true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	if a.anonymous {
		return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
	}
	return nil, false, nil
}

// withAuthenticatedGroup adds system:authenticated to the user's groups
// unless it (or system:unauthenticated) is there.
func withAuthenticatedGroup(resp *authenticator.Response) *authenticator.Response {
	u := resp.User
	for _, g := range u.GetGroups() {
		if g == user.AllAuthenticated || g == user.AllUnauthenticated {
			return resp
		}
	}
	groups := append(append([]string(nil), u.GetGroups()...), user.AllAuthenticated)
	return &authenticator.Response{Audiences: resp.Audiences, User: &user.DefaultInfo{
		Name: u.GetName(), UID: u.GetUID(), Groups: groups, Extra: u.GetExtra(),
	}}
}

// x509Auth authenticates TLS client certificates signed by the client CA
// bundle: the user is the certificate's common name, its groups the
// organizations. The bundle is read from a file, again when it changes.
type x509Auth struct {
	file string
	log  *slog.Logger
	pool atomic.Pointer[x509.CertPool]
	// pem is the bundle's content pool was built from, stamp the file's then;
	// only Run's goroutine (and newX509Auth before it) uses them.
	pem   []byte
	stamp fileStamp
}

// newX509Auth reads the CA bundle file.
func newX509Auth(file string, log *slog.Logger) (*x509Auth, error) {
	a := &x509Auth{file: file, log: log}
	if _, err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// reload reads the bundle and, when it changed, replaces the pool; it
// reports whether it did. A bad bundle leaves the pool as it was.
func (a *x509Auth) reload() (bool, error) {
	stamp := stampOf(a.file)
	if a.pem != nil && stamp == a.stamp {
		return false, nil // not changed: not read
	}
	data, err := decode.ReadRegularFile(a.file, 0) // at most 10 MiB; a FIFO is refused, not waited on
	if err != nil {
		return false, err
	}
	a.stamp = stamp
	if a.pem != nil && bytes.Equal(data, a.pem) {
		return false, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return false, errors.New("no PEM certificate in the file")
	}
	a.pool.Store(pool)
	a.pem = data
	return true, nil
}

// Run checks the bundle file every fileRecheck until ctx ends.
func (a *x509Auth) Run(ctx context.Context) {
	reloadEvery(ctx, a.log, "Client CA bundle", a.reload, "path", a.file)
}

func (a *x509Auth) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	opts := x509.VerifyOptions{
		Roots: a.pool.Load(), CurrentTime: time.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(r.TLS.PeerCertificates) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range r.TLS.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, false, fmt.Errorf("verifying certificate with subject %q, serial %s: %w", leaf.Subject.String(), leaf.SerialNumber, err)
	}
	return certUser(leaf)
}

// x509UID is the object identifier of a user UID in a certificate's
// subject.
var x509UID = asn1.X509UID()

// certUser is the user a verified client certificate names: common name,
// organizations as groups, the certificate's SHA-256 as credential ID and
// the UID attribute if the subject has one. No common name: no user.
func certUser(c *x509.Certificate) (*authenticator.Response, bool, error) {
	if c.Subject.CommonName == "" {
		return nil, false, nil
	}
	var uids []string
	for _, n := range c.Subject.Names {
		if !n.Type.Equal(x509UID) {
			continue
		}
		s, ok := n.Value.(string)
		if !ok || s == "" {
			return nil, false, fmt.Errorf("client certificate %q: UID attribute %v: want a non-empty string", c.Subject.CommonName, n.Value)
		}
		uids = append(uids, s)
	}
	if len(uids) > 1 {
		return nil, false, fmt.Errorf("client certificate %q: UID attributes %q: want at most one", c.Subject.CommonName, uids)
	}
	sum := sha256.Sum256(c.Raw)
	u := &user.DefaultInfo{
		Name: c.Subject.CommonName, Groups: c.Subject.Organization,
		Extra: map[string][]string{user.CredentialIDKey: {"X509SHA256=" + hex.EncodeToString(sum[:])}},
	}
	if len(uids) == 1 {
		u.UID = uids[0]
	}
	return &authenticator.Response{User: u}, true, nil
}

// bearerAuth takes the token of an "Authorization: Bearer" header and
// removes the header once the token is accepted.
type bearerAuth struct{ tokens *tokenAuth }

func (a bearerAuth) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	kind, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	token, _, _ = strings.Cut(token, " ")
	if !strings.EqualFold(kind, "bearer") || token == "" {
		return nil, false, nil
	}
	resp, ok, err := a.tokens.authenticate(r.Context(), token)
	if ok {
		r.Header.Del("Authorization")
	}
	if !ok && err == nil {
		err = errInvalidToken
	}
	return resp, ok, err
}

// wsTokenPrefix starts the WebSocket subprotocol that carries a bearer
// token (base64url, unpadded) for browsers, which cannot set headers.
const wsTokenPrefix = "base64url.bearer.authorization.k8s.io."

// wsProtocolAuth takes the token of a WebSocket request's token
// subprotocol and removes that protocol once the token is accepted.
type wsProtocolAuth struct{ tokens *tokenAuth }

func (a wsProtocolAuth) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !headerHasToken(r.Header, "Connection", "upgrade") {
		return nil, false, nil
	}
	var token string
	var others []string
	seen := false
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			p = strings.TrimSpace(p)
			enc, ok := strings.CutPrefix(p, wsTokenPrefix)
			if !ok {
				others = append(others, p)
				continue
			}
			if seen {
				return nil, false, errors.New("more than one bearer token subprotocol")
			}
			seen = true
			dec, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil || !utf8.Valid(dec) {
				return nil, false, errors.New("bearer token subprotocol: not base64url-encoded UTF-8")
			}
			token = string(dec)
		}
	}
	if token == "" {
		return nil, false, nil
	}
	if len(others) == 0 {
		return nil, false, errors.New("bearer token subprotocol without another subprotocol")
	}
	resp, ok, err := a.tokens.authenticate(r.Context(), token)
	if ok {
		r.Header.Set("Sec-WebSocket-Protocol", strings.Join(others, ","))
	}
	if !ok && err == nil {
		err = errInvalidToken
	}
	return resp, ok, err
}

// headerHasToken reports whether the comma-separated header name has tok
// (case-insensitively).
func headerHasToken(h http.Header, name, tok string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), tok) {
				return true
			}
		}
	}
	return false
}

// tokenAuth authenticates bearer tokens with TokenReviews and caches each
// answer (authenticated or not) for ttl; failed reviews are not cached.
type tokenAuth struct {
	client  TokenReviewer
	timeout time.Duration
	backoff wait.Backoff
	cache   *ttlCache[[sha256.Size]byte, tokenResult]
}

// tokenResult is a cached review: the user, or nil when not authenticated.
type tokenResult struct{ user user.Info }

func (a *tokenAuth) authenticate(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	key := sha256.Sum256([]byte(token))
	if res, ok := a.cache.get(key, time.Now()); ok {
		if res.user == nil {
			return nil, false, nil
		}
		return &authenticator.Response{User: res.user}, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var got *authenticationv1.TokenReview
	err := withRetries(ctx, a.backoff, func() error {
		var err error
		got, err = a.client.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("token review: %w", err)
	}
	st := got.Status
	if !st.Authenticated {
		if st.Error != "" {
			return nil, false, fmt.Errorf("token review: %s", st.Error)
		}
		a.cache.put(key, tokenResult{}, a.cache.ttl, time.Now())
		return nil, false, nil
	}
	u := &user.DefaultInfo{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups}
	if len(st.User.Extra) > 0 {
		u.Extra = make(map[string][]string, len(st.User.Extra))
		for k, v := range st.User.Extra {
			u.Extra[k] = v
		}
	}
	a.cache.put(key, tokenResult{user: u}, a.cache.ttl, time.Now())
	return &authenticator.Response{User: u, Audiences: st.Audiences}, true, nil
}

// withRetries calls f until it succeeds, fails for good, or backoff's steps
// are spent; it retries errors that say the API server may answer later:
// a reset connection, an internal error, a timeout, too many requests, or
// one that suggests a delay. It returns f's last error.
func withRetries(ctx context.Context, backoff wait.Backoff, f func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		last = f()
		if last == nil {
			return true, nil
		}
		if retriable(last) {
			return false, nil
		}
		return false, last
	})
	if last != nil {
		return last
	}
	return err
}

// retriable reports whether a review may succeed if tried again.
func retriable(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		apierrors.IsInternalError(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, delay := apierrors.SuggestsClientDelay(err)
	return delay
}

// ttlCache maps keys to values that expire; it holds at most max entries
// (when full, expired entries go first, then arbitrary ones). Its methods
// take the time as data (the callers pass time.Now()). Safe for concurrent
// use.
type ttlCache[K comparable, V any] struct {
	ttl time.Duration // the default time to live, for callers' use
	max int

	mu      sync.Mutex // guards entries
	entries map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[K comparable, V any](ttl time.Duration, max int) *ttlCache[K, V] {
	return &ttlCache[K, V]{ttl: ttl, max: max, entries: map[K]ttlEntry[V]{}}
}

// get returns k's value if it has one that has not expired at now.
func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// put stores v for k for ttl from now; a ttl of 0 or less stores nothing.
func (c *ttlCache[K, V]) put(k K, v V, ttl time.Duration, now time.Time) {
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.max {
		for key, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, key)
			}
		}
		for key := range c.entries {
			if len(c.entries) < c.max {
				break
			}
			delete(c.entries, key)
		}
	}
	c.entries[k] = ttlEntry[V]{v: v, expires: now.Add(ttl)}
}
