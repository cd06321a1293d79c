package kubeletserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestRequestAttributes(t *testing.T) {
	t.Parallel()
	u := &user.DefaultInfo{Name: "alice"}
	tests := []struct {
		name, method, path string
		wantVerb           string
		wantSub            []string
	}{
		{"stats", "GET", "/stats/summary", "get", []string{"stats"}},
		{"stats POST", "POST", "/stats/summary", "create", []string{"stats"}},
		{"metrics", "GET", "/metrics", "get", []string{"metrics"}},
		{"metrics below", "GET", "/metrics/cadvisor", "get", []string{"metrics"}},
		{"system logs", "GET", "/logs/syslog", "get", []string{"log"}},
		{"container logs are proxy", "GET", "/containerLogs/ns/p/c", "get", []string{"proxy"}},
		{"exec", "POST", "/exec/ns/p/c", "create", []string{"proxy"}},
		{"exec GET", "GET", "/exec/ns/p/c", "get", []string{"proxy"}},
		{"attach", "POST", "/attach/ns/p/c", "create", []string{"proxy"}},
		{"portForward", "POST", "/portForward/ns/p", "create", []string{"proxy"}},
		{"pods", "GET", "/pods", "get", []string{"pods", "proxy"}},
		{"runningpods", "GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"healthz", "GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"healthz check", "GET", "/healthz/ping", "get", []string{"healthz", "proxy"}},
		{"configz", "GET", "/configz", "get", []string{"configz", "proxy"}},
		{"statsfoo is not stats", "GET", "/statsfoo", "get", []string{"proxy"}},
		{"spec", "GET", "/spec/", "get", []string{"proxy"}},
		{"checkpoint", "POST", "/checkpoint/ns/p/c", "create", []string{"checkpoint"}},
		{"statusz", "GET", "/statusz", "get", []string{"statusz"}},
		{"flagz is configz", "GET", "/flagz", "get", []string{"configz"}},
		{"pods below", "GET", "/pods/x", "get", []string{"pods", "proxy"}},
		{"put", "PUT", "/x", "update", []string{"proxy"}},
		{"patch", "PATCH", "/x", "patch", []string{"proxy"}},
		{"delete", "DELETE", "/x", "delete", []string{"proxy"}},
		{"head has no verb", "HEAD", "/x", "", []string{"proxy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var want []authorizer.AttributesRecord
			for _, sub := range tc.wantSub {
				want = append(want, authorizer.AttributesRecord{User: u, Verb: tc.wantVerb, APIVersion: "v1", Resource: "nodes",
					Subresource: sub, Name: "node-1", ResourceRequest: true, Path: tc.path})
			}
			if diff := cmp.Diff(want, requestAttributes("node-1", u, tc.method, tc.path)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// seenAuthorizer allows the users in allow and records what it was asked.
type seenAuthorizer struct {
	allow map[string]bool
	mu    sync.Mutex
	seen  []string // "user groups verb subresource"
}

func (a *seenAuthorizer) Authorize(_ context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	a.mu.Lock()
	a.seen = append(a.seen, attr.GetUser().GetName()+" "+strings.Join(attr.GetUser().GetGroups(), ",")+" "+attr.GetVerb()+" "+attr.GetSubresource())
	a.mu.Unlock()
	if a.allow[attr.GetUser().GetName()] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func (a *seenAuthorizer) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.seen
	a.seen = nil
	return s
}

// sharedOK stands for internal/servers/server's handler.
var sharedOK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("shared " + r.URL.Path)) })

// TestClientCertificates authenticates over TLS with x509 client
// certificates of the configured CA and authorizes with a fake authorizer.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	ca, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	tests := []struct {
		name      string
		anonymous bool
		cert      *tls.Certificate
		path      string
		wantCode  int
		wantBody  string
		wantSeen  []string
	}{
		{name: "no certificate", path: "/healthz", wantCode: 401, wantBody: "Unauthorized"},
		{name: "certificate of another CA", cert: ptr.To(other.issue(t, "allowed")), path: "/healthz", wantCode: 401, wantBody: "Unauthorized"},
		{name: "allowed user", cert: ptr.To(ca.issue(t, "allowed", "g1", "g2")), path: "/healthz", wantCode: 200, wantBody: "shared /healthz",
			wantSeen: []string{"allowed g1,g2,system:authenticated get healthz"}},
		{name: "denied user", cert: ptr.To(ca.issue(t, "bob", "system:nodes")), path: "/healthz", wantCode: 403,
			wantBody: "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[healthz proxy])\n",
			wantSeen: []string{"bob system:nodes,system:authenticated get healthz", "bob system:nodes,system:authenticated get proxy"}},
		{name: "denied user, stats", cert: ptr.To(ca.issue(t, "bob")), path: "/stats/summary", wantCode: 403,
			wantBody: "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[stats])\n",
			wantSeen: []string{"bob system:authenticated get stats"}},
		{name: "anonymous disabled", path: "/pods", wantCode: 401, wantBody: "Unauthorized"},
		{name: "anonymous enabled", anonymous: true, path: "/pods", wantCode: 403,
			wantBody: "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
			wantSeen: []string{"system:anonymous system:unauthenticated get pods", "system:anonymous system:unauthenticated get proxy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			az := &seenAuthorizer{allow: map[string]bool{"allowed": true}}
			certDir := t.TempDir()
			s, err := New(Config{
				NodeName: "node-1", Address: "127.0.0.1", CertDir: certDir, Hostname: "node-1", NodeIPs: loopback,
				Authentication: kubeletv1beta1.KubeletAuthentication{
					X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: ca.File},
					Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
					Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(tc.anonymous)},
				},
			}, Deps{Pods: noPods, Runtime: fakeRuntime{}, Shared: sharedOK, Authorizer: az, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			base := runServer(t, s)
			code, body := get(t, httpsClient(t, certDir, tc.cert), base+tc.path)
			if code != tc.wantCode || body != tc.wantBody {
				t.Errorf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
			if diff := cmp.Diff(tc.wantSeen, az.take()); diff != "" {
				t.Errorf("authorizer asked (-want +got)\n%s", diff)
			}
		})
	}
}

// reviewAPI serves TokenReviews and SubjectAccessReviews over HTTP as the
// API server does, decided by the functions, and counts them. (client-go's
// fake clientset cannot stand in: the webhook clients post through its nil
// RESTClient.)
func reviewAPI(t *testing.T, token func(string) authenticationv1.TokenReviewStatus, allow func(authorizationv1.SubjectAccessReviewSpec) bool) (kubernetes.Interface, func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		counts["token"]++
		mu.Unlock()
		tr.Status = token(tr.Spec.Token)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		counts["sar "+sar.Spec.User+" "+sar.Spec.ResourceAttributes.Subresource]++
		mu.Unlock()
		sar.Status.Allowed = allow(sar.Spec)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&sar)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// JSON: the handlers above decode JSON (client-go defaults to protobuf).
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	return client, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
}

