package volumes

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
)

func service(ns, name, ip string, ports ...v1.ServicePort) v1.Service {
	return v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

var kubernetesService = service("default", "kubernetes", "10.0.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP})

var kubernetesEnv = map[string]string{
	"KUBERNETES_SERVICE_HOST":       "10.0.0.1",
	"KUBERNETES_SERVICE_PORT":       "443",
	"KUBERNETES_SERVICE_PORT_HTTPS": "443",
	"KUBERNETES_PORT":               "tcp://10.0.0.1:443",
	"KUBERNETES_PORT_443_TCP":       "tcp://10.0.0.1:443",
	"KUBERNETES_PORT_443_TCP_PROTO": "tcp",
	"KUBERNETES_PORT_443_TCP_PORT":  "443",
	"KUBERNETES_PORT_443_TCP_ADDR":  "10.0.0.1",
}

func with(m map[string]string, more map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

func TestServiceEnv(t *testing.T) {
	t.Parallel()
	db := service("ns", "my-db", "fd00::7", v1.ServicePort{Port: 5432}, v1.ServicePort{Name: "metrics-port", Port: 9187, Protocol: v1.ProtocolUDP})
	dbEnv := map[string]string{
		"MY_DB_SERVICE_HOST":              "fd00::7",
		"MY_DB_SERVICE_PORT":              "5432",
		"MY_DB_SERVICE_PORT_METRICS_PORT": "9187",
		"MY_DB_PORT":                      "tcp://[fd00::7]:5432",
		"MY_DB_PORT_5432_TCP":             "tcp://[fd00::7]:5432",
		"MY_DB_PORT_5432_TCP_PROTO":       "tcp",
		"MY_DB_PORT_5432_TCP_PORT":        "5432",
		"MY_DB_PORT_5432_TCP_ADDR":        "fd00::7",
		"MY_DB_PORT_9187_UDP":             "udp://[fd00::7]:9187",
		"MY_DB_PORT_9187_UDP_PROTO":       "udp",
		"MY_DB_PORT_9187_UDP_PORT":        "9187",
		"MY_DB_PORT_9187_UDP_ADDR":        "fd00::7",
	}
	tests := []struct {
		name     string
		services []v1.Service
		links    bool
		want     map[string]string
	}{
		{"kubernetes only", []v1.Service{kubernetesService}, true, kubernetesEnv},
		{"links off still gives kubernetes", []v1.Service{kubernetesService, db}, false, kubernetesEnv},
		{"links on", []v1.Service{kubernetesService, db}, true, with(kubernetesEnv, dbEnv)},
		{"headless and other namespaces skipped", []v1.Service{
			kubernetesService, service("ns", "headless", "None", v1.ServicePort{Port: 80}), service("other", "x", "10.0.0.9", v1.ServicePort{Port: 80}),
		}, true, kubernetesEnv},
		{"no API service", nil, true, map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, ServiceEnv(tc.services, "ns", tc.links)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvObjects(t *testing.T) {
	t.Parallel()
	ks := kubernetesService
	db := service("ns", "db", "10.0.0.5", v1.ServicePort{Port: 5432})
	m, _ := newTestManager(t, true, configMap("cfg", map[string]string{"k": "v"}), secret("creds", map[string]string{"pass": "p"}), &ks, &db)
	pod := testPod()
	pod.Spec.EnableServiceLinks = ptr(false)
	c := &v1.Container{
		Name:    "app",
		EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}, {SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}}}},
		Env: []v1.EnvVar{
			{Name: "P", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "pass"}}},
			{Name: "Q", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "missing"}, Key: "x"}}},
		},
	}
	got, err := m.EnvObjects(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{}
	for n := range got.ConfigMaps {
		names["configmaps"] = append(names["configmaps"], n)
	}
	for n := range got.Secrets {
		names["secrets"] = append(names["secrets"], n)
	}
	if diff := cmp.Diff(map[string][]string{"configmaps": {"cfg"}, "secrets": {"creds"}}, names); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(kubernetesEnv, got.ServiceEnv); diff != "" {
		t.Errorf("service env with links off (-want +got):\n%s", diff)
	}
	pod.Spec.EnableServiceLinks = nil // not false: links on
	got, err = m.EnvObjects(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.ServiceEnv["DB_SERVICE_HOST"] != "10.0.0.5" || got.ServiceEnv["KUBERNETES_SERVICE_HOST"] != "10.0.0.1" {
		t.Errorf("service env with links on: %v", got.ServiceEnv)
	}

	// The API failing: the last objects read for the container stand in;
	// after TearDown there are none.
	c2, _ := newTestManager(t, true)
	fc := fake.NewClientset(&ks)
	c2.api = kubeclient.PodObjects{Client: clientgo.Wrap(fc)}
	if _, err := c2.EnvObjects(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	fc.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if got, err := c2.EnvObjects(context.Background(), pod, c); err != nil || got.ServiceEnv["KUBERNETES_SERVICE_HOST"] != "10.0.0.1" {
		t.Errorf("API down after a read: %v, %v; want the last objects", got, err)
	}
	if err := c2.TearDown(pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.EnvObjects(context.Background(), pod, c); err == nil {
		t.Error("API down after TearDown: no error")
	}

	standalone, err := New(Config{PodsDir: t.TempDir(), MemoryCapacity: 1}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := standalone.EnvObjects(context.Background(), pod, c); o != nil || err != nil {
		t.Errorf("standalone EnvObjects = %v, %v; want nil, nil", o, err)
	}
}

// TestEnvObjectsStaticPodWithoutAPI: a static pod's container starts with no
// service variables when the API server cannot be read (as the kubelet's
// static pods do not wait for it); an ordinary pod's sync fails.
func TestEnvObjectsStaticPodWithoutAPI(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, true)
	fc := fake.NewClientset()
	fc.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	m.api = kubeclient.PodObjects{Client: clientgo.Wrap(fc)}
	c := &v1.Container{Name: "app"}
	static := testPod()
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	got, err := m.EnvObjects(context.Background(), static, c)
	if err != nil || len(got.ServiceEnv) != 0 {
		t.Errorf("static pod with the API down: %+v, %v; want no service variables and no error", got, err)
	}
	ordinary := testPod()
	ordinary.UID = "uid-ordinary" // no earlier read to fall back on
	if _, err := m.EnvObjects(context.Background(), ordinary, c); err == nil {
		t.Errorf("ordinary pod with the API down: no error")
	}
}
