package nodeapi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FieldUse is where a downward-API fieldRef is read; each place allows its
// own field paths.
type FieldUse uint8

const (
	// FieldInEnv is a container's environment variable
	// (env[].valueFrom.fieldRef).
	FieldInEnv FieldUse = iota
	// FieldInVolume is a file of a downwardAPI volume or of a projected
	// volume's downwardAPI source (items[].fieldRef).
	FieldInVolume
)

// PodFacts are what the downward API serves that the node knows and the pod
// object need not hold yet.
type PodFacts struct {
	// NodeName is spec.nodeName for a pod whose spec has none (a static pod
	// or one read from a file).
	NodeName string
	// HostIP is status.hostIP and status.hostIPs: the node's address.
	HostIP string
	// PodIPs are status.podIP (the first) and status.podIPs (all, comma
	// separated): the sandbox's addresses, or the host's for a
	// host-network pod.
	PodIPs []string
}

// downwardField is one field path the downward API serves.
type downwardField struct {
	path        string
	env, volume bool
	value       func(pod *v1.Pod, f PodFacts) string
}

// downwardFields is the one list of the field paths the downward API serves
// and where, as the API documents them (EnvVarSource.fieldRef,
// DownwardAPIVolumeFile.fieldRef) and its validation allows: the pod's name,
// namespace, UID everywhere, and one label or annotation by subscript
// (metadata.labels['k'], handled beside the list) everywhere; all labels
// or all annotations (one key="value" a line) only in a volume; the node's
// name, the service account and the addresses only in env.
var downwardFields = []downwardField{
	{path: "metadata.name", env: true, volume: true, value: func(p *v1.Pod, _ PodFacts) string { return p.Name }},
	{path: "metadata.namespace", env: true, volume: true, value: func(p *v1.Pod, _ PodFacts) string { return p.Namespace }},
	{path: "metadata.uid", env: true, volume: true, value: func(p *v1.Pod, _ PodFacts) string { return string(p.UID) }},
	{path: "metadata.labels", volume: true, value: func(p *v1.Pod, _ PodFacts) string { return formatMap(p.Labels) }},
	{path: "metadata.annotations", volume: true, value: func(p *v1.Pod, _ PodFacts) string { return formatMap(p.Annotations) }},
	{path: "spec.nodeName", env: true, value: func(p *v1.Pod, f PodFacts) string {
		if p.Spec.NodeName != "" {
			return p.Spec.NodeName
		}
		return f.NodeName
	}},
	{path: "spec.serviceAccountName", env: true, value: func(p *v1.Pod, _ PodFacts) string { return p.Spec.ServiceAccountName }},
	{path: "status.hostIP", env: true, value: func(_ *v1.Pod, f PodFacts) string { return f.HostIP }},
	{path: "status.hostIPs", env: true, value: func(_ *v1.Pod, f PodFacts) string { return f.HostIP }},
	{path: "status.podIP", env: true, value: func(_ *v1.Pod, f PodFacts) string {
		if len(f.PodIPs) > 0 {
			return f.PodIPs[0]
		}
		return ""
	}},
	{path: "status.podIPs", env: true, value: func(_ *v1.Pod, f PodFacts) string { return strings.Join(f.PodIPs, ",") }},
}

// FieldRefValue returns the value of the downward-API field path (a fieldRef's
// fieldPath) of pod, read in use, as the kubelet resolves it: the pod's fields,
// with facts for what the node knows (its name for a pod without
// spec.nodeName, the host's and the pod's addresses). A subscripted label or
// annotation (metadata.labels['k']) that the pod lacks is "". A path the
// downward API does not serve in use is an error naming the path. It does not
// modify pod.
func FieldRefValue(pod *v1.Pod, path string, use FieldUse, facts PodFacts) (string, error) {
	if base, key, ok := cutSubscript(path); ok {
		switch base {
		case "metadata.labels":
			return pod.Labels[key], nil
		case "metadata.annotations":
			return pod.Annotations[key], nil
		}
	} else if i := slices.IndexFunc(downwardFields, func(f downwardField) bool { return f.path == path }); i >= 0 {
		if f := downwardFields[i]; use == FieldInEnv && f.env || use == FieldInVolume && f.volume {
			return f.value(pod, facts), nil
		}
	}
	if use == FieldInVolume {
		return "", fmt.Errorf("fieldRef.fieldPath %q is not supported in a downwardAPI volume", path)
	}
	return "", fmt.Errorf("fieldRef.fieldPath %q is not supported", path)
}

// cutSubscript splits `base['key']` into base and key; sub is false for a
// path without a subscript.
func cutSubscript(path string) (base, key string, sub bool) {
	base, rest, ok := strings.Cut(path, "['")
	if !ok {
		return path, "", false
	}
	key, ok = strings.CutSuffix(rest, "']")
	return base, key, ok
}

// formatMap writes m one key="value" a line (the value Go-quoted), in key
// order, without a final newline: a downwardAPI volume's file of all labels
// or all annotations.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = fmt.Sprintf("%s=%q", k, m[k])
	}
	return strings.Join(lines, "\n")
}

// ContainerRequests returns c's requests as the API server defaults them: a
// request absent where a limit is set is the limit (static pods never went
// through that defaulting). It returns a new list and does not modify c.
func ContainerRequests(c *v1.Container) v1.ResourceList {
	requests := make(v1.ResourceList, len(c.Resources.Requests)+len(c.Resources.Limits))
	for k, v := range c.Resources.Requests {
		requests[k] = v
	}
	for k, v := range c.Resources.Limits {
		if _, ok := requests[k]; !ok {
			requests[k] = v
		}
	}
	return requests
}

// ResourceFieldValue returns the value of the downward-API resourceFieldRef
// ref of pod, as the kubelet resolves it: the request or limit that
// ref.Resource names (limits.cpu, limits.memory, limits.ephemeral-storage,
// or the same under requests.) of the container ref.ContainerName names (an
// init or regular container of pod), or of c when it names none (the
// container whose env reads it; a downwardAPI volume passes nil, its items
// name their container), divided by ref.Divisor (1 when zero) and rounded
// up, cpu in millicores against the divisor's. Requests are defaulted as
// [ContainerRequests] does; an absent limit is nodeLimits' (the kubelet takes
// the node's allocatable; 0 when nodeLimits has none). An unknown container
// or resource is an error naming it. It does not modify its arguments.
func ResourceFieldValue(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector, nodeLimits v1.ResourceList) (string, error) {
	if ref.ContainerName != "" || c == nil {
		if c == nil || ref.ContainerName != c.Name {
			c = nil
			for _, ctrs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
				for i := range ctrs {
					if ctrs[i].Name == ref.ContainerName {
						c = &ctrs[i]
					}
				}
			}
		}
		if c == nil {
			return "", fmt.Errorf("resourceFieldRef.containerName %q is not a container of the pod", ref.ContainerName)
		}
	}
	which, name, ok := strings.Cut(ref.Resource, ".")
	res := v1.ResourceName(name)
	if !ok || (which != "limits" && which != "requests") ||
		(res != v1.ResourceCPU && res != v1.ResourceMemory && res != v1.ResourceEphemeralStorage) {
		return "", fmt.Errorf("resourceFieldRef.resource %q is not supported", ref.Resource)
	}
	var q resource.Quantity
	if which == "limits" {
		var set bool
		if q, set = c.Resources.Limits[res]; !set {
			q = nodeLimits[res]
		}
	} else {
		q = ContainerRequests(c)[res]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if res == v1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}
