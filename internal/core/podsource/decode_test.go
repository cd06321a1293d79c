package podsource

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

const okPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox:1.36
`

// pod returns a YAML pod named name whose single container has the extra
// container fields in ctr (indented under it) and extra spec fields in spec.
func pod(name, spec, ctr string) string {
	s := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n"
	if spec != "" {
		s += indent(spec, "  ")
	}
	s += "  containers:\n  - name: c\n    image: busybox:1.36\n"
	if ctr != "" {
		s += indent(ctr, "    ")
	}
	return s
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = by + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestParseManifest(t *testing.T) {
	t.Parallel()
	const file = "/etc/kubernetes/manifests/web.yaml"
	for _, tc := range []struct {
		name     string
		in       string
		wantPods []string // namespace/name of the pods read
		wantErrs []string
	}{
		{name: "one pod", in: okPod, wantPods: []string{"default/web-node-1"}},
		{name: "json object", in: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"x"}]}}`,
			wantPods: []string{"kube-system/web-node-1"}},
		{name: "documents", in: okPod + "---\n# only a comment\n---\n" + strings.Replace(okPod, "name: web", "name: api", 1),
			wantPods: []string{"default/web-node-1", "default/api-node-1"}},
		{name: "empty file", in: ""},
		{name: "comments only", in: "# nothing yet\n---\n"},
		{name: "pod list", in: `{"apiVersion":"v1","kind":"PodList","items":[
			{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
			{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x"}]}}]}`,
			wantPods: []string{"default/a-node-1", "default/b-node-1"}},
		{name: "list: a bad item skips itself only", in: `{"apiVersion":"v1","kind":"List","items":[
			{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}},
			{"metadata":{"name":"untyped"},"spec":{"containers":[{"name":"c","image":"x"}]}},
			{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x"}]}}]}`,
			wantPods: []string{"default/b-node-1"},
			wantErrs: []string{
				file + `: document 1 items[0]: apiVersion "v1" kind "Service": want apiVersion v1 and kind Pod, PodList or List`,
				file + `: document 1 items[1]: apiVersion "" kind "": want apiVersion v1 and kind Pod, PodList or List`,
			}},
		{name: "other kind, other documents kept", in: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n---\n" + okPod,
			wantPods: []string{"default/web-node-1"},
			wantErrs: []string{file + `: document 1: apiVersion "apps/v1" kind "Deployment": want apiVersion v1 and kind Pod, PodList or List`}},
		{name: "no kind", in: "apiVersion: v1\nmetadata:\n  name: x\n",
			wantErrs: []string{file + `: document 1: apiVersion "v1" kind "": want apiVersion v1 and kind Pod, PodList or List`}},
		{name: "not an object", in: "- a\n- b\n",
			wantErrs: []string{file + `: document 1: not an object: found ["a","b"]`}},
		{name: "unknown field", in: pod("web", "", "imagee: x"),
			wantErrs: []string{file + `: document 1: pod "web": unknown field "spec.containers[0].imagee"`}},
		{name: "duplicate field json", in: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"x"}]}}`,
			wantErrs: []string{file + `: document 1: pod "b": duplicate field "metadata.name"`}},
		{name: "duplicate key yaml", in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n",
			wantErrs: []string{file + `: document 1: duplicate field "metadata.name" (line 5; first on line 4)`}},
		{name: "bad quantity", in: pod("web", "", "resources:\n  limits:\n    memory: 12x"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].resources.limits.memory: "12x": not a valid quantity`}},
		{name: "quantity 1e400", in: pod("web", "", "resources:\n  requests:\n    cpu: 1e400"),
			wantErrs: []string{file + `: document 1: spec.containers[0].resources.requests.cpu: 1e400 (line 11): number out of range (beyond ±1.7976931348623157e+308)`}},
		{name: "quantity beyond int64", in: pod("web", "", "resources:\n  limits:\n    memory: 8Ei"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].resources.limits.memory: "8Ei": too large`}},
		{name: "quantity huge exponent is fast", in: pod("web", "", "resources:\n  limits:\n    memory: \"1e-999999999\""),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].resources.limits.memory: "1e-999999999": not a valid quantity`}},
		{name: "quantity in a divisor", in: pod("web", "", "env:\n- name: A\n  valueFrom:\n    resourceFieldRef:\n      resource: limits.cpu\n      divisor: 1e99999"),
			wantErrs: []string{file + `: document 1: spec.containers[0].env[0].valueFrom.resourceFieldRef.divisor: 1e99999 (line 14): number out of range (beyond ±1.7976931348623157e+308)`}},
		{name: "number 1e400", in: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"terminationGracePeriodSeconds":1e400,"containers":[{"name":"c","image":"x"}]}}`,
			wantErrs: []string{file + `: document 1: pod "a": spec.terminationGracePeriodSeconds: 1e400: want a whole number that fits int64`}},
		{name: "wrong type", in: pod("web", "", "ports:\n- containerPort: http"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].ports[0].containerPort: "http": want a whole number`}},
		{name: "int32 overflow", in: pod("web", "", "ports:\n- containerPort: 4294967296"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].ports[0].containerPort: 4294967296: want a whole number that fits int32`}},
		{name: "not utf-8", in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \xff\xfe\n",
			wantErrs: []string{file + `: not UTF-8 text (invalid byte at offset 43)`}},
		{name: "yaml syntax", in: "apiVersion: v1\nkind: [Pod\n",
			wantErrs: []string{file + `: document 1: yaml: line 2: did not find expected ',' or ']'`}},
		{name: "name not a DNS subdomain", in: pod("Web_1", "", ""),
			wantErrs: []string{file + `: document 1: pod "Web_1": metadata.name: "Web_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{name: "no name", in: "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: x\n",
			wantErrs: []string{file + `: document 1: metadata.name: required`}},
		{name: "static name too long", in: pod(strings.Repeat("a", 247), "", ""),
			wantErrs: []string{file + `: document 1: pod "` + strings.Repeat("a", 247) + `": metadata.name: "` + strings.Repeat("a", 247) +
				`": with the node name the static pod name "` + strings.Repeat("a", 247) + `-node-1" is 254 characters, more than 253`}},
		{name: "namespace not a DNS label", in: strings.Replace(okPod, "name: web", "name: web\n  namespace: a.b", 1),
			wantErrs: []string{file + `: document 1: pod "a.b/web": metadata.namespace: "a.b": must not contain dots`}},
		{name: "container names unique across init and regular", in: pod("web", "initContainers:\n- name: c\n  image: x", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].name: "c": duplicate container name (also spec.initContainers[0])`}},
		{name: "container name not a DNS label", in: strings.Replace(okPod, "- name: c", "- name: C", 1),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].name: "C": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{name: "no image", in: strings.Replace(okPod, "image: busybox:1.36", "image: ''", 1),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].image: "": required`}},
		{name: "no containers", in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n",
			wantErrs: []string{file + `: document 1: pod "web": spec.containers: required: a pod needs at least one container`}},
		{name: "requests above limits", in: pod("web", "", "resources:\n  requests: {memory: 2Gi}\n  limits: {memory: 1Gi}"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].resources.requests.memory: "2Gi": must be at most the limit 1Gi`}},
		{name: "negative request", in: pod("web", "", "resources:\n  requests: {cpu: -1}"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].resources.requests.cpu: "-1": must not be negative`}},
		{name: "restartPolicy", in: pod("web", "restartPolicy: Sometimes", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.restartPolicy: "Sometimes": want Always, OnFailure or Never`}},
		{name: "imagePullPolicy", in: pod("web", "", "imagePullPolicy: Maybe"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].imagePullPolicy: "Maybe": want Always, IfNotPresent or Never`}},
		{name: "protocol", in: pod("web", "", "ports:\n- containerPort: 80\n  protocol: ICMP"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].ports[0].protocol: "ICMP": want TCP, UDP or SCTP`}},
		{name: "port range", in: pod("web", "", "ports:\n- containerPort: 70000"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].ports[0].containerPort: 70000: want 1 to 65535`}},
		{name: "hostNetwork port", in: pod("web", "hostNetwork: true", "ports:\n- containerPort: 80\n  hostPort: 8080"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].ports[0].hostPort: 8080: with hostNetwork it must equal containerPort 80`}},
		{name: "volume names unique", in: pod("web", "volumes:\n- name: v\n  emptyDir: {}\n- name: v\n  emptyDir: {}", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.volumes[1].name: "v": duplicate volume name`}},
		{name: "mount of a missing volume", in: pod("web", "", "volumeMounts:\n- name: data\n  mountPath: /data"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].volumeMounts[0].name: "data": no volume of that name in spec.volumes`}},
		{name: "ephemeral containers", in: pod("web", "ephemeralContainers:\n- name: dbg\n  image: x", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.ephemeralContainers: 1: may not be set when a pod is created`}},
		{name: "probe with two handlers", in: pod("web", "", "livenessProbe:\n  exec: {command: [x]}\n  tcpSocket: {port: 80}"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].livenessProbe: 2: want exactly one of exec, httpGet, tcpSocket, grpc handlers`}},
		{name: "service account", in: pod("web", "serviceAccountName: default", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.serviceAccountName: "default": static pods may not reference service accounts`}},
		{name: "config map volume", in: pod("web", "volumes:\n- name: cfg\n  configMap: {name: c}", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.volumes[0]: "cfg": static pods may not reference config maps`}},
		{name: "projected token", in: pod("web", "volumes:\n- name: tok\n  projected:\n    sources:\n    - downwardAPI: {items: [{path: podname, fieldRef: {fieldPath: metadata.name}}]}\n    - serviceAccountToken: {path: t}", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.volumes[0].projected.sources[1]: "tok": static pods may not reference API objects other than the downward API`}},
		{name: "secret env", in: pod("web", "", "env:\n- name: P\n  valueFrom: {secretKeyRef: {name: s, key: k}}"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].env[0].valueFrom.secretKeyRef: "s": static pods may not reference secrets`}},
		{name: "config map envFrom", in: pod("web", "", "envFrom:\n- configMapRef: {name: c}"),
			wantErrs: []string{file + `: document 1: pod "web": spec.containers[0].envFrom[0].configMapRef: "c": static pods may not reference config maps`}},
		{name: "several problems counted", in: pod("web", "restartPolicy: Sometimes\ndnsPolicy: Maybe", ""),
			wantErrs: []string{file + `: document 1: pod "web": spec.restartPolicy: "Sometimes": want Always, OnFailure or Never (and 1 more)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			pods, errs := ParseManifest(file, []byte(tc.in), "Node-1")
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("ParseManifest took %v", d)
			}
			var gotPods, gotErrs []string
			for _, p := range pods {
				gotPods = append(gotPods, p.Namespace+"/"+p.Name)
			}
			for _, err := range errs {
				gotErrs = append(gotErrs, err.Error())
				var perr *Error
				if !errors.As(err, &perr) || !errors.Is(err, decode.ErrBadInput) {
					t.Errorf("error %v is not a *podsource.Error of class decode.ErrBadInput", err)
				}
			}
			if d := cmp.Diff(tc.wantPods, gotPods); d != "" {
				t.Errorf("pods (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantErrs, gotErrs); d != "" {
				t.Errorf("errors (-want +got):\n%s", d)
			}
		})
	}
}

// TestParseManifestLongLastLine: a manifest whose last line has no newline
// and ends the input at a multiple of the YAML reader's 4096-byte buffer
// holds its pod (apimachinery's reader dropped that line: no pod, no error).
func TestParseManifestLongLastLine(t *testing.T) {
	t.Parallel()
	const js = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}`
	for _, size := range []int{4096, 8192, 3 << 20} {
		data := js + strings.Repeat(" ", size-len(js))
		pods, errs := ParsePods("web.json", []byte(data), "node")
		if len(pods) != 1 || len(errs) != 0 {
			t.Errorf("%d bytes: %d pods, errors %v; want the pod", size, len(pods), errs)
		}
	}
}
