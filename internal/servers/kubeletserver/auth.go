package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The kubelet's defaults for the authentication and authorization fields.
const (
	defaultAuthnCacheTTL       = 2 * time.Minute
	defaultAuthorizedCacheTTL  = 5 * time.Minute
	defaultUnauthorizedTTL     = 30 * time.Second
	webhookTokenReviewTimeout  = 10 * time.Second
	authorizationModeWebhook   = kubeletv1beta1.KubeletAuthorizationModeWebhook
	authorizationModeAlwaysAll = kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow
)

// Cache sizes: at most this many tokens and authorization answers are
// remembered.
const (
	tokenCacheSize = 4096
	sarCacheSize   = 8192
)

// webhookBackoff is the retry policy of TokenReview and SubjectAccessReview
// calls (k8s.io/apiserver's default for authentication webhooks).
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// auth authenticates and authorizes requests.
type auth struct {
	authn authenticator.Request
	authz authorizer.UnconditionalAuthorizer
	// runs are background loops Run starts (the client CA file's reload,
	// and the serving certificate's, which New adds).
	runs []func(ctx context.Context)
}

// newAuth builds the authenticator and authorizer that cfg describes, or
// takes deps' when set.
func newAuth(cfg Config, deps Deps, log *slog.Logger) (*auth, error) {
	a := &auth{authn: deps.Authenticator, authz: deps.Authorizer}
	if a.authn == nil {
		authn := cfg.Authentication
		ra := requestAuth{anonymous: authn.Anonymous.Enabled != nil && *authn.Anonymous.Enabled}
		if f := authn.X509.ClientCAFile; f != "" {
			x, err := newX509Auth(f, log)
			if err != nil {
				return nil, fmt.Errorf("kubeletserver: authentication.x509.clientCAFile %q: %w", f, err)
			}
			ra.methods = append(ra.methods, x)
			a.runs = append(a.runs, x.Run)
		}
		if authn.Webhook.Enabled == nil || *authn.Webhook.Enabled {
			if deps.TokenReviews == nil {
				return nil, errors.New("kubeletserver: authentication.webhook.enabled is true but there is no API server client (Deps.TokenReviews)")
			}
			ttl := defaultAuthnCacheTTL
			if d := authn.Webhook.CacheTTL.Duration; d != 0 {
				if d < 0 {
					return nil, fmt.Errorf("kubeletserver: authentication.webhook.cacheTTL %v: negative", d)
				}
				ttl = d
			}
			tokens := &tokenAuth{client: deps.TokenReviews, timeout: webhookTokenReviewTimeout, backoff: webhookBackoff,
				cache: newTTLCache[[32]byte, tokenResult](ttl, tokenCacheSize)}
			ra.methods = append(ra.methods, bearerAuth{tokens}, wsProtocolAuth{tokens})
		}
		if len(ra.methods) == 0 && !ra.anonymous {
			return nil, errors.New("kubeletserver: no authentication method configured (x509, webhook or anonymous)")
		}
		a.authn = ra
	}
	if a.authz == nil {
		switch mode := cfg.Authorization.Mode; mode {
		case authorizationModeAlwaysAll:
			a.authz = alwaysAllow{}
		case authorizationModeWebhook, "":
			if deps.SubjectAccessReviews == nil {
				return nil, errors.New("kubeletserver: authorization.mode Webhook needs an API server client (Deps.SubjectAccessReviews)")
			}
			w := cfg.Authorization.Webhook
			sa := &sarAuth{client: deps.SubjectAccessReviews, backoff: webhookBackoff,
				allowTTL: defaultAuthorizedCacheTTL, denyTTL: defaultUnauthorizedTTL}
			for _, f := range []struct {
				name string
				d    time.Duration
				dst  *time.Duration
			}{
				{"cacheAuthorizedTTL", w.CacheAuthorizedTTL.Duration, &sa.allowTTL},
				{"cacheUnauthorizedTTL", w.CacheUnauthorizedTTL.Duration, &sa.denyTTL},
			} {
				if f.d < 0 {
					return nil, fmt.Errorf("kubeletserver: authorization.webhook.%s %v: negative", f.name, f.d)
				}
				if f.d > 0 {
					*f.dst = f.d
				}
			}
			sa.cache = newTTLCache[string, authorizationv1.SubjectAccessReviewStatus](0, sarCacheSize)
			a.authz = sa
		default:
			return nil, fmt.Errorf("kubeletserver: authorization.mode %q: want Webhook or AlwaysAllow", mode)
		}
	}
	return a, nil
}

// filter authenticates and authorizes each request before next serves it:
// 401 "Unauthorized" when no authenticator accepts it, 403 naming the user,
// verb, resource and subresources when no attribute set is allowed, 500 when
// the authorizer fails.
func (a *auth) filter(log *slog.Logger, nodeName string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil {
			log.Info("Unable to authenticate the request", "path", r.URL.Path, "err", err)
		}
		if err != nil || !ok {
			writeError(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := requestAttributes(nodeName, resp.User, r.Method, r.URL.Path)
		var subresources []string
		for _, attr := range attrs {
			subresources = append(subresources, attr.Subresource)
			decision, _, err := a.authz.Authorize(r.Context(), attr)
			if err != nil {
				log.Error("Authorization error", "user", attr.User.GetName(), "verb", attr.Verb, "resource", attr.Resource, "subresource", attr.Subresource, "err", err)
				writeError(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					attr.User.GetName(), attr.Verb, attr.Resource, attr.Subresource))
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		log.Debug("Forbidden", "user", resp.User.GetName(), "verb", attrs[0].Verb, "path", r.URL.Path, "subresources", subresources)
		writeError(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n",
			resp.User.GetName(), attrs[0].Verb, attrs[0].Resource, subresources))
	})
}

// writeError writes msg as a plain-text body with code.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}

// verbs maps an HTTP method to the API verb; other methods have none.
var verbs = map[string]string{"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

// requestAttributes are the attribute sets a request to the kubelet API is
// authorized with, as the kubelet's: resource "nodes" named nodeName, the
// verb by method and a subresource by path. A request is allowed when any
// set is: /pods, /runningpods, /healthz and /configz are tried with their
// own subresource first and then "proxy"; /stats, /metrics, /logs,
// /checkpoint, /statusz and /flagz have one; every other path is "proxy".
func requestAttributes(nodeName string, u user.Info, method, path string) []authorizer.AttributesRecord {
	var subresources []string
	switch {
	case isSubpath(path, "/pods"), isSubpath(path, "/runningpods"):
		subresources = append(subresources, "pods")
	case isSubpath(path, "/healthz"):
		subresources = append(subresources, "healthz")
	case isSubpath(path, "/configz"):
		subresources = append(subresources, "configz")
	}
	switch {
	case isSubpath(path, "/stats"):
		subresources = append(subresources, "stats")
	case isSubpath(path, "/metrics"):
		subresources = append(subresources, "metrics")
	case isSubpath(path, "/logs"):
		subresources = append(subresources, "log")
	case isSubpath(path, "/checkpoint"):
		subresources = append(subresources, "checkpoint")
	case isSubpath(path, "/statusz"):
		subresources = append(subresources, "statusz")
	case isSubpath(path, "/flagz"):
		subresources = append(subresources, "configz")
	default:
		subresources = append(subresources, "proxy")
	}
	attrs := make([]authorizer.AttributesRecord, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User: u, Verb: verbs[method], APIVersion: "v1", Resource: "nodes", Subresource: sub,
			Name: nodeName, ResourceRequest: true, Path: path,
		})
	}
	return attrs
}

// isSubpath reports whether path is prefix or below it.
func isSubpath(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}
