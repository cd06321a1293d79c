package criconfig

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Sandbox is the PodSandboxConfig of pod's sandbox number attempt.
// resolv is the host's resolv.conf content (DNS policy Default and the
// ClusterFirst fallback); cgroupParent comes from the pod cgroups;
// clusterDomain is the kubelet's clusterDomain, in the hostname of a pod with
// a subdomain and setHostnameAsFQDN.
func Sandbox(pod *v1.Pod, attempt uint32, logsRoot string, resolv []byte, cgroupParent, clusterDomain string) (*runtimeapi.PodSandboxConfig, error) {
	dns, err := dnsConfig(pod, resolv)
	if err != nil {
		return nil, err
	}
	labels := podLabels(pod)
	labels[LabelKubeletManaged] = "true"
	annotations := make(map[string]string, len(pod.Annotations))
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt},
		LogDirectory: PodLogDir(logsRoot, pod.Namespace, pod.Name, string(pod.UID)),
		DnsConfig:    dns,
		PortMappings: portMappings(pod),
		Labels:       labels,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: namespaceOptions(pod),
				Privileged:       anyPrivileged(pod),
			},
		},
	}
	if !pod.Spec.HostNetwork {
		hostname, domain, err := hostnameAndDomain(pod, clusterDomain)
		if err != nil {
			return nil, err
		}
		if cfg.Hostname, err = kernelHostname(hostname, domain, pod.Spec.SetHostnameAsFQDN); err != nil {
			return nil, err
		}
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		lsc := cfg.Linux.SecurityContext
		if sc.RunAsUser != nil {
			lsc.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			lsc.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		lsc.SupplementalGroups = append(lsc.SupplementalGroups, sc.SupplementalGroups...)
		if sc.FSGroup != nil {
			lsc.SupplementalGroups = append(lsc.SupplementalGroups, *sc.FSGroup)
		}
		if len(sc.Sysctls) > 0 {
			cfg.Linux.Sysctls = make(map[string]string, len(sc.Sysctls))
			for _, s := range sc.Sysctls {
				cfg.Linux.Sysctls[s.Name] = s.Value
			}
		}
	}
	return cfg, nil
}

// namespaceOptions are the pod's network, pid and ipc namespaces: the node's
// when it asks for them, else the pod's (pid: each container's own unless the
// pod shares its process namespace).
func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func anyPrivileged(pod *v1.Pod) bool {
	for _, c := range AllContainers(pod) {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			return true
		}
	}
	return false
}

// AllContainers is the pod's init containers, then its containers.
func AllContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// portMappings are the host ports the pod's containers ask for.
func portMappings(pod *v1.Pod) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	for _, c := range AllContainers(pod) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			proto := runtimeapi.Protocol_TCP
			switch p.Protocol {
			case v1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case v1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			out = append(out, &runtimeapi.PortMapping{Protocol: proto, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIp: p.HostIP})
		}
	}
	return out
}

// Limits of a pod's resolv.conf, as the kubelet applies them.
const (
	maxNameservers = 3
	maxDNSSearch   = 32
)

// dnsConfig is the pod's DNS: the host's resolv.conf for dnsPolicy Default,
// and for ClusterFirst and ClusterFirstWithHostNet, since the node has no
// cluster DNS (the kubelet falls back the same way); nothing but
// spec.dnsConfig for None. spec.dnsConfig is merged into the others.
func dnsConfig(pod *v1.Pod, resolv []byte) (*runtimeapi.DNSConfig, error) {
	cfg := &runtimeapi.DNSConfig{}
	if pod.Spec.DNSPolicy != v1.DNSNone {
		cfg = parseResolvConf(resolv)
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = append(cfg.Servers, dc.Nameservers...)
		cfg.Searches = append(cfg.Searches, dc.Searches...)
		for _, o := range dc.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			cfg.Options = mergeOption(cfg.Options, opt)
		}
	} else if pod.Spec.DNSPolicy == v1.DNSNone {
		return nil, fmt.Errorf("pod %s/%s: spec.dnsPolicy None needs spec.dnsConfig", pod.Namespace, pod.Name)
	}
	cfg.Servers = dedup(cfg.Servers)
	if len(cfg.Servers) > maxNameservers {
		cfg.Servers = cfg.Servers[:maxNameservers]
	}
	cfg.Searches = dedup(cfg.Searches)
	if len(cfg.Searches) > maxDNSSearch {
		cfg.Searches = cfg.Searches[:maxDNSSearch]
	}
	return cfg, nil
}

