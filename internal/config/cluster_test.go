package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// TestClusterFields: set fields are kept, unset ones get the kubelet's
// defaults, and an explicit nodeStatusUpdateFrequency is also the report
// frequency when that is unset (the kubelet's backward compatibility).
func TestClusterFields(t *testing.T) {
	t.Parallel()
	c, err := Parse("cluster.yaml", []byte(header+`port: 11250
tlsCertFile: /etc/nk/tls.crt
tlsPrivateKeyFile: /etc/nk/tls.key
authentication:
  x509:
    clientCAFile: /etc/nk/ca.crt
  anonymous:
    enabled: true
authorization:
  mode: AlwaysAllow
enableDebuggingHandlers: false
nodeStatusUpdateFrequency: 4s
nodeLeaseDurationSeconds: 20
registerWithTaints:
- key: dedicated
  value: nk
  effect: NoSchedule
kubeAPIQPS: 0
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{
		EnableServer: true, Address: "0.0.0.0", Port: 11250, TLSCertFile: "/etc/nk/tls.crt", TLSPrivateKeyFile: "/etc/nk/tls.key",
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: "/etc/nk/ca.crt"},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: new(true), CacheTTL: metav1.Duration{Duration: 2 * time.Minute}},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: new(true)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: "AlwaysAllow", Webhook: kubeletv1beta1.KubeletWebhookAuthorization{
			CacheAuthorizedTTL: metav1.Duration{Duration: 5 * time.Minute}, CacheUnauthorizedTTL: metav1.Duration{Duration: 30 * time.Second},
		}},
		NodeStatusUpdateFrequency: 4 * time.Second, NodeStatusReportFrequency: 4 * time.Second,
		NodeLeaseDurationSeconds: 20, RegisterNode: true,
		RegisterWithTaints: []v1.Taint{{Key: "dedicated", Value: "nk", Effect: v1.TaintEffectNoSchedule}},
		KubeAPIQPS:         0, KubeAPIBurst: 100, EventRecordQPS: 50, EventBurst: 100,
	}
	if diff := cmp.Diff(want, c.Cluster); diff != "" {
		t.Errorf("Cluster (-want +got):\n%s", diff)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings for supported fields: %q", c.Warnings)
	}
}

func TestClusterFieldErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"port 0", "port: 0\n", []string{"port", `"0"`}},
		{"cert without key", "tlsCertFile: /x.crt\n", []string{"tlsCertFile", `"/x.crt"`, "together"}},
		{"unknown authorization mode", "authorization:\n  mode: RBAC\n", []string{"authorization.mode", `"RBAC"`}},
		{"negative cacheTTL", "authentication:\n  webhook:\n    cacheTTL: -1s\n", []string{"authentication.webhook.cacheTTL", `"-1s"`}},
		{"negative lease duration", "nodeLeaseDurationSeconds: -4\n", []string{"nodeLeaseDurationSeconds", `"-4"`}},
		{"negative kubeAPIBurst", "kubeAPIBurst: -1\n", []string{"kubeAPIBurst", `"-1"`}},
		{"taint without effect", "registerWithTaints:\n- key: a\n", []string{"registerWithTaints[0].effect", `""`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("bad.yaml", []byte(header+tc.data))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want an ErrInvalid error", err)
			}
			for _, w := range append(tc.want, "bad.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestClusterAddress: the secured server listens on the configured address,
// else on every address (the kubelet's 0.0.0.0), while the read-only port
// keeps nodekeeper's loopback default.
func TestClusterAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ data, cluster, agent string }{
		{"", "0.0.0.0", "127.0.0.1"},
		{"address: 10.1.2.3\n", "10.1.2.3", "10.1.2.3"},
	} {
		c, err := Parse("a.yaml", []byte(header+tc.data))
		if err != nil {
			t.Fatal(err)
		}
		if c.Cluster.Address != tc.cluster || c.Agent.Address != tc.agent {
			t.Errorf("%q: cluster address %q, agent address %q; want %q, %q", tc.data, c.Cluster.Address, c.Agent.Address, tc.cluster, tc.agent)
		}
	}
}
