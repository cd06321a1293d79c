package kubeletserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// SubjectAccessReviewer creates SubjectAccessReviews on the API server.
// client-go's AuthorizationV1().SubjectAccessReviews() implements it; it
// must be safe for concurrent use.
type SubjectAccessReviewer interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// alwaysAllow is authorization mode AlwaysAllow.
type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
}

// sarAuth decides with SubjectAccessReviews and caches the answers: allowed
// for allowTTL, not allowed for denyTTL. A failed review is not cached and
// is an error (with no opinion).
type sarAuth struct {
	client            SubjectAccessReviewer
	backoff           wait.Backoff
	allowTTL, denyTTL time.Duration
	cache             *ttlCache[string, authorizationv1.SubjectAccessReviewStatus]
}

func (a *sarAuth) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	spec := sarSpec(attr)
	key, err := json.Marshal(spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("subject access review: %w", err)
	}
	st, ok := a.cache.get(string(key), time.Now())
	if !ok {
		var got *authorizationv1.SubjectAccessReview
		err := withRetries(ctx, a.backoff, func() error {
			var err error
			got, err = a.client.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return authorizer.DecisionNoOpinion, "", fmt.Errorf("subject access review: %w", err)
		}
		st = got.Status
		ttl := a.denyTTL
		if st.Allowed {
			ttl = a.allowTTL
		}
		a.cache.put(string(key), st, ttl, time.Now())
	}
	switch {
	case st.Allowed && st.Denied:
		return authorizer.DecisionDeny, st.Reason, errors.New("subject access review: both allowed and denied")
	case st.Denied:
		return authorizer.DecisionDeny, st.Reason, nil
	case st.Allowed:
		return authorizer.DecisionAllow, st.Reason, nil
	}
	return authorizer.DecisionNoOpinion, st.Reason, nil
}

// sarSpec is the SubjectAccessReview that asks whether attr is allowed.
func sarSpec(attr authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := attr.GetUser(); u != nil {
		spec.User, spec.UID, spec.Groups = u.GetName(), u.GetUID(), u.GetGroups()
		if extra := u.GetExtra(); len(extra) > 0 {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				spec.Extra[k] = v
			}
		}
	}
	if attr.IsResourceRequest() {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: attr.GetNamespace(), Verb: attr.GetVerb(), Group: attr.GetAPIGroup(), Version: attr.GetAPIVersion(),
			Resource: attr.GetResource(), Subresource: attr.GetSubresource(), Name: attr.GetName(),
		}
	} else {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: attr.GetPath(), Verb: attr.GetVerb()}
	}
	return spec
}
