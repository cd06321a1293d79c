package kubeletserver

import (
	"net"
	"path/filepath"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// ConfigFrom returns the Config that kc's fields describe for the node
// nodeName whose root directory is rootDir: address (empty: DefaultAddress),
// port (0: DefaultPort), tlsCertFile, tlsPrivateKeyFile, tlsMinVersion,
// tlsCipherSuites, authentication and authorization; the self-signed
// certificate goes to <rootDir>/pki, named for hostname ("" = os.Hostname())
// and nodeIPs. New validates the values.
func ConfigFrom(kc *kubeletv1beta1.KubeletConfiguration, nodeName, rootDir, hostname string, nodeIPs []net.IP) Config {
	port := int(kc.Port)
	if port == 0 {
		port = DefaultPort
	}
	return Config{
		NodeName: nodeName, Address: kc.Address, Port: port,
		TLSCertFile: kc.TLSCertFile, TLSPrivateKeyFile: kc.TLSPrivateKeyFile,
		CertDir: filepath.Join(rootDir, "pki"), Hostname: hostname, NodeIPs: nodeIPs,
		TLSMinVersion: kc.TLSMinVersion, TLSCipherSuites: kc.TLSCipherSuites,
		Authentication: kc.Authentication, Authorization: kc.Authorization,
		DisableDebuggingHandlers: kc.EnableDebuggingHandlers != nil && !*kc.EnableDebuggingHandlers,
	}
}
