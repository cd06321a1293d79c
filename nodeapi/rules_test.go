package nodeapi

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestIsSidecar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    v1.Container
		want bool
	}{
		{"no restartPolicy", v1.Container{}, false},
		{"Always", v1.Container{RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}, true},
		{"OnFailure", v1.Container{RestartPolicy: ptr.To(v1.ContainerRestartPolicyOnFailure)}, false},
		{"Never", v1.Container{RestartPolicy: ptr.To(v1.ContainerRestartPolicyNever)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := IsSidecar(&tc.c); got != tc.want {
				t.Errorf("IsSidecar = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRestartsAfterExit(t *testing.T) {
	t.Parallel()
	sidecar := &v1.Container{Name: "s", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}
	rules := func(policy v1.ContainerRestartPolicy, r ...v1.ContainerRestartRule) *v1.Container {
		return &v1.Container{Name: "c", RestartPolicy: &policy, RestartPolicyRules: r}
	}
	onCodes := func(op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	plain := &v1.Container{Name: "c"}
	tests := []struct {
		name   string
		policy v1.RestartPolicy
		c      *v1.Container
		role   ContainerRole
		code   int32
		want   bool
	}{
		{"Always, exit 0", v1.RestartPolicyAlways, plain, RegularContainer, 0, true},
		{"Always, exit 1", v1.RestartPolicyAlways, plain, RegularContainer, 1, true},
		{"empty policy is Always", "", plain, RegularContainer, 0, true},
		{"OnFailure, exit 0", v1.RestartPolicyOnFailure, plain, RegularContainer, 0, false},
		{"OnFailure, exit 137", v1.RestartPolicyOnFailure, plain, RegularContainer, 137, true},
		{"Never, exit 1", v1.RestartPolicyNever, plain, RegularContainer, 1, false},
		{"no container: the pod's rule", v1.RestartPolicyOnFailure, nil, RegularContainer, 2, true},

		{"init, Always pod, exit 0: done", v1.RestartPolicyAlways, plain, InitContainer, 0, false},
		{"init, Always pod, exit 1", v1.RestartPolicyAlways, plain, InitContainer, 1, true},
		{"init, empty pod policy, exit 0: done", "", plain, InitContainer, 0, false},
		{"init, OnFailure pod, exit 1", v1.RestartPolicyOnFailure, plain, InitContainer, 1, true},
		{"init, Never pod, exit 1", v1.RestartPolicyNever, plain, InitContainer, 1, false},

		{"sidecar, OnFailure pod, exit 0", v1.RestartPolicyOnFailure, sidecar, InitContainer, 0, true},
		{"sidecar, Never pod, exit 1", v1.RestartPolicyNever, sidecar, InitContainer, 1, true},
		{"sidecar, Always pod, exit 0", v1.RestartPolicyAlways, sidecar, InitContainer, 0, true},

		{"own Never over an Always pod", v1.RestartPolicyAlways, rules(v1.ContainerRestartPolicyNever), RegularContainer, 1, false},
		{"own OnFailure over a Never pod, exit 0", v1.RestartPolicyNever, rules(v1.ContainerRestartPolicyOnFailure), RegularContainer, 0, false},
		{"own OnFailure over a Never pod, exit 3", v1.RestartPolicyNever, rules(v1.ContainerRestartPolicyOnFailure), RegularContainer, 3, true},
		{"rule In matches", v1.RestartPolicyNever,
			rules(v1.ContainerRestartPolicyNever, onCodes(v1.ContainerRestartRuleOnExitCodesOpIn, 42, 43)), RegularContainer, 43, true},
		{"rule In misses: own policy", v1.RestartPolicyAlways,
			rules(v1.ContainerRestartPolicyNever, onCodes(v1.ContainerRestartRuleOnExitCodesOpIn, 42)), RegularContainer, 1, false},
		{"rule NotIn matches", v1.RestartPolicyNever,
			rules(v1.ContainerRestartPolicyNever, onCodes(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0)), RegularContainer, 9, true},
		{"rule NotIn misses: own OnFailure", v1.RestartPolicyNever,
			rules(v1.ContainerRestartPolicyOnFailure, onCodes(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0)), RegularContainer, 0, false},
		{"rule without exitCodes matches nothing", v1.RestartPolicyNever,
			rules(v1.ContainerRestartPolicyNever, v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart}), RegularContainer, 1, false},
		{"first matching rule decides", v1.RestartPolicyNever,
			rules(v1.ContainerRestartPolicyNever, onCodes("Bogus", 1), onCodes(v1.ContainerRestartRuleOnExitCodesOpIn, 1)), RegularContainer, 1, true},
		{"rule on an init container", v1.RestartPolicyNever,
			rules(v1.ContainerRestartPolicyNever, onCodes(v1.ContainerRestartRuleOnExitCodesOpIn, 5)), InitContainer, 5, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RestartsAfterExit(tc.policy, tc.c, tc.role, tc.code); got != tc.want {
				t.Errorf("RestartsAfterExit(%q, role %d, exit %d) = %v, want %v", tc.policy, tc.role, tc.code, got, tc.want)
			}
		})
	}
}

func TestRestartsAllAfterExit(t *testing.T) {
	t.Parallel()
	rule := func(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	all := v1.ContainerRestartRuleActionRestartAllContainers
	one := v1.ContainerRestartRuleActionRestart
	in, notIn := v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn
	tests := []struct {
		name  string
		rules []v1.ContainerRestartRule
		code  int32
		want  bool
	}{
		{"no rules", nil, 42, false},
		{"RestartAllContainers on 42, exit 42", []v1.ContainerRestartRule{rule(all, in, 42)}, 42, true},
		{"RestartAllContainers on 42, exit 1", []v1.ContainerRestartRule{rule(all, in, 42)}, 1, false},
		{"RestartAllContainers NotIn 0, exit 3", []v1.ContainerRestartRule{rule(all, notIn, 0)}, 3, true},
		{"first matching rule decides: Restart", []v1.ContainerRestartRule{rule(one, in, 42), rule(all, in, 42)}, 42, false},
		{"first matching rule decides: RestartAllContainers", []v1.ContainerRestartRule{rule(one, in, 1), rule(all, in, 42)}, 42, true},
		{"rule without exitCodes matches nothing", []v1.ContainerRestartRule{{Action: all}}, 42, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &v1.Container{Name: "c", RestartPolicy: ptr.To(v1.ContainerRestartPolicyNever), RestartPolicyRules: tc.rules}
			if got := RestartsAllAfterExit(c, tc.code); got != tc.want {
				t.Errorf("RestartsAllAfterExit(exit %d) = %v, want %v", tc.code, got, tc.want)
			}
			// The container itself runs again whenever all do.
			if tc.want && !RestartsAfterExit(v1.RestartPolicyNever, c, RegularContainer, tc.code) {
				t.Errorf("RestartsAfterExit(exit %d) = false for a RestartAllContainers exit", tc.code)
			}
		})
	}
	if RestartsAllAfterExit(nil, 42) {
		t.Error("RestartsAllAfterExit(nil) = true")
	}
}

func TestFieldRefValue(t *testing.T) {
	t.Parallel()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": "a \"b\""}},
		Spec: v1.PodSpec{ServiceAccountName: "sa"},
	}
	onNode := pod.DeepCopy()
	onNode.Spec.NodeName = "n2"
	facts := PodFacts{NodeName: "n1", HostIP: "10.0.0.1", PodIPs: []string{"10.1.0.5", "fd00::5"}}
	tests := []struct {
		name    string
		pod     *v1.Pod
		path    string
		use     FieldUse
		facts   PodFacts
		want    string
		wantErr string
	}{
		{name: "name", path: "metadata.name", use: FieldInEnv, want: "web"},
		{name: "name in a volume", path: "metadata.name", use: FieldInVolume, want: "web"},
		{name: "namespace", path: "metadata.namespace", use: FieldInEnv, want: "ns"},
		{name: "uid in a volume", path: "metadata.uid", use: FieldInVolume, want: "u1"},
		{name: "one label", path: "metadata.labels['app']", use: FieldInEnv, want: "web"},
		{name: "one annotation in a volume", path: "metadata.annotations['note']", use: FieldInVolume, want: `a "b"`},
		{name: "missing label is empty", path: "metadata.labels['none']", use: FieldInEnv, want: ""},
		{name: "all labels in a volume", path: "metadata.labels", use: FieldInVolume, want: "app=\"web\"\ntier=\"front\""},
		{name: "all annotations in a volume", path: "metadata.annotations", use: FieldInVolume, want: `note="a \"b\""`},
		{name: "node name from the node", path: "spec.nodeName", use: FieldInEnv, facts: facts, want: "n1"},
		{name: "node name from the spec", pod: onNode, path: "spec.nodeName", use: FieldInEnv, facts: facts, want: "n2"},
		{name: "service account", path: "spec.serviceAccountName", use: FieldInEnv, want: "sa"},
		{name: "host IP", path: "status.hostIP", use: FieldInEnv, facts: facts, want: "10.0.0.1"},
		{name: "host IPs", path: "status.hostIPs", use: FieldInEnv, facts: facts, want: "10.0.0.1"},
		{name: "pod IP", path: "status.podIP", use: FieldInEnv, facts: facts, want: "10.1.0.5"},
		{name: "pod IPs", path: "status.podIPs", use: FieldInEnv, facts: facts, want: "10.1.0.5,fd00::5"},
		{name: "no pod IP yet", path: "status.podIP", use: FieldInEnv, want: ""},

		{name: "unknown path", path: "spec.bogus", use: FieldInEnv,
			wantErr: `fieldRef.fieldPath "spec.bogus" is not supported`},
		{name: "unknown path in a volume", path: "status.phase", use: FieldInVolume,
			wantErr: `fieldRef.fieldPath "status.phase" is not supported in a downwardAPI volume`},
		{name: "all labels only in a volume", path: "metadata.labels", use: FieldInEnv,
			wantErr: `fieldRef.fieldPath "metadata.labels" is not supported`},
		{name: "addresses only in env", path: "status.podIP", use: FieldInVolume,
			wantErr: `fieldRef.fieldPath "status.podIP" is not supported in a downwardAPI volume`},
		{name: "subscript of a plain field", path: "metadata.name['x']", use: FieldInEnv,
			wantErr: `fieldRef.fieldPath "metadata.name['x']" is not supported`},
		{name: "unclosed subscript", path: "metadata.labels['app", use: FieldInVolume,
			wantErr: `fieldRef.fieldPath "metadata.labels['app" is not supported in a downwardAPI volume`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.pod
			if p == nil {
				p = pod
			}
			got, err := FieldRefValue(p, tc.path, tc.use, tc.facts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("FieldRefValue(%q) error %v, want %q", tc.path, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("FieldRefValue(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
}

func TestTmpfsSize(t *testing.T) {
	t.Parallel()
	const node = 1 << 30
	mem := func(q string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)}}
	}
	ctr := func(name, limit string) v1.Container {
		c := v1.Container{Name: name}
		if limit != "" {
			c.Resources = mem(limit)
		}
		return c
	}
	pod := func(init, regular []v1.Container) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{InitContainers: init, Containers: regular}}
	}
	sidecar := ctr("proxy", "10Mi")
	sidecar.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	podLevel := pod(nil, []v1.Container{ctr("a", "")})
	podLevel.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}
	withOverhead := pod(nil, []v1.Container{ctr("a", "40Mi")})
	withOverhead.Spec.Overhead = v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Mi")}
	tests := []struct {
		name      string
		pod       *v1.Pod
		sizeLimit string
		want      int64
	}{
		{"no limits at all: the node's", pod(nil, []v1.Container{ctr("a", "")}), "", node},
		{"sizeLimit alone", pod(nil, []v1.Container{ctr("a", "")}), "100Mi", 100 << 20},
		{"pod limit: the containers' sum", pod(nil, []v1.Container{ctr("a", "30Mi"), ctr("b", "20Mi")}), "", 50 << 20},
		{"sizeLimit below the pod limit", pod(nil, []v1.Container{ctr("a", "30Mi"), ctr("b", "20Mi")}), "10Mi", 10 << 20},
		{"sizeLimit above the pod limit: the pod's", pod(nil, []v1.Container{ctr("a", "30Mi"), ctr("b", "20Mi")}), "100Mi", 50 << 20},
		{"sizeLimit above the node: the node's", pod(nil, []v1.Container{ctr("a", "")}), "2Gi", node},
		{"zero sizeLimit is unset", pod(nil, []v1.Container{ctr("a", "30Mi")}), "0", 30 << 20},
		{"a container without a limit: no pod limit", pod(nil, []v1.Container{ctr("a", "30Mi"), ctr("b", "")}), "", node},
		{"an init container without a limit: no pod limit", pod([]v1.Container{ctr("i", "")}, []v1.Container{ctr("a", "30Mi")}), "", node},
		{"a larger init container", pod([]v1.Container{ctr("i", "200Mi")}, []v1.Container{ctr("a", "30Mi")}), "", 200 << 20},
		{"a sidecar adds to the containers", pod([]v1.Container{sidecar}, []v1.Container{ctr("a", "30Mi")}), "", 40 << 20},
		{"pod-level limit", podLevel, "", 64 << 20},
		{"pod-level limit and a smaller sizeLimit", podLevel, "16Mi", 16 << 20},
		{"overhead added", withOverhead, "", 48 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var sl *resource.Quantity
			if tc.sizeLimit != "" {
				sl = ptr.To(resource.MustParse(tc.sizeLimit))
			}
			if got := TmpfsSize(tc.pod, sl, node); got != tc.want {
				t.Errorf("TmpfsSize = %d (%dMi), want %d (%dMi)", got, got>>20, tc.want, tc.want>>20)
			}
		})
	}
}

