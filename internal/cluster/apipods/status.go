package apipods

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

var everything = labels.Everything()

// maxAttempts bounds one status write's tries (the first and the retries
// after a conflict).
const maxAttempts = 5

// statusState is the status loop's memory; only runStatus's goroutine
// touches it.
type statusState struct {
	// written is the status last written to each API object, by its UID.
	written map[types.UID]v1.PodStatus
	// deleted are the API objects a delete was sent for, by UID.
	deleted map[types.UID]bool
	// norm caches normalize's result per agent pod UID, for the agent's pod
	// object it was computed from (the agent publishes a new object when a
	// pod's status changes).
	norm map[types.UID]normalized
	// nodeUID is the Node's UID, for the mirror pods' owner reference;
	// empty until read.
	nodeUID types.UID
	// nodeErr: reading the Node failed (logged once until it works).
	nodeErr bool
	// failed holds, per operation and object UID, the error last logged: a
	// failure is logged once until it changes or the operation succeeds, so
	// an unreachable API server does not flood the log every pass.
	failed map[string]string
}

// fail logs a failed operation op on uid, unless the same error was logged
// for it last time.
func (s *Syncer) fail(ctx context.Context, st *statusState, op string, uid types.UID, msg string, err error, args ...any) {
	key := op + "/" + string(uid)
	if ctx.Err() != nil || st.failed[key] == err.Error() {
		return
	}
	st.failed[key] = err.Error()
	s.log.Error(msg, append(args, "err", err)...)
}

// succeeded forgets op's failure on uid.
func (st *statusState) succeeded(op string, uid types.UID) {
	if len(st.failed) > 0 {
		delete(st.failed, op+"/"+string(uid))
	}
}

// normalized is one cached normalize result.
type normalized struct {
	from   *v1.Pod
	status v1.PodStatus
}

func newStatusState() *statusState {
	return &statusState{written: map[types.UID]v1.PodStatus{}, deleted: map[types.UID]bool{}, norm: map[types.UID]normalized{},
		failed: map[string]string{}}
}

// runStatus writes statuses, deletes finished pods and keeps the mirror pods
// until ctx ends: a prompt pass after the agent's table or the cached pods
// changed, a full one every StatusPeriod.
func (s *Syncer) runStatus(ctx context.Context) {
	t := time.NewTicker(s.cfg.StatusPeriod)
	defer t.Stop()
	st := newStatusState()
	s.pass(ctx, st, true)
	for {
		full := false
		select {
		case <-ctx.Done():
			return
		case <-s.agent.Changes():
		case <-s.statusC:
		case <-t.C:
			full = true
		}
		s.pass(ctx, st, full)
	}
}

// pass is one sweep over the agent's pods. A prompt pass (full false) skips
// a pod whose status equals the one last written, even if the cache does
// not show that write yet; a full pass compares with the cache only, so it
// also repairs a status someone else changed.
func (s *Syncer) pass(ctx context.Context, st *statusState, full bool) {
	pods := s.agent.Pods()
	cached, err := s.lister.List(everything)
	if err != nil { // the indexer's List does not fail
		s.log.Error("Listing cached pods failed", "err", err)
		return
	}
	byName := make(map[string]*v1.Pod, len(cached))
	for _, c := range cached {
		byName[c.Namespace+"/"+c.Name] = c
	}
	gone := map[types.UID]bool{} // mirror pods deleted in this pass
	for _, p := range pods {
		if ctx.Err() != nil {
			return
		}
		target := byName[p.Namespace+"/"+p.Name]
		if qos.IsStatic(p) {
			target = s.mirrorTarget(ctx, st, p, target, gone)
			if target != nil {
				s.writeStatus(ctx, st, target, p, full)
			}
			continue
		}
		if target == nil || target.UID != p.UID || qos.IsMirror(target) {
			continue // not from the API server (a local pod), or gone
		}
		if !s.writeStatus(ctx, st, target, p, full) {
			continue
		}
		if target.DeletionTimestamp != nil && !st.deleted[target.UID] &&
			s.agent.IsPodTerminated(string(p.UID)) && s.agent.PodCleanedUp(p) {
			if s.deletePod(ctx, st, target, "Deleting pod whose containers stopped") {
				st.deleted[target.UID] = true
			}
		}
	}
	// Mirror pods whose static pod is gone and stopped.
	for _, c := range cached {
		if !qos.IsMirror(c) || gone[c.UID] {
			continue
		}
		if h := c.Annotations[qos.ConfigMirrorAnnotation]; s.agent.IsPodDeleted(h) && s.agent.IsPodTerminated(h) {
			if s.deletePod(ctx, st, c, "Deleting mirror pod of a static pod that is gone") {
				gone[c.UID] = true
			}
		}
	}
	// Forget pods the agent and objects the cache no longer hold.
	held := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		held[p.UID] = true
	}
	for uid := range st.norm {
		if !held[uid] {
			delete(st.norm, uid)
		}
	}
	live := make(map[types.UID]bool, len(cached))
	for _, c := range cached {
		live[c.UID] = true
	}
	for key := range st.failed {
		_, uid, _ := strings.Cut(key, "/")
		if !live[types.UID(uid)] && !held[types.UID(uid)] {
			delete(st.failed, key)
		}
	}
	for uid := range st.written {
		if !live[uid] {
			delete(st.written, uid)
		}
	}
	for uid := range st.deleted {
		if !live[uid] {
			delete(st.deleted, uid)
		}
	}
}

