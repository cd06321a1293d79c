package kubeletserver

import (
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestConfigFrom(t *testing.T) {
	t.Parallel()
	ips := []net.IP{net.ParseIP("10.0.0.5")}
	authn := kubeletv1beta1.KubeletAuthentication{
		X509:    kubeletv1beta1.KubeletX509Authentication{ClientCAFile: "/etc/kubernetes/pki/ca.crt"},
		Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true), CacheTTL: metav1.Duration{Duration: time.Minute}},
	}
	authz := kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook}
	tests := []struct {
		name string
		kc   kubeletv1beta1.KubeletConfiguration
		want Config
	}{
		{"defaults", kubeletv1beta1.KubeletConfiguration{},
			Config{NodeName: "n1", Port: DefaultPort, CertDir: "/var/lib/nodekeeper/pki", Hostname: "host", NodeIPs: ips}},
		{"set", kubeletv1beta1.KubeletConfiguration{
			Address: "10.0.0.5", Port: 11250, TLSCertFile: "/c.crt", TLSPrivateKeyFile: "/c.key", TLSMinVersion: "VersionTLS13",
			TLSCipherSuites: []string{"TLS_AES_128_GCM_SHA256"}, Authentication: authn, Authorization: authz,
			EnableDebuggingHandlers: ptr.To(false),
		}, Config{
			NodeName: "n1", Address: "10.0.0.5", Port: 11250, TLSCertFile: "/c.crt", TLSPrivateKeyFile: "/c.key",
			CertDir: "/var/lib/nodekeeper/pki", Hostname: "host", NodeIPs: ips, TLSMinVersion: "VersionTLS13",
			TLSCipherSuites: []string{"TLS_AES_128_GCM_SHA256"}, Authentication: authn, Authorization: authz,
			DisableDebuggingHandlers: true,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ConfigFrom(&tc.kc, "n1", "/var/lib/nodekeeper", "host", ips)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
