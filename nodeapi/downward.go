package nodeapi

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
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
