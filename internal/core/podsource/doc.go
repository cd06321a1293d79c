// Package podsource reads static pods: manifest files in a directory (the
// kubelet's staticPodPath, --pod-manifest-path) or one file.
//
// A manifest is decoded strictly (unknown and duplicate fields are errors
// naming their path), defaulted as the API server defaults a v1 Pod, validated
// for what a node relies on, and then treated as the kubelet treats a static
// pod: a UID derived from the pod, the node and the file, the name suffixed
// with the node name, the config-source annotations and the NoExecute
// toleration. Such pods are static and critical for qos.IsStatic and
// qos.IsCritical.
//
// [File] watches the path (inotify plus a periodic rescan) and hands the
// complete current set of valid pods to a sink whenever it changes. An invalid
// manifest is logged and recorded as an event once per file content and
// skipped; the other pods are unaffected.
package podsource