// writeStatus puts p's status (the agent's) to target, the API object, when
// it differs from target's (and, in a prompt pass, from the last one
// written). A conflict re-reads the object and applies the status to it. It
// reports whether target now holds the status (false: the write failed,
// logged, and is retried by a later pass).
func (s *Syncer) writeStatus(ctx context.Context, st *statusState, target, p *v1.Pod, full bool) bool {
	n, ok := st.norm[p.UID]
	if !ok || n.from != p {
		n = normalized{from: p, status: normalize(p.Status)}
		st.norm[p.UID] = n
	}
	ours := n.status
	want := mergeStatus(target.Status, ours, target.Spec.ReadinessGates)
	if equality.Semantic.DeepEqual(want, target.Status) {
		st.written[target.UID] = want
		return true
	}
	if last, ok := st.written[target.UID]; ok && !full && equality.Semantic.DeepEqual(last, want) {
		return true
	}
	pods := s.client.Pods(target.Namespace)
	obj := target
	for attempt := 1; ; attempt++ {
		upd := obj.DeepCopy()
		upd.Status = want
		_, err := pods.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err == nil {
			st.written[target.UID] = want
			st.succeeded("status", target.UID)
			return true
		}
		if !apierrors.IsConflict(err) || attempt == maxAttempts {
			if !apierrors.IsNotFound(err) {
				s.fail(ctx, st, "status", target.UID, "Writing pod status failed, will retry", err, "pod", nodeapi.PodName(target), "podUID", target.UID)
			}
			return false
		}
		fresh, err := pods.Get(ctx, target.Name, metav1.GetOptions{})
		if err != nil || fresh.UID != target.UID {
			if err != nil && !apierrors.IsNotFound(err) {
				s.fail(ctx, st, "status", target.UID, "Reading pod after a status conflict failed, will retry", err, "pod", nodeapi.PodName(target), "podUID", target.UID)
			}
			return false
		}
		obj = fresh
		want = mergeStatus(fresh.Status, ours, fresh.Spec.ReadinessGates)
		if equality.Semantic.DeepEqual(want, fresh.Status) {
			st.written[target.UID] = want
			return true
		}
	}
}

// deletePod deletes obj at once (grace 0) if it is still the object of that
// UID; it reports whether it is gone. why is the log message.
func (s *Syncer) deletePod(ctx context.Context, st *statusState, obj *v1.Pod, why string) bool {
	grace := int64(0)
	uid := obj.UID
	err := s.client.Pods(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid},
	})
	switch {
	case err == nil:
		s.log.Info(why, "pod", nodeapi.PodName(obj), "podUID", uid)
		st.succeeded("delete", uid)
		return true
	case apierrors.IsNotFound(err), apierrors.IsConflict(err): // gone, or another object by now
		st.succeeded("delete", uid)
		return true
	default:
		s.fail(ctx, st, "delete", uid, "Deleting pod failed, will retry", err, "pod", nodeapi.PodName(obj), "podUID", uid)
		return false
	}
}

