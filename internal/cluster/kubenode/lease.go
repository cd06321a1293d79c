package kubenode

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
)

// Lease renewal, as the kubelet's lease controller (component-helpers)
// does it: the same requests, retries and timing, over a kubeclient lease
// client (component-helpers' controller takes client-go's whole clientset).
const (
	leaseUpdateTries = 5               // updates of one renewal
	leaseMaxBackoff  = 7 * time.Second // between failed gets or creates
	leaseFirstDelay  = 200 * time.Millisecond
	leaseJitter      = 0.04 // fraction of the interval added at random
)

// leaseRenewer keeps the node's Lease: it creates it when it is missing
// (setOwner fills in the owner; until it can, nothing is created) and
// updates its renew time every interval (plus up to 4%).
type leaseRenewer struct {
	client          kubeclient.LeaseInterface
	name, namespace string
	holder          string
	durationSeconds int32
	interval        time.Duration
	setOwner        func(*coordinationv1.Lease) error
	// onRepeatedFailure, when set, is called when an update fails more
	// than once in a renewal.
	onRepeatedFailure func()
	log               *slog.Logger

	latest *coordinationv1.Lease // the last Lease read or written; Run's goroutine only
}

// Run renews the Lease until ctx ends.
func (l *leaseRenewer) Run(ctx context.Context) {
	for ctx.Err() == nil {
		l.renew(ctx)
		wait := l.interval + time.Duration(rand.Float64()*leaseJitter*float64(l.interval))
		if !l.sleep(ctx, wait) {
			return
		}
	}
}

// sleep waits d; false when ctx ended first.
func (l *leaseRenewer) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// renew updates the last known Lease, or else reads (or creates) the
// current one and updates that.
func (l *leaseRenewer) renew(ctx context.Context) {
	if l.latest != nil {
		err := l.update(ctx, l.latest)
		if err == nil {
			return
		}
		l.log.Info("Lease update from the last known Lease failed; reading it again", "err", err)
	}
	lease, created := l.ensureRetrying(ctx)
	l.latest = lease
	if lease != nil && !created {
		if err := l.update(ctx, lease); err != nil {
			l.log.Error("Lease not renewed; will retry", "after", l.interval, "err", err)
		}
	}
}

// ensureRetrying calls ensure until it succeeds or ctx ends (nil then),
// waiting 200 ms, doubled after each failure up to 7 s.
func (l *leaseRenewer) ensureRetrying(ctx context.Context) (*coordinationv1.Lease, bool) {
	for wait := leaseFirstDelay; ; wait = min(2*wait, leaseMaxBackoff) {
		lease, created, err := l.ensure(ctx)
		if err == nil {
			return lease, created
		}
		l.log.Error("Unable to read or create the Lease; will retry", "after", wait, "err", err)
		if !l.sleep(ctx, wait) {
			return nil, false
		}
	}
}

// ensure returns the Lease, creating it when it is missing; nil without an
// error when it cannot be made yet (no owner).
func (l *leaseRenewer) ensure(ctx context.Context) (*coordinationv1.Lease, bool, error) {
	lease, err := l.client.Get(ctx, l.name, metav1.GetOptions{})
	if err == nil {
		return lease, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	fresh, err := l.next(nil)
	if err != nil {
		l.log.Info("Lease not created yet", "reason", err)
		return nil, false, nil
	}
	lease, err = l.client.Create(ctx, fresh, metav1.CreateOptions{})
	if err != nil {
		return nil, false, err
	}
	return lease, true, nil
}

// update writes base with a new renew time, up to leaseUpdateTries times;
// after a conflict it starts again from the current Lease.
func (l *leaseRenewer) update(ctx context.Context, base *coordinationv1.Lease) error {
	for i := range leaseUpdateTries {
		next, err := l.next(base)
		if err != nil {
			l.log.Error("Unable to prepare the Lease", "err", err)
		} else {
			written, err := l.client.Update(ctx, next, metav1.UpdateOptions{})
			if err == nil {
				l.latest = written
				return nil
			}
			l.log.Error("Lease update failed", "err", err)
			if apierrors.IsConflict(err) {
				base, _ = l.ensureRetrying(ctx)
				continue
			}
		}
		if i > 0 && l.onRepeatedFailure != nil {
			l.onRepeatedFailure()
		}
	}
	return fmt.Errorf("lease not updated in %d tries", leaseUpdateTries)
}

// next is base (a new Lease when nil) renewed now, with its owner set.
func (l *leaseRenewer) next(base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	var lease *coordinationv1.Lease
	if base == nil {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &l.holder, LeaseDurationSeconds: &l.durationSeconds},
		}
	} else {
		lease = base.DeepCopy()
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if l.setOwner != nil {
		if err := l.setOwner(lease); err != nil {
			return nil, err
		}
	}
	return lease, nil
}
