package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
)

func ptr[T any](v T) *T { return &v }

func TestNeedsRefresh(t *testing.T) {
	t.Parallel()
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	token := func(ttl time.Duration) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{
			Spec:   authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(ttl / time.Second))},
			Status: authenticationv1.TokenRequestStatus{ExpirationTimestamp: metav1.NewTime(issued.Add(ttl))},
		}
	}
	tests := []struct {
		name   string
		tr     *authenticationv1.TokenRequest
		age    time.Duration
		jitter time.Duration
		want   bool
	}{
		{"fresh hour token", token(time.Hour), 10 * time.Minute, 0, false},
		{"hour token just before 80%", token(time.Hour), 48*time.Minute - time.Second, 0, false},
		{"hour token past 80%", token(time.Hour), 48*time.Minute + time.Second, 0, true},
		{"jitter brings 80% forward", token(time.Hour), 48*time.Minute - 5*time.Second, 9 * time.Second, true},
		{"two-day token before 24h", token(48 * time.Hour), 24*time.Hour - time.Second, 0, false},
		{"two-day token past 24h", token(48 * time.Hour), 24*time.Hour + time.Second, 0, true},
		{"expired", token(time.Hour), 2 * time.Hour, 0, true},
		{"no expirationSeconds", &authenticationv1.TokenRequest{}, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := needsRefresh(tc.tr, issued.Add(tc.age), tc.jitter); got != tc.want {
				t.Errorf("needsRefresh = %v, want %v", got, tc.want)
			}
		})
	}
}

// tokenClient is a fake clientset whose TokenRequests mint "token-N",
// valid for the asked lifetime from now; fail makes them fail.
func tokenClient(fail *bool) (*fake.Clientset, *int) {
	c := fake.NewClientset()
	n := 0
	c.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetSubresource() != "token" {
			return false, nil, nil
		}
		if fail != nil && *fail {
			return true, nil, errors.New("apiserver down")
		}
		req := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		n++
		req.Status.Token = fmt.Sprintf("token-%d", n)
		req.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
		return true, req, nil
	})
	return c, &n
}

// TestTokensRefresh: a token is renewed when 80 % of its lifetime has
// passed; while renewal fails, the old one serves until it expires (the
// time package's clock, in a synctest bubble).
func TestTokensRefresh(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testTokensRefresh)
}

func testTokensRefresh(t *testing.T) {
	fail := false
	c, minted := tokenClient(&fail)
	tk := newTokens(kubeclient.PodObjects{Client: clientgo.Wrap(c)}, slog.New(slog.NewTextHandler(t.Output(), nil)))
	tk.jitter = func() time.Duration { return 0 }
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", Name: "p", UID: "uid-1"},
	}}
	get := func() string {
		t.Helper()
		tr, err := tk.get(context.Background(), "ns", "sa", req)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	var got []string
	got = append(got, get()) // minted: an hour by default
	time.Sleep(47 * time.Minute)
	got = append(got, get()) // cached: under 80 %
	time.Sleep(2 * time.Minute)
	got = append(got, get()) // 49 min: renewed
	time.Sleep(49 * time.Minute)
	fail = true
	got = append(got, get()) // renewal fails, the old token is still valid
	time.Sleep(12 * time.Minute)
	if _, err := tk.get(context.Background(), "ns", "sa", req); err == nil {
		t.Error("an expired token with the API failing: no error")
	}
	fail = false
	got = append(got, get())
	if diff := cmp.Diff([]string{"token-1", "token-1", "token-2", "token-2", "token-3"}, got); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	if *minted != 3 {
		t.Errorf("minted %d tokens, want 3", *minted)
	}

	// Forgetting the pod drops its token: the next get mints a new one.
	tk.forget("uid-1")
	if tok := get(); tok != "token-4" {
		t.Errorf("after forget: %s, want token-4", tok)
	}
}
