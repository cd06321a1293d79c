package kubeletserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// fakeTokenReviews answers TokenReviews with review and counts them.
type fakeTokenReviews struct {
	mu     sync.Mutex
	calls  int
	review func(token string) (authenticationv1.TokenReviewStatus, error)
}

func (f *fakeTokenReviews) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	st, err := f.review(tr.Spec.Token)
	if err != nil {
		return nil, err
	}
	out := tr.DeepCopy()
	out.Status = st
	return out, nil
}

func (f *fakeTokenReviews) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// fakeSARs answers SubjectAccessReviews with decide and counts them.
type fakeSARs struct {
	mu     sync.Mutex
	calls  int
	decide func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

func (f *fakeSARs) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	st, err := f.decide(sar.Spec)
	if err != nil {
		return nil, err
	}
	out := sar.DeepCopy()
	out.Status = st
	return out, nil
}

func (f *fakeSARs) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// noRetry is a backoff of one attempt.
var noRetry = wait.Backoff{Duration: time.Millisecond, Steps: 1}

// TestTokenCacheTTL: an answer (authenticated or not) is reused until the
// cache TTL passes; a failed review is not cached.
func TestTokenCacheTTL(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testTokenCacheTTL)
}

func testTokenCacheTTL(t *testing.T) {
	fail := false
	reviews := &fakeTokenReviews{review: func(token string) (authenticationv1.TokenReviewStatus, error) {
		if fail {
			return authenticationv1.TokenReviewStatus{}, errors.New("API server down")
		}
		if token == "good" {
			return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"g"}}}, nil
		}
		return authenticationv1.TokenReviewStatus{}, nil
	}}
	a := &tokenAuth{client: reviews, timeout: time.Second, backoff: noRetry, cache: newTTLCache[[32]byte, tokenResult](time.Minute, 10)}
	steps := []struct {
		name      string
		advance   time.Duration
		fail      bool
		token     string
		wantUser  string
		wantErr   bool
		wantCalls int
	}{
		{name: "first review", token: "good", wantUser: "alice", wantCalls: 1},
		{name: "cached", advance: 59 * time.Second, token: "good", wantUser: "alice", wantCalls: 1},
		{name: "expired", advance: time.Second, token: "good", wantUser: "alice", wantCalls: 2},
		{name: "bad token", token: "bad", wantCalls: 3},
		{name: "bad token cached", advance: 30 * time.Second, token: "bad", wantCalls: 3},
		{name: "failed review", advance: 31 * time.Second, fail: true, token: "bad", wantErr: true, wantCalls: 4},
		{name: "failure not cached", fail: true, token: "bad", wantErr: true, wantCalls: 5},
		{name: "answered again", token: "bad", wantCalls: 6},
	}
	for _, s := range steps {
		time.Sleep(s.advance)
		fail = s.fail
		resp, ok, err := a.authenticate(t.Context(), s.token)
		var got string
		if ok {
			got = resp.User.GetName()
		}
		if got != s.wantUser || ok != (s.wantUser != "") || (err != nil) != s.wantErr || reviews.count() != s.wantCalls {
			t.Errorf("%s: user %q ok %v err %v after %d reviews; want %q, error %v, %d reviews", s.name, got, ok, err, reviews.count(), s.wantUser, s.wantErr, s.wantCalls)
		}
	}
}

// TestTokenRetry: a review that fails with a transient error is retried.
func TestTokenRetry(t *testing.T) {
	t.Parallel()
	tries := 0
	reviews := &fakeTokenReviews{review: func(string) (authenticationv1.TokenReviewStatus, error) {
		if tries++; tries < 3 {
			return authenticationv1.TokenReviewStatus{}, apierrors.NewInternalError(errors.New("etcd hiccup"))
		}
		return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}, nil
	}}
	a := &tokenAuth{client: reviews, timeout: 10 * time.Second, backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 5},
		cache: newTTLCache[[32]byte, tokenResult](time.Minute, 10)}
	if _, ok, err := a.authenticate(t.Context(), "t"); !ok || err != nil || reviews.count() != 3 {
		t.Errorf("authenticate = %v, %v after %d reviews; want ok after 3", ok, err, reviews.count())
	}
	// A refusal (403) is not retried.
	reviews = &fakeTokenReviews{review: func(string) (authenticationv1.TokenReviewStatus, error) {
		return authenticationv1.TokenReviewStatus{}, apierrors.NewForbidden(authenticationv1.Resource("tokenreviews"), "", errors.New("no"))
	}}
	a.client = reviews
	if _, ok, err := a.authenticate(t.Context(), "u"); ok || err == nil || reviews.count() != 1 {
		t.Errorf("authenticate = %v, %v after %d reviews; want an error after 1", ok, err, reviews.count())
	}
}

// TestSARCacheTTL: allowed answers are reused for cacheAuthorizedTTL,
// others for cacheUnauthorizedTTL, each spec on its own.
func TestSARCacheTTL(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testSARCacheTTL)
}

