package apipods

import (
	"context"
	"maps"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/core/podsource"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// mirrorTarget makes sure static pod p has its mirror pod and returns it,
// the object its status goes to, or nil when there is none yet: cur (the
// cached pod of p's name, if any) is kept when it is p's current mirror;
// a stale one (another hash, or being deleted) is deleted (and recorded in
// gone) once the static pod it mirrors has stopped, and a new one is created
// in a later pass; a missing one is created.
// A static pod its source dropped keeps its mirror, with its status, until it
// has stopped (as the kubelet: through its grace period), and gets no new one.
func (s *Syncer) mirrorTarget(ctx context.Context, st *statusState, p, cur *v1.Pod, gone map[types.UID]bool) *v1.Pod {
	hash := p.Annotations[podsource.ConfigHashAnnotation]
	removed := s.agent.IsPodDeleted(string(p.UID))
	if hash == "" || removed && s.agent.IsPodTerminated(string(p.UID)) {
		return nil
	}
	if cur != nil {
		switch {
		case !qos.IsMirror(cur):
			s.log.Error("A pod not mirroring the static pod has its name; no mirror pod", "pod", nodeapi.PodName(p), "podUID", p.UID, "apiPodUID", cur.UID)
			return nil
		case cur.Annotations[qos.ConfigMirrorAnnotation] == hash && cur.DeletionTimestamp == nil:
			return cur
		case cur.DeletionTimestamp == nil && !s.agent.IsPodTerminated(cur.Annotations[qos.ConfigMirrorAnnotation]):
			// The mirror of the static pod p replaces (a changed manifest),
			// which is still stopping: it stays, with that pod's status,
			// through its grace period, as the kubelet keeps it.
		case !gone[cur.UID]:
			if s.deletePod(ctx, st, cur, "Deleting outdated mirror pod") {
				gone[cur.UID] = true
			}
		}
		return nil
	}
	if removed {
		return nil
	}
	uid, err := s.nodeUID(ctx, st)
	if err != nil {
		return nil
	}
	_, err = s.client.Pods(p.Namespace).Create(ctx, mirrorPod(p, s.cfg.NodeName, uid), metav1.CreateOptions{})
	switch {
	case err == nil:
		s.log.Info("Created mirror pod", "pod", nodeapi.PodName(p), "podUID", p.UID)
		st.succeeded("mirror", p.UID)
	case apierrors.IsAlreadyExists(err): // the cache will show it
	default:
		if apierrors.IsForbidden(err) {
			st.nodeUID = "" // the Node may have been recreated: read it again
		}
		s.fail(ctx, st, "mirror", p.UID, "Creating mirror pod failed, will retry", err, "pod", nodeapi.PodName(p), "podUID", p.UID)
	}
	return nil
}

// mirrorPod is the mirror pod of static pod p: its name, namespace, labels,
// annotations plus config.mirror = its config.hash, and spec, owned by the
// Node (a controller reference that does not block the Node's deletion, as
// NodeRestriction requires of the mirror pods a node creates).
func mirrorPod(p *v1.Pod, nodeName string, nodeUID types.UID) *v1.Pod {
	ann := maps.Clone(p.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[qos.ConfigMirrorAnnotation] = p.Annotations[podsource.ConfigHashAnnotation]
	controller := true
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, Labels: maps.Clone(p.Labels), Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: nodeName, UID: nodeUID, Controller: &controller,
			}},
		},
		Spec: *p.Spec.DeepCopy(),
	}
}
