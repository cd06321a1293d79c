package kubenode

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeLeases is a LeaseInterface of function fields that records calls.
type fakeLeases struct {
	calls  []string
	get    func() (*coordinationv1.Lease, error)
	create func(*coordinationv1.Lease) (*coordinationv1.Lease, error)
	update func(*coordinationv1.Lease) (*coordinationv1.Lease, error)
}

func (f *fakeLeases) Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error) {
	f.calls = append(f.calls, "get")
	return f.get()
}

func (f *fakeLeases) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	f.calls = append(f.calls, "create")
	return f.create(l)
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	f.calls = append(f.calls, "update")
	return f.update(l)
}

var leaseGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func newRenewer(f *fakeLeases, setOwner func(*coordinationv1.Lease) error, failures *int) *leaseRenewer {
	return &leaseRenewer{client: f, name: "n1", namespace: "kube-node-lease", holder: "n1",
		durationSeconds: 40, interval: 10 * time.Second, setOwner: setOwner,
		onRepeatedFailure: func() { *failures++ }, log: slog.New(slog.DiscardHandler)}
}

func existing() *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "kube-node-lease", ResourceVersion: "1"}}
}

// TestLeaseRenewal covers the renewer's paths: create when missing, nothing
// without an owner, a conflict read again, repeated failures reported.
func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	notFound := apierrors.NewNotFound(leaseGR, "n1")
	ok := func(l *coordinationv1.Lease) (*coordinationv1.Lease, error) { return l, nil }
	tests := []struct {
		name         string
		leases       func() *fakeLeases
		noOwner      bool
		wantCalls    []string
		wantFailures int
		wantLatest   bool
	}{
		{name: "missing: created", leases: func() *fakeLeases {
			return &fakeLeases{get: func() (*coordinationv1.Lease, error) { return nil, notFound }, create: ok}
		}, wantCalls: []string{"get", "create"}, wantLatest: true},
		{name: "missing, no owner yet: nothing", noOwner: true, leases: func() *fakeLeases {
			return &fakeLeases{get: func() (*coordinationv1.Lease, error) { return nil, notFound }}
		}, wantCalls: []string{"get"}},
		{name: "existing: updated", leases: func() *fakeLeases {
			return &fakeLeases{get: func() (*coordinationv1.Lease, error) { return existing(), nil }, update: ok}
		}, wantCalls: []string{"get", "update"}, wantLatest: true},
		{name: "conflict: read again and updated", leases: func() *fakeLeases {
			n := 0
			return &fakeLeases{get: func() (*coordinationv1.Lease, error) { return existing(), nil },
				update: func(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
					if n++; n == 1 {
						return nil, apierrors.NewConflict(leaseGR, "n1", errors.New("stale"))
					}
					return l, nil
				}}
		}, wantCalls: []string{"get", "update", "get", "update"}, wantLatest: true},
		{name: "failing updates: reported after the first", leases: func() *fakeLeases {
			return &fakeLeases{get: func() (*coordinationv1.Lease, error) { return existing(), nil },
				update: func(*coordinationv1.Lease) (*coordinationv1.Lease, error) { return nil, errors.New("timeout") }}
		}, wantCalls: []string{"get", "update", "update", "update", "update", "update"}, wantFailures: 4, wantLatest: true},
		{name: "get fails: retried", leases: func() *fakeLeases {
			n := 0
			return &fakeLeases{get: func() (*coordinationv1.Lease, error) {
				if n++; n < 3 {
					return nil, errors.New("connection refused")
				}
				return existing(), nil
			}, update: ok}
		}, wantCalls: []string{"get", "get", "get", "update"}, wantLatest: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := tc.leases()
				owner := func(l *coordinationv1.Lease) error {
					if tc.noOwner {
						return errors.New("no Node yet")
					}
					l.OwnerReferences = []metav1.OwnerReference{{Kind: "Node", Name: "n1", UID: "u1"}}
					return nil
				}
				failures := 0
				r := newRenewer(f, owner, &failures)
				r.renew(t.Context())
				end := time.Now() // the fake's calls take no time: the last write was now
				if diff := cmp.Diff(tc.wantCalls, f.calls); diff != "" {
					t.Errorf("calls (-want +got)\n%s", diff)
				}
				if failures != tc.wantFailures {
					t.Errorf("repeated failures reported %d times, want %d", failures, tc.wantFailures)
				}
				if (r.latest != nil) != tc.wantLatest {
					t.Errorf("latest Lease %v, want one: %v", r.latest, tc.wantLatest)
				}
				if l := r.latest; l != nil && tc.wantFailures == 0 {
					if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(end) || len(l.OwnerReferences) != 1 {
						t.Errorf("written Lease %+v, want renewed now and owned", l)
					}
				}
			})
		})
	}
}

// TestLeaseRunInterval: Run renews every interval plus at most 4%, from
// the last known Lease.
func TestLeaseRunInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var renewals []time.Time
		f := &fakeLeases{
			get: func() (*coordinationv1.Lease, error) { return existing(), nil },
			update: func(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
				renewals = append(renewals, time.Now())
				return l, nil
			},
		}
		failures := 0
		r := newRenewer(f, nil, &failures)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		cancel()
		<-done
		if len(renewals) < 6 {
			t.Fatalf("%d renewals in a minute, want 6", len(renewals))
		}
		for i := 1; i < len(renewals); i++ {
			if d := renewals[i].Sub(renewals[i-1]); d < 10*time.Second || d > 10400*time.Millisecond {
				t.Errorf("renewal %d came %v after the previous, want 10 s to 10.4 s", i, d)
			}
		}
		if diff := cmp.Diff("get", f.calls[0]); diff != "" || len(f.calls) != len(renewals)+1 {
			t.Errorf("calls %v, want one get, then updates only", f.calls)
		}
	})
}