func testSARCacheTTL(t *testing.T) {
	sars := &fakeSARs{decide: func(spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		switch spec.User {
		case "alice":
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true}, nil
		case "mallory":
			return authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "no"}, nil
		}
		return authorizationv1.SubjectAccessReviewStatus{}, nil
	}}
	a, err := newAuth(Config{
		Authentication: kubeletv1beta1.KubeletAuthentication{Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)},
			Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)}},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook,
			Webhook: kubeletv1beta1.KubeletWebhookAuthorization{
				CacheAuthorizedTTL: metav1.Duration{Duration: 10 * time.Minute}, CacheUnauthorizedTTL: metav1.Duration{Duration: time.Minute}}},
	}, Deps{SubjectAccessReviews: sars}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	attrs := func(name, sub string) authorizer.Attributes {
		return requestAttributes("node-1", &user.DefaultInfo{Name: name}, "GET", "/"+sub)[0]
	}
	steps := []struct {
		name, user, sub string
		advance         time.Duration
		want            authorizer.Decision
		wantCalls       int
	}{
		{name: "allowed", user: "alice", sub: "stats", want: authorizer.DecisionAllow, wantCalls: 1},
		{name: "allowed, other subresource", user: "alice", sub: "metrics", want: authorizer.DecisionAllow, wantCalls: 2},
		{name: "no opinion", user: "bob", sub: "stats", want: authorizer.DecisionNoOpinion, wantCalls: 3},
		{name: "denied", user: "mallory", sub: "stats", want: authorizer.DecisionDeny, wantCalls: 4},
		{name: "all cached", advance: 59 * time.Second, user: "bob", sub: "stats", want: authorizer.DecisionNoOpinion, wantCalls: 4},
		{name: "denied cached", user: "mallory", sub: "stats", want: authorizer.DecisionDeny, wantCalls: 4},
		{name: "no opinion expired", advance: time.Second, user: "bob", sub: "stats", want: authorizer.DecisionNoOpinion, wantCalls: 5},
		{name: "denied expired", user: "mallory", sub: "stats", want: authorizer.DecisionDeny, wantCalls: 6},
		{name: "allowed still cached", advance: 8*time.Minute + 59*time.Second, user: "alice", sub: "stats", want: authorizer.DecisionAllow, wantCalls: 6},
		{name: "allowed expired", advance: time.Second, user: "alice", sub: "stats", want: authorizer.DecisionAllow, wantCalls: 7},
	}
	for _, s := range steps {
		time.Sleep(s.advance)
		got, _, err := a.authz.Authorize(t.Context(), attrs(s.user, s.sub))
		if err != nil || got != s.want || sars.count() != s.wantCalls {
			t.Errorf("%s: decision %v (%v) after %d reviews; want %v after %d", s.name, got, err, sars.count(), s.want, s.wantCalls)
		}
	}
}

// TestSARSpec: the review carries the user and the resource attributes.
func TestSARSpec(t *testing.T) {
	t.Parallel()
	u := &user.DefaultInfo{Name: "alice", UID: "u1", Groups: []string{"g", user.AllAuthenticated}, Extra: map[string][]string{"k": {"v"}}}
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u1", Groups: []string{"g", user.AllAuthenticated}, Extra: map[string]authorizationv1.ExtraValue{"k": {"v"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Version: "v1", Resource: "nodes", Subresource: "proxy", Name: "node-1"},
	}
	if diff := cmp.Diff(want, sarSpec(requestAttributes("node-1", u, "POST", "/exec/ns/p/c")[0])); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// TestAuthenticateRequest covers the order and the failure rules of the
