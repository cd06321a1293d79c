package podsource

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/dump"

	"github.com/nodekeeper/nodekeeper/qos"
)

const (
	// ConfigHashAnnotation is the annotation a static pod carries its hash in:
	// its UID, derived from the pod as read, the node and the file.
	ConfigHashAnnotation = "kubernetes.io/config.hash"
	// ConfigSeenAnnotation is the annotation holding when the source first saw
	// the pod, in RFC 3339 with nine fraction digits (SeenLayout).
	ConfigSeenAnnotation = "kubernetes.io/config.seen"
	// FileSource is the qos.ConfigSourceAnnotation value of pods from files.
	FileSource = "file"
	// SeenLayout is the time layout of ConfigSeenAnnotation: RFC 3339 with a
	// fixed nine-digit fraction, as the kubelet writes it.
	SeenLayout = "2006-01-02T15:04:05.000000000Z07:00"
)

// ParseManifest reads the pods of one manifest file: data is the content of
// file, nodeName the node the pods run on. It decodes, defaults and validates
// them (ParsePods) and makes them static (MakeStatic). The pods come back in
// file order without the config.seen annotation, which the watching source
// sets. Errors are as ParsePods returns them. ParseManifest is a pure function.
func ParseManifest(file string, data []byte, nodeName string) (pods []*v1.Pod, errs []error) {
	pods, errs = ParsePods(file, data, nodeName)
	for _, p := range pods {
		MakeStatic(p, file, nodeName)
	}
	return pods, errs
}

// ParsePods reads the pods of one manifest: data is the content of file (the
// name is used in errors only), nodeName the node the pods run on. It decodes
// them strictly (YAML documents or a JSON object; each a v1 Pod, PodList or
// List of pods), defaults them (SetDefaults) and validates them (Validate),
// and returns them in file order, as written otherwise.
//
// A pod that cannot be read or is invalid is skipped with an *Error in errs;
// the other pods of the file are kept. An error that spoils the whole file (not
// UTF-8, a YAML syntax error) gives no pods. A file with no documents, or only
// empty ones, holds no pods and no error. ParsePods is a pure function.
func ParsePods(file string, data []byte, nodeName string) (pods []*v1.Pod, errs []error) {
	docs, errs, fileErr := decodeManifest(file, data)
	if fileErr != nil {
		return nil, []error{fileErr}
	}
	for _, d := range docs {
		p := d.pod
		name := p.Name
		if p.Namespace != "" {
			name = p.Namespace + "/" + p.Name
		}
		SetDefaults(p)
		if verrs := Validate(p, nodeName); len(verrs) > 0 {
			err := verrs[0]
			if len(verrs) > 1 {
				err = fmt.Errorf("%w (and %d more)", verrs[0], len(verrs)-1)
			}
			errs = append(errs, &Error{File: file, Where: d.where, Pod: name, Err: err})
			continue
		}
		pods = append(pods, p)
	}
	return pods, errs
}

// MakeStatic turns a defaulted, valid pod read from file into the static pod
// the node runs, as the kubelet does: a UID, when the manifest gives none, from
// StaticUID; the name suffixed with "-" and the lowercased node name; namespace
// "default" when empty; spec.nodeName; the annotations config.source=file and
// config.hash=<UID>; a toleration of every NoExecute taint; phase Pending.
func MakeStatic(pod *v1.Pod, file, nodeName string) {
	pod.TypeMeta = metav1.TypeMeta{}
	if pod.UID == "" {
		pod.UID = StaticUID(pod, file, nodeName)
	}
	pod.Name = staticName(pod.Name, nodeName)
	if pod.Namespace == "" {
		pod.Namespace = v1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[ConfigHashAnnotation] = string(pod.UID)
	pod.Annotations[qos.ConfigSourceAnnotation] = FileSource
	tolerateNoExecute(pod)
	pod.Status.Phase = v1.PodPending
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
}

// StaticUID derives a static pod's UID from the pod as read (after defaulting,
// before MakeStatic changes it; MakeStatic clears its apiVersion and kind, so
// that a list item that leaves them out hashes the same), the node name and the manifest file: the
// 128-bit FNV-1a hash, in hex, of the pod's deep dump (k8s.io/utils/dump's
// ForHash: go-spew with sorted keys and no pointer addresses), then
// "host:<nodeName>" and "file:<file>", in the kubelet's order. The same pod in
// the same file on the same node always gets the same UID, so a restarted agent
// finds its pods again; any change to the pod gives a new UID.
func StaticUID(pod *v1.Pod, file, nodeName string) types.UID {
	h := fnv.New128a()
	_, _ = io.WriteString(h, dump.ForHash(pod))
	fmt.Fprintf(h, "host:%s", nodeName)
	fmt.Fprintf(h, "file:%s", file)
	return types.UID(hex.EncodeToString(h.Sum(nil)))
}

func staticName(name, nodeName string) string {
	return name + "-" + strings.ToLower(nodeName)
}

// tolerateNoExecute adds the toleration of every NoExecute taint, replacing
// one that already matches it (same key, operator, value and effect).
func tolerateNoExecute(pod *v1.Pod) {
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	for i, t := range pod.Spec.Tolerations {
		if t.Key == want.Key && t.Operator == want.Operator && t.Value == want.Value && t.Effect == want.Effect {
			pod.Spec.Tolerations[i] = want
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, want)
}

// seenString formats t as ConfigSeenAnnotation holds it.
func seenString(t time.Time) string { return t.Format(SeenLayout) }
