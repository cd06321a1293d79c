package nodeapi

import v1 "k8s.io/api/core/v1"

// PodName renders a pod as the kubelet's logs do: "namespace/name", or the name
// alone when the namespace is empty.
func PodName(p *v1.Pod) string { return joinName(p.Namespace, p.Name) }

// PodKey identifies a pod on a node.
type PodKey string

// KeyOf returns pod's identity: its UID when set, else its namespace and name
// (pods read from files may have no UID).
func KeyOf(p *v1.Pod) PodKey {
	if p.UID != "" {
		return PodKey("uid:" + string(p.UID))
	}
	return PodKey("name:" + p.Namespace + "/" + p.Name)
}

func joinName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