func TestPodMemoryLimit(t *testing.T) {
	t.Parallel()
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Ei")}}}}}}
	if l, ok := PodMemoryLimit(pod); !ok || l != 1<<63-1 {
		t.Errorf("16Ei limit = %d, %v; want MaxInt64, true", l, ok)
	}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	if l, ok := PodMemoryLimit(pod); ok {
		t.Errorf("no limit = %d, true; want false", l)
	}
}

func TestResourceFieldValue(t *testing.T) {
	t.Parallel()
	res := func(kv ...string) v1.ResourceList {
		l := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: res("memory", "32Mi")}}},
		Containers: []v1.Container{
			{Name: "app", Resources: v1.ResourceRequirements{Requests: res("cpu", "250m"), Limits: res("cpu", "1500m", "memory", "64Mi")}},
			{Name: "bare"},
		},
	}}
	app := &pod.Spec.Containers[0]
	node := res("cpu", "4", "memory", "8Gi")
	sel := func(container, name, divisor string) *v1.ResourceFieldSelector {
		s := &v1.ResourceFieldSelector{ContainerName: container, Resource: name}
		if divisor != "" {
			s.Divisor = resource.MustParse(divisor)
		}
		return s
	}
	tests := []struct {
		name    string
		c       *v1.Container
		ref     *v1.ResourceFieldSelector
		want    string
		wantErr string
	}{
		{name: "own cpu limit in cores, rounded up", c: app, ref: sel("", "limits.cpu", ""), want: "2"},
		{name: "own cpu limit in millicores", c: app, ref: sel("", "limits.cpu", "1m"), want: "1500"},
		{name: "own cpu request", c: app, ref: sel("", "requests.cpu", "1m"), want: "250"},
		{name: "memory request defaults to the limit", c: app, ref: sel("", "requests.memory", "1Mi"), want: "64"},
		{name: "named container", c: app, ref: sel("init", "limits.memory", "1Mi"), want: "32"},
		{name: "volume names its container", ref: sel("app", "limits.memory", "1Mi"), want: "64"},
		{name: "absent limit is the node's", c: &pod.Spec.Containers[1], ref: sel("", "limits.memory", "1Gi"), want: "8"},
		{name: "absent ephemeral-storage limit without a node figure", c: app, ref: sel("", "limits.ephemeral-storage", ""), want: "0"},
		{name: "absent request is 0", ref: sel("bare", "requests.cpu", "1m"), want: "0"},

		{name: "unknown container", c: app, ref: sel("nope", "limits.cpu", ""),
			wantErr: `resourceFieldRef.containerName "nope" is not a container of the pod`},
		{name: "volume without a container", ref: sel("", "limits.cpu", ""),
			wantErr: `resourceFieldRef.containerName "" is not a container of the pod`},
		{name: "unsupported resource", c: app, ref: sel("", "limits.nvidia.com/gpu", ""),
			wantErr: `resourceFieldRef.resource "limits.nvidia.com/gpu" is not supported`},
		{name: "neither limits nor requests", c: app, ref: sel("", "cpu", ""),
			wantErr: `resourceFieldRef.resource "cpu" is not supported`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ResourceFieldValue(pod, tc.c, tc.ref, node)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