// mergeOption adds opt ("name" or "name:value") to opts, replacing an option
// of the same name.
func mergeOption(opts []string, opt string) []string {
	name, _, _ := strings.Cut(opt, ":")
	for i, o := range opts {
		if n, _, _ := strings.Cut(o, ":"); n == name {
			opts[i] = opt
			return opts
		}
	}
	return append(opts, opt)
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// parseResolvConf reads nameserver, search (and domain) and options lines.
func parseResolvConf(b []byte) *runtimeapi.DNSConfig {
	cfg := &runtimeapi.DNSConfig{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			cfg.Servers = append(cfg.Servers, f[1])
		case "search":
			cfg.Searches = f[1:]
		case "domain":
			if len(cfg.Searches) == 0 {
				cfg.Searches = f[1:2]
			}
		case "options":
			for _, o := range f[1:] {
				cfg.Options = mergeOption(cfg.Options, o)
			}
		}
	}
	return cfg
}

// maxHostname is the longest hostname the kernel takes (a DNS label).
const maxHostname = 63

// maxFQDNHostname is the longest FQDN setHostnameAsFQDN puts in the
// kernel's nodename field (64 bytes, as the kubelet counts them).
const maxFQDNHostname = 64

// podHostnameAndDomain is the pod's hostname and domain, as the kubelet
// derives them. spec.hostnameOverride (the HostnameOverride feature, on by
// default since 1.35) wins over spec.hostname and spec.subdomain and has no
// domain. Otherwise the hostname is spec.hostname, else the pod's name, cut
// to 63 bytes without a trailing '-' or '.' (a generated name is often
// longer: sethostname would refuse it); with spec.subdomain the domain is
// <subdomain>.<namespace>.svc.<clusterDomain> (clusterDomain may be "": the
// domain then ends in "svc.").
func hostnameAndDomain(pod *v1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		h, err := cutHostname(pod.Name, *o)
		return h, "", err
	}
	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", h, strings.Join(msgs, ";"))
		}
		hostname = h
	}
	if hostname, err = cutHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if sd := pod.Spec.Subdomain; sd != "" {
		if msgs := validation.IsDNS1123Label(sd); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", sd, strings.Join(msgs, ";"))
		}
		domain = sd + "." + pod.Namespace + ".svc." + clusterDomain
	}
	return hostname, domain, nil
}

// cutHostname cuts hostname to maxHostname bytes without a trailing '-' or
// '.'; nothing left is an error naming the pod.
func cutHostname(podName, hostname string) (string, error) {
	if len(hostname) <= maxHostname {
		return hostname, nil
	}
	cut := strings.TrimRight(hostname[:maxHostname], "-.")
	if cut == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return cut, nil
}

// kernelHostname is the hostname the sandbox gets: hostname, or with
// setHostnameAsFQDN and a domain, hostname.domain, which must fit the
// kernel's 64 bytes (the kubelet's message when it does not: the pod stays
// Pending with FailedCreatePodSandBox events).
func kernelHostname(hostname, domain string, setFQDN *bool) (string, error) {
	if domain == "" || setFQDN == nil || !*setFQDN {
		return hostname, nil
	}
	fqdn := hostname + "." + domain
	if len(fqdn) > maxFQDNHostname {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxFQDNHostname, len(fqdn))
	}
	return fqdn, nil
}