// methods: a client certificate first, then a bearer token in the header
// or a WebSocket subprotocol; a refused credential is 401 even with
// anonymous on; nothing at all is anonymous.
func TestAuthenticateRequest(t *testing.T) {
	t.Parallel()
	ca, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	x, err := newX509Auth(ca.File, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	reviews := &fakeTokenReviews{review: func(token string) (authenticationv1.TokenReviewStatus, error) {
		if token == "good" {
			return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "tok-user", UID: "7"}}, nil
		}
		return authenticationv1.TokenReviewStatus{}, nil
	}}
	tokens := &tokenAuth{client: reviews, timeout: time.Second, backoff: noRetry, cache: newTTLCache[[32]byte, tokenResult](time.Minute, 10)}
	a := requestAuth{methods: []authenticator.Request{x, bearerAuth{tokens}, wsProtocolAuth{tokens}}, anonymous: true}
	leaf := func(c tls.Certificate) *x509.Certificate {
		l, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ws := func(protocols string) http.Header {
		return http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Sec-Websocket-Protocol": {protocols}}
	}
	enc := func(s string) string { return wsTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name       string
		cert       *x509.Certificate
		header     http.Header
		wantUser   string
		wantGroups []string
		wantErr    bool
		wantHeader http.Header // the header after a success
	}{
		{name: "nothing: anonymous", wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}},
		{name: "client certificate", cert: leaf(ca.issue(t, "alice", "team")), wantUser: "alice", wantGroups: []string{"team", user.AllAuthenticated}},
		{name: "certificate of another CA", cert: leaf(other.issue(t, "alice")), wantErr: true},
		{name: "certificate without a common name", cert: leaf(ca.issue(t, "")), wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}},
		{name: "bearer token", header: http.Header{"Authorization": {"Bearer good"}}, wantUser: "tok-user", wantGroups: []string{user.AllAuthenticated},
			wantHeader: http.Header{}},
		{name: "bearer token, lower case", header: http.Header{"Authorization": {"bearer good"}}, wantUser: "tok-user", wantGroups: []string{user.AllAuthenticated},
			wantHeader: http.Header{}},
		{name: "bad bearer token", header: http.Header{"Authorization": {"Bearer bad"}}, wantErr: true},
		{name: "basic auth is ignored", header: http.Header{"Authorization": {"Basic abc"}}, wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}},
		{name: "websocket token", header: ws(enc("good") + ", v5.channel.k8s.io"), wantUser: "tok-user", wantGroups: []string{user.AllAuthenticated},
			wantHeader: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}},
		{name: "websocket token alone", header: ws(enc("good")), wantErr: true},
		{name: "websocket token twice", header: ws(enc("good") + "," + enc("good") + ",v5.channel.k8s.io"), wantErr: true},
		{name: "websocket bad token", header: ws(enc("bad") + ",v5.channel.k8s.io"), wantErr: true},
		{name: "websocket without a token", header: ws("v5.channel.k8s.io"), wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "https://node/pods", nil)
			for k, v := range tc.header {
				r.Header[k] = append([]string(nil), v...)
			}
			if tc.cert != nil {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.cert}}
			}
			resp, ok, err := a.AuthenticateRequest(r)
			if tc.wantErr {
				if err == nil || ok {
					t.Errorf("AuthenticateRequest = %v, %v; want an error", ok, err)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("AuthenticateRequest = %v, %v", ok, err)
			}
			if resp.User.GetName() != tc.wantUser {
				t.Errorf("user %q, want %q", resp.User.GetName(), tc.wantUser)
			}
			if diff := cmp.Diff(tc.wantGroups, resp.User.GetGroups()); diff != "" {
				t.Errorf("groups (-want +got)\n%s", diff)
			}
			if tc.wantHeader != nil {
				if diff := cmp.Diff(tc.wantHeader, r.Header); diff != "" {
					t.Errorf("header after authentication (-want +got)\n%s", diff)
				}
			}
		})
	}
	// Anonymous off: nothing is no user.
	if _, ok, err := (requestAuth{methods: a.methods}).AuthenticateRequest(httptest.NewRequest("GET", "/", nil)); ok || err != nil {
		t.Errorf("without anonymous: %v, %v; want not authenticated, no error", ok, err)
	}
}

// TestClientCAReload: a changed client CA file is taken at the next check;
// an unreadable one leaves the loaded bundle.
func TestClientCAReload(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		first, second := newTestCA(t, "first-ca"), newTestCA(t, "second-ca")
		x, err := newX509Auth(first.File, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { x.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		accepts := func(ca *testCA) bool {
			l, err := x509.ParseCertificate(ca.issue(t, "alice").Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{l}}
			_, ok, _ := x.AuthenticateRequest(r)
			return ok
		}
		if !accepts(first) || accepts(second) {
			t.Fatal("the first CA's bundle is not the one in use")
		}
		data, err := os.ReadFile(second.File)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(first.File, data, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(fileRecheck - time.Second) // the bubble's clock
		synctest.Wait()
		if !accepts(first) {
			t.Error("the bundle changed before a check")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if !accepts(second) || accepts(first) {
			t.Error("the changed bundle was not taken at the check")
		}
		// A file that is no bundle is not taken.
		if err := os.WriteFile(first.File, []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(fileRecheck)
		synctest.Wait()
		if !accepts(second) {
			t.Error("a bad bundle file replaced the loaded bundle")
		}
	})
}

// TestTTLCacheBound: a full cache drops expired entries first, then others.
func TestTTLCacheBound(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	c := newTTLCache[int, int](0, 3)
	c.put(1, 1, time.Second, t0)
	c.put(2, 2, time.Hour, t0)
	c.put(3, 3, time.Hour, t0)
	now := t0.Add(2 * time.Second)
	c.put(4, 4, time.Hour, now) // 1 expired: it goes
	if _, ok := c.get(2, now); !ok {
		t.Error("2 dropped; want the expired 1 dropped first")
	}
	if len(c.entries) != 3 {
		t.Errorf("%d entries, want 3", len(c.entries))
	}
	c.put(5, 5, time.Hour, now) // none expired: one goes
	if len(c.entries) != 3 {
		t.Errorf("%d entries, want 3", len(c.entries))
	}
	if _, ok := c.get(5, now); !ok {
		t.Error("the new entry is missing")
	}
	c.put(6, 6, 0, now) // a zero TTL stores nothing
	if _, ok := c.get(6, now); ok {
		t.Error("an entry with TTL 0 was stored")
	}
}
