// Package clientgo adapts a client-go kubernetes.Interface (a real
// clientset, or client-go's fake in tests) to kubeclient.Interface.
// Importing it links every API group of client-go's scheme: the agent's
// binary should not, once nothing else needs client-go's clientset.
package clientgo

import (
	"k8s.io/client-go/kubernetes"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
)

// Wrap returns k as a kubeclient.Interface; the clients are k's. When k
// says it cannot serve watch-list requests (client-go's fake does), so
// does the result, for cache.ToListWatcherWithWatchListSemantics.
func Wrap(k kubernetes.Interface) kubeclient.Interface { return wrapped{k} }

type wrapped struct{ k kubernetes.Interface }

// IsWatchListSemanticsUnSupported reports k's answer, false if it has none.
func (w wrapped) IsWatchListSemanticsUnSupported() bool {
	u, ok := w.k.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

func (w wrapped) Nodes() kubeclient.NodeInterface            { return w.k.CoreV1().Nodes() }
func (w wrapped) Pods(ns string) kubeclient.PodInterface     { return w.k.CoreV1().Pods(ns) }
func (w wrapped) Events(ns string) kubeclient.EventInterface { return w.k.CoreV1().Events(ns) }
func (w wrapped) ConfigMaps(ns string) kubeclient.ConfigMapInterface {
	return w.k.CoreV1().ConfigMaps(ns)
}
func (w wrapped) Secrets(ns string) kubeclient.SecretInterface   { return w.k.CoreV1().Secrets(ns) }
func (w wrapped) Services(ns string) kubeclient.ServiceInterface { return w.k.CoreV1().Services(ns) }
func (w wrapped) ServiceAccounts(ns string) kubeclient.ServiceAccountInterface {
	return w.k.CoreV1().ServiceAccounts(ns)
}
func (w wrapped) Leases(ns string) kubeclient.LeaseInterface { return w.k.CoordinationV1().Leases(ns) }
func (w wrapped) TokenReviews() kubeclient.TokenReviewInterface {
	return w.k.AuthenticationV1().TokenReviews()
}
func (w wrapped) SubjectAccessReviews() kubeclient.SubjectAccessReviewInterface {
	return w.k.AuthorizationV1().SubjectAccessReviews()
}
