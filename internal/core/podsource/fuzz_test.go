package podsource

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/qos"
)

// FuzzManifest: whatever a manifest holds, ParseManifest returns quickly
// without panicking; every error is a one-line *Error naming the file; every
// pod it returns is valid, static and critical.
func FuzzManifest(f *testing.F) {
	for _, seed := range []string{
		okPod,
		okPod + "---\n" + manifest("api", "x:latest"),
		`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}}]}`,
		pod("web", "hostNetwork: true\nvolumes:\n- name: v\n  hostPath: {path: /tmp}",
			"ports:\n- containerPort: 80\nresources:\n  limits: {cpu: 1e400, memory: 1Gi}\nvolumeMounts:\n- {name: v, mountPath: /v}\n"+
				"livenessProbe:\n  httpGet: {port: 80}\nenv:\n- name: A\n  valueFrom: {fieldRef: {fieldPath: metadata.name}}"),
		pod("web", "initContainers:\n- name: i\n  image: x\n  restartPolicy: Always\n  startupProbe: {exec: {command: [x]}}", ""),
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n",
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: \xff\n",
		"- [a\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "/m/f.yaml"
		pods, errs := ParseManifest(file, data, "Node")
		for _, err := range errs {
			var perr *Error
			if !errors.As(err, &perr) || !errors.Is(err, decode.ErrBadInput) {
				t.Errorf("error %v is not a *podsource.Error of class ErrBadInput", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, file+": ") || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error %q does not start with the file or is not one line", msg)
			}
		}
		for _, p := range pods {
			if p.UID == "" || !strings.HasSuffix(p.Name, "-node") || p.Namespace == "" || p.Spec.NodeName != "Node" {
				t.Errorf("pod %s/%s uid %q node %q is not static", p.Namespace, p.Name, p.UID, p.Spec.NodeName)
			}
			if !qos.IsStatic(p) || !qos.IsCritical(p) {
				t.Errorf("pod %s is not static and critical", p.Name)
			}
			// Defaulting and validating again changes nothing and finds nothing.
			again := p.DeepCopy()
			SetDefaults(again)
			again.Name = strings.TrimSuffix(again.Name, "-node")
			if verrs := Validate(again, "Node"); len(verrs) > 0 {
				t.Errorf("pod %s fails validation once static: %v", p.Name, verrs)
			}
		}
	})
}
