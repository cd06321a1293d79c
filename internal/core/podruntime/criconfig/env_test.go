package criconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerEnvFromAPI(t *testing.T) {
	t.Parallel()
	yes := true
	cmRef := func(name string, optional bool) *v1.ConfigMapEnvSource {
		s := &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}
		if optional {
			s.Optional = &yes
		}
		return s
	}
	cmKey := func(name, key string, optional bool) *v1.EnvVarSource {
		s := &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key}}
		if optional {
			s.ConfigMapKeyRef.Optional = &yes
		}
		return s
	}
	secretKey := func(name, key string, optional bool) *v1.EnvVarSource {
		s := &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key}}
		if optional {
			s.SecretKeyRef.Optional = &yes
		}
		return s
	}
	objs := &EnvSources{
		ConfigMaps: map[string]*v1.ConfigMap{
			"cfg":   {ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"MODE": "fast", "LEVEL": "3"}},
			"other": {ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: map[string]string{"MODE": "slow"}},
		},
		Secrets: map[string]*v1.Secret{
			"creds": {ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{"user": []byte("admin"), "pass": []byte("s3cret")}},
		},
		ServiceEnv: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
	}
	tests := []struct {
		name    string
		c       v1.Container
		env     *EnvSources
		want    [][2]string
		wantErr string
	}{
		{
			name: "envFrom, prefix, later source and env win",
			c: v1.Container{
				EnvFrom: []v1.EnvFromSource{{ConfigMapRef: cmRef("cfg", false)}, {ConfigMapRef: cmRef("other", false)}, {Prefix: "DB_", SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}}}},
				Env:     []v1.EnvVar{{Name: "LEVEL", Value: "9"}, {Name: "URL", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)/$(MODE)"}},
			},
			env: objs,
			want: [][2]string{
				{"LEVEL", "9"}, {"MODE", "slow"}, {"DB_pass", "s3cret"}, {"DB_user", "admin"}, {"URL", "https://10.0.0.1:443/slow"},
				{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"},
			},
		},
		{
			name: "keys refs",
			c: v1.Container{Env: []v1.EnvVar{
				{Name: "M", ValueFrom: cmKey("cfg", "MODE", false)},
				{Name: "P", ValueFrom: secretKey("creds", "pass", false)},
				{Name: "GONE", ValueFrom: cmKey("nope", "x", true)},
				{Name: "NOKEY", ValueFrom: secretKey("creds", "token", true)},
			}},
			env:  objs,
			want: [][2]string{{"M", "fast"}, {"P", "s3cret"}, {"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}},
		},
		{
			name: "a pod's own variable hides the service one",
			c:    v1.Container{Env: []v1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "example"}}},
			env:  objs,
			want: [][2]string{{"KUBERNETES_SERVICE_HOST", "example"}, {"KUBERNETES_SERVICE_PORT", "443"}},
		},
		{
			name: "optional missing envFrom",
			c:    v1.Container{EnvFrom: []v1.EnvFromSource{{ConfigMapRef: cmRef("nope", true)}}},
			env:  &EnvSources{},
			want: nil,
		},
		{name: "missing configMap", c: v1.Container{EnvFrom: []v1.EnvFromSource{{ConfigMapRef: cmRef("nope", false)}}}, env: objs, wantErr: `configmap "nope" not found`},
		{name: "missing secret", c: v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: secretKey("nope", "k", false)}}}, env: objs, wantErr: `secret "nope" not found`},
		{name: "missing configMap key", c: v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: cmKey("cfg", "k", false)}}}, env: objs, wantErr: `couldn't find key k in ConfigMap ns/cfg`},
		{name: "missing secret key", c: v1.Container{Env: []v1.EnvVar{{Name: "X", ValueFrom: secretKey("creds", "k", false)}}}, env: objs, wantErr: `couldn't find key k in Secret ns/creds`},
		{name: "standalone", c: v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "X", ValueFrom: cmKey("cfg", "k", false)}}},
			wantErr: `container "app": env[0] X: valueFrom needs ConfigMaps or Secrets, which a node without an API server does not have`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod()
			pod.Namespace = "ns"
			pod.Spec.Containers[0] = tc.c
			got, err := Env(Input{Pod: pod, Container: &pod.Spec.Containers[0], MemoryCapacity: 1 << 30, CPUs: 1, Sources: tc.env})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, envMap(got)); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