// TestWebhook authenticates a bearer token with a TokenReview and authorizes
// with SubjectAccessReviews, and caches both.
func TestWebhook(t *testing.T) {
	t.Parallel()
	client, counts := reviewAPI(t, func(token string) authenticationv1.TokenReviewStatus {
		switch token {
		case "good-token":
			return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "kube-apiserver-kubelet-client"}}
		case "weak-token":
			return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "nobody"}}
		}
		return authenticationv1.TokenReviewStatus{}
	}, func(spec authorizationv1.SubjectAccessReviewSpec) bool {
		ra := spec.ResourceAttributes
		return spec.User == "kube-apiserver-kubelet-client" && ra.Resource == "nodes" && ra.Name == "node-1" && ra.Verb == "get"
	})
	certDir := t.TempDir()
	s, err := New(Config{NodeName: "node-1", Address: "127.0.0.1", CertDir: certDir, NodeIPs: loopback},
		Deps{Pods: noPods, Runtime: fakeRuntime{}, Shared: sharedOK, TokenReviews: client.AuthenticationV1().TokenReviews(),
			SubjectAccessReviews: client.AuthorizationV1().SubjectAccessReviews(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	c := httpsClient(t, certDir, nil)
	for _, tc := range []struct {
		token    string
		path     string
		wantCode int
		wantBody string
	}{
		{"good-token", "/metrics", 200, "shared /metrics"},
		{"good-token", "/metrics", 200, "shared /metrics"}, // cached
		{"bad-token", "/metrics", 401, "Unauthorized"},
		{"weak-token", "/stats/summary", 403, "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[stats])\n"},
		{"weak-token", "/stats/summary", 403, "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[stats])\n"}, // cached
	} {
		code, body := get(t, c, base+tc.path, "Authorization", "Bearer "+tc.token)
		if code != tc.wantCode || body != tc.wantBody {
			t.Errorf("GET %s with %s = %d %q, want %d %q", tc.path, tc.token, code, body, tc.wantCode, tc.wantBody)
		}
	}
	want := map[string]int{"token": 3, "sar kube-apiserver-kubelet-client metrics": 1, "sar nobody stats": 1}
	if diff := cmp.Diff(want, counts()); diff != "" {
		t.Errorf("reviews made (-want +got)\n%s", diff)
	}
}

// TestSelfSignedCertificate makes the serving certificate once, with the
// host name and node IPs as names, and reuses it.
func TestSelfSignedCertificate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pki")
	cfg := Config{NodeName: "n", CertDir: dir, Hostname: "node-a.example", NodeIPs: loopback,
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		Authentication: kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}}}
	deps := Deps{Pods: noPods, Runtime: fakeRuntime{}}
	s1, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, selfSignedCert))
	if err != nil {
		t.Fatal(err)
	}
	leaf := s1.TLSConfig().Certificates[0].Leaf
	if diff := cmp.Diff([]string{"node-a.example"}, leaf.DNSNames); diff != "" {
		t.Errorf("DNS names (-want +got)\n%s", diff)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(loopback[0]) {
		t.Errorf("IP addresses = %v, want %v", leaf.IPAddresses, loopback)
	}
	if _, err := New(cfg, deps); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(filepath.Join(dir, selfSignedCert))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) {
		t.Error("second New made a new certificate; want the first reused")
	}
	// Once it expired, a new one is made.
	later := deps
	later.Clock = testingclock.NewFakeClock(leaf.NotAfter.Add(time.Hour))
	if _, err := New(cfg, later); err != nil {
		t.Fatal(err)
	}
	renewed, err := os.ReadFile(filepath.Join(dir, selfSignedCert))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first, renewed) {
		t.Error("New kept an expired certificate")
	}
	if v := s1.TLSConfig().MinVersion; v != tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want TLS 1.2", v)
	}
	// A TLS 1.1 client is refused.
	base := runServer(t, s1)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}}}
	if resp, err := c.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("a TLS 1.1 client was served")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noWebhook := kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}}
	allow := kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow}
	ok := Config{NodeName: "n", CertDir: dir, Authentication: noWebhook, Authorization: allow}
	fifo := filepath.Join(dir, "ca-fifo.crt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		client bool
		want   string
	}{
		{"no node name", func(c *Config) { c.NodeName = "" }, false, "Config.NodeName is empty"},
		{"bad address", func(c *Config) { c.Address = "localhost" }, false, `address "localhost": not an IP address`},
		{"bad port", func(c *Config) { c.Port = 70000 }, false, "port 70000"},
		{"bad tls version", func(c *Config) { c.TLSMinVersion = "VersionTLS11" }, false, `tlsMinVersion "VersionTLS11"`},
		{"bad cipher", func(c *Config) { c.TLSCipherSuites = []string{"TLS_NOPE"} }, false, `unknown cipher suite "TLS_NOPE"`},
		{"cert without key", func(c *Config) { c.TLSCertFile = "/x.crt" }, false, "set both or neither"},
		{"missing cert file", func(c *Config) { c.TLSCertFile, c.TLSPrivateKeyFile = "/nonexistent.crt", "/nonexistent.key" }, false, `tlsCertFile "/nonexistent.crt"`},
		{"relative cert dir", func(c *Config) { c.CertDir = "pki" }, false, `Config.CertDir "pki"`},
		{"missing client CA", func(c *Config) { c.Authentication.X509.ClientCAFile = "/nonexistent-ca.crt" }, false, `authentication.x509.clientCAFile "/nonexistent-ca.crt"`},
		// Files the configuration names are read as regular files of at most
		// 10 MiB: a FIFO without a writer is refused, not waited on forever;
		// /dev/zero is refused, not read until memory runs out.
		{"client CA is a FIFO", func(c *Config) { c.Authentication.X509.ClientCAFile = fifo }, false, fifo + ": not a regular file"},
		{"cert is /dev/zero", func(c *Config) { c.TLSCertFile, c.TLSPrivateKeyFile = "/dev/zero", "/dev/zero" }, false, "/dev/zero: not a regular file"},
		{"webhook authn without client", func(c *Config) { c.Authentication.Webhook.Enabled = nil }, false, "authentication.webhook.enabled is true but there is no API server client"},
		{"webhook authz without client", func(c *Config) { c.Authorization.Mode = "" }, false, "authorization.mode Webhook needs an API server client"},
		{"no authentication at all", func(c *Config) { c.Authentication.Anonymous.Enabled = nil }, false, "no authentication method configured"},
		{"bad mode", func(c *Config) { c.Authorization.Mode = "RBAC" }, false, `authorization.mode "RBAC": want Webhook or AlwaysAllow`},
		{"negative authn ttl", func(c *Config) {
			c.Authentication.Webhook.Enabled = ptr.To(true)
			c.Authentication.Webhook.CacheTTL = metav1.Duration{Duration: -1}
		}, true, "authentication.webhook.cacheTTL -1ns: negative"},
		{"negative authz ttl", func(c *Config) {
			c.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
			c.Authorization.Webhook.CacheUnauthorizedTTL = metav1.Duration{Duration: -1}
		}, true, "authorization.webhook.cacheUnauthorizedTTL -1ns: negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tc.change(&cfg)
			deps := Deps{Pods: noPods, Runtime: fakeRuntime{}}
			if tc.client {
				c := kubernetes.New(nil)
				deps.TokenReviews, deps.SubjectAccessReviews = c.AuthenticationV1().TokenReviews(), c.AuthorizationV1().SubjectAccessReviews()
			}
			_, err := New(cfg, deps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestServingCertificateReload: a server on tlsCertFile and tlsPrivateKeyFile
// serves the pair the files hold, taken again within fileRecheck of their
// change (upstream's "KubletTLS certificate reload" and
// "ReloadKubeletClientCAFileTest" specs); files that do not load leave the
// pair served as it was.
func TestServingCertificateReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	write := func(host string) {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, loopback, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	s, err := New(Config{NodeName: "node-1", Address: "127.0.0.1", TLSCertFile: certFile, TLSPrivateKeyFile: keyFile,
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		Authentication: kubeletv1beta1.KubeletAuthentication{Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}}},
		Deps{Pods: noPods, Runtime: fakeRuntime{}, Shared: sharedOK, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := runServer(t, s)
	served := func() string {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("dial %s: %v", base, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	waitServed := func(want string) {
		t.Helper()
		deadline := time.Now().Add(fileRecheck + 10*time.Second)
		for served() != want {
			if time.Now().After(deadline) {
				t.Fatalf("served %q %v after the files changed, want %q", served(), fileRecheck+10*time.Second, want)
			}
			time.Sleep(100 * time.Millisecond) // the server's own ticker: nothing to wait on
		}
	}
	if got := served(); !strings.HasPrefix(got, "first") {
		t.Fatalf("served %q, want the first pair", got)
	}
	write("second")
	waitServed(servedName(t, certFile))
	if got := served(); !strings.HasPrefix(got, "second") {
		t.Fatalf("served %q, want the second pair", got)
	}
	if err := os.WriteFile(keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(fileRecheck + time.Second) // past the next check
	if got := served(); !strings.HasPrefix(got, "second") {
		t.Errorf("served %q after the key file went bad, want the second pair kept", got)
	}
}

// servedName is the common name of the certificate in file.
func servedName(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0].Subject.CommonName
}