// kubeletConditions are the pod condition types the node owns; the others
// (readiness gates, DisruptionTarget from a controller, PodScheduled when
// the agent's status has none: a pod rejected at admission) are kept as the
// server has them unless the agent sets them too.
var kubeletConditions = []v1.PodConditionType{
	v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady,
}

// mergeStatus is the status to write over server, the object's status, from
// ours, the agent's: ours's phase, reason, message, IPs, start time and
// container statuses; ours's conditions plus the server's of types the node
// does not own and ours does not set; the server's other fields (nominated
// node, resource claim statuses, resize, observed generation). A terminal
// phase on the server stays (the API server refuses to leave it), and the
// server's QoS class, once set, stays (it is immutable). The pod is Ready
// only when its containers are and every readiness gate's condition is True.
// mergeStatus does not modify its arguments.
func mergeStatus(server, ours v1.PodStatus, gates []v1.PodReadinessGate) v1.PodStatus {
	out := *server.DeepCopy()
	o := ours.DeepCopy()
	out.Phase, out.Reason, out.Message = o.Phase, o.Reason, o.Message
	out.HostIP, out.HostIPs, out.PodIP, out.PodIPs = o.HostIP, o.HostIPs, o.PodIP, o.PodIPs
	out.StartTime = o.StartTime
	out.InitContainerStatuses, out.ContainerStatuses = o.InitContainerStatuses, o.ContainerStatuses
	out.EphemeralContainerStatuses = o.EphemeralContainerStatuses
	if out.QOSClass == "" {
		out.QOSClass = o.QOSClass
	}
	conds := o.Conditions
	for _, c := range server.Conditions {
		if slices.Contains(kubeletConditions, c.Type) ||
			slices.ContainsFunc(conds, func(x v1.PodCondition) bool { return x.Type == c.Type }) {
			continue
		}
		conds = append(conds, *c.DeepCopy())
	}
	out.Conditions = conds
	gateReady(out.Conditions, gates)
	if terminal(server.Phase) && !terminal(o.Phase) {
		out.Phase = server.Phase
	}
	return out
}

// gateReady turns a True PodReady condition in conds False when a readiness
// gate's condition is missing or not True, with the kubelet's reason and
// message.
func gateReady(conds []v1.PodCondition, gates []v1.PodReadinessGate) {
	i := slices.IndexFunc(conds, func(c v1.PodCondition) bool { return c.Type == v1.PodReady })
	if i < 0 || conds[i].Status != v1.ConditionTrue || len(gates) == 0 {
		return
	}
	var unready []string
	for _, g := range gates {
		j := slices.IndexFunc(conds, func(c v1.PodCondition) bool { return c.Type == g.ConditionType })
		switch {
		case j < 0:
			unready = append(unready, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		case conds[j].Status != v1.ConditionTrue:
			unready = append(unready, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", g.ConditionType, conds[j].Status))
		}
	}
	if len(unready) > 0 {
		conds[i].Status, conds[i].Reason, conds[i].Message = v1.ConditionFalse, "ReadinessGatesNotReady", strings.Join(unready, ", ")
	}
}

func terminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// normalize returns st as the API server stores it: times to the second
// (the JSON form of metav1.Time). It does not modify st.
func normalize(st v1.PodStatus) v1.PodStatus {
	b, err := json.Marshal(st)
	if err != nil {
		return *st.DeepCopy()
	}
	var out v1.PodStatus
	if err := json.Unmarshal(b, &out); err != nil {
		return *st.DeepCopy()
	}
	return out
}

// errNoNode: the Node object could not be read.
var errNoNode = errors.New("node not readable")

// nodeUID returns the Node's UID, reading it once.
func (s *Syncer) nodeUID(ctx context.Context, st *statusState) (types.UID, error) {
	if st.nodeUID != "" {
		return st.nodeUID, nil
	}
	n, err := s.client.Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		if !st.nodeErr && ctx.Err() == nil {
			s.log.Info("Mirror pods wait for the Node object", "node", s.cfg.NodeName, "err", err)
		}
		st.nodeErr = true
		return "", fmt.Errorf("%w: %w", errNoNode, err)
	}
	st.nodeUID, st.nodeErr = n.UID, false
	return n.UID, nil
}
