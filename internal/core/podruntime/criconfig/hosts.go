package criconfig

import (
	"bytes"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// HostsFile is the content of the pod's managed /etc/hosts, as the kubelet
// writes it: for a pod-network pod the loopback and IPv6 names, the pod's
// IPs (ips) with its hostname (and FQDN with a subdomain, in clusterDomain);
// for a host-network pod the host's file (host, as read); then the pod's
// hostAliases.
func HostsFile(pod *v1.Pod, ips []string, host []byte, clusterDomain string) ([]byte, error) {
	var b bytes.Buffer
	if pod.Spec.HostNetwork {
		b.WriteString("# Kubernetes-managed hosts file (host network).\n")
		b.Write(host)
		if len(host) > 0 && host[len(host)-1] != '\n' {
			b.WriteByte('\n')
		}
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n")
		b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		name, domain, err := hostnameAndDomain(pod, clusterDomain)
		if err != nil {
			return nil, err
		}
		if domain != "" {
			name = name + "." + domain + "\t" + name
		}
		for _, ip := range ips {
			fmt.Fprintf(&b, "%s\t%s\n", ip, name)
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.Bytes(), nil
}
