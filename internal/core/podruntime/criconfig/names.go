// Package criconfig turns a v1.Pod into the CRI configs of its sandbox and
// containers, as the kubelet's kuberuntime does: labels and annotations,
// DNS, hostname, namespaces, security contexts, resources, swap, the
// environment (downward API, ConfigMaps, Secrets, env files, service
// variables), hosts file content and devices. It is pure: it makes no CRI
// call and does no I/O. What it needs from the node (the host's resolv.conf
// and hosts file, the pod cgroup, the volumes' host paths, the env files'
// content, the API objects the environment reads) comes in as data from the
// pod runtime (internal/core/podruntime), which carries the configs out.
package criconfig

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
)

// The labels and annotations the kubelet puts on CRI objects, and ours. The
// pod runtime reads them back from the runtime's listings.
const (
	LabelPodName        = "io.kubernetes.pod.name"
	LabelPodNamespace   = "io.kubernetes.pod.namespace"
	LabelPodUID         = "io.kubernetes.pod.uid"
	LabelContainerName  = "io.kubernetes.container.name"
	LabelKubeletManaged = "io.kubernetes.kubelet.managed"

	AnnotationContainerHash = "io.kubernetes.container.hash"
	AnnotationRestartCount  = podstatus.AnnotationRestartCount
	AnnotationTermMsgPath   = "io.kubernetes.container.terminationMessagePath"
	AnnotationTermMsgPolicy = "io.kubernetes.container.terminationMessagePolicy"
	AnnotationPreStop       = "io.kubernetes.container.preStopHandler"
	AnnotationPorts         = "io.kubernetes.container.ports"
	AnnotationPodGrace      = "io.kubernetes.pod.terminationGracePeriod"

	// AnnotationSandboxID is ours: the sandbox a container was created in,
	// so a relist knows which containers belong to the current sandbox.
	AnnotationSandboxID = "nodekeeper.io/sandbox-id"
	// AnnotationInitKind is ours: "init" or "sidecar" for init containers.
	AnnotationInitKind = "nodekeeper.io/init-container"
	// AnnotationImage is ours: the image the spec named when the container
	// was made, which its status shows (the spec's may have changed since).
	AnnotationImage = podstatus.AnnotationImage
	// AnnotationRun is ours: the pod's run the container belongs to
	// (podstatus.RestartAll).
	AnnotationRun = podstatus.AnnotationRun
)

// DefaultGracePeriod is the API default of terminationGracePeriodSeconds.
const DefaultGracePeriod = 30

// PodLogDir is the pod's log directory under the pod logs root,
// root/NS_NAME_UID.
func PodLogDir(root, namespace, name string, uid string) string {
	return filepath.Join(root, namespace+"_"+name+"_"+uid)
}

// podLabels are the labels of the pod's sandbox and, with the container name,
// of its containers: the pod's own labels and the kubelet's identity labels.
func podLabels(pod *v1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[LabelPodName] = pod.Name
	l[LabelPodNamespace] = pod.Namespace
	l[LabelPodUID] = string(pod.UID)
	return l
}

// Hash is the io.kubernetes.container.hash annotation of c: an FNV-32a hash
// of the container's spec as JSON. A container whose spec changes gets a new
// hash, and the running one is restarted. It encodes c as JSON, the costly
// part of planning a sync: a sync computes it once per container (Hashes)
// and hands it on.
func Hash(c *v1.Container) string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("criconfig: marshal container %q: %v", c.Name, err)) // a v1.Container always marshals
	}
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// Hashes are the Hash of each init and regular container of pod, by name
// (ephemeral containers, which are started once and never compared, are
// not in it).
func Hashes(pod *v1.Pod) map[string]string {
	out := make(map[string]string, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			out[cs[i].Name] = Hash(&cs[i])
		}
	}
	return out
}
