package criconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const hostResolv = `# generated
nameserver 10.0.0.2
nameserver 10.0.0.3
search corp.example example
options ndots:2 edns0
`

func TestSandboxConfig(t *testing.T) {
	t.Parallel()
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP}, {ContainerPort: 9000}}
		p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
	})
	got, err := Sandbox(pod, 2, "/var/log/pods", []byte(hostResolv), "/kubepods/burstable/poduid-1", "")
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1", Attempt: 2},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/ns_web_uid-1",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.0.0.2", "10.0.0.3"}, Searches: []string{"corp.example", "example"}, Options: []string{"ndots:2", "edns0"}},
		PortMappings: []*runtimeapi.PortMapping{
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080},
			{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353},
		},
		Labels:      map[string]string{"app": "web", LabelPodName: "web", LabelPodNamespace: "ns", LabelPodUID: "uid-1", LabelKubeletManaged: "true"},
		Annotations: map[string]string{"note": "n"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/burstable/poduid-1",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
			},
			Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
		},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("sandboxConfig (-want +got):\n%s", diff)
	}
}

func TestNamespaceOptions(t *testing.T) {
	t.Parallel()
	yes := true
	tests := []struct {
		name string
		mut  func(*v1.Pod)
		want *runtimeapi.NamespaceOption
	}{
		{"pod", func(*v1.Pod) {}, &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}},
		{"host all", func(p *v1.Pod) { p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC = true, true, true },
			&runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}},
		{"shared pid", func(p *v1.Pod) { p.Spec.ShareProcessNamespace = &yes },
			&runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, namespaceOptions(testPod(tc.mut)), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDNSConfig(t *testing.T) {
	t.Parallel()
	five := "5"
	tests := []struct {
		name    string
		mut     func(*v1.Pod)
		want    *runtimeapi.DNSConfig
		wantErr bool
	}{
		{name: "ClusterFirst without cluster DNS is the host's", mut: func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSClusterFirst },
			want: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.2", "10.0.0.3"}, Searches: []string{"corp.example", "example"}, Options: []string{"ndots:2", "edns0"}}},
		{name: "Default is the host's", mut: func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSDefault },
			want: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.2", "10.0.0.3"}, Searches: []string{"corp.example", "example"}, Options: []string{"ndots:2", "edns0"}}},
		{name: "None is dnsConfig only", mut: func(p *v1.Pod) {
			p.Spec.DNSPolicy = v1.DNSNone
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.b"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &five}}}
		}, want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.b"}, Options: []string{"ndots:5"}}},
		{name: "None without dnsConfig", mut: func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSNone }, wantErr: true},
		{name: "dnsConfig merges, options replace, at most 3 servers", mut: func(p *v1.Pod) {
			p.Spec.DNSPolicy = v1.DNSDefault
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"10.0.0.2", "9.9.9.9", "8.8.8.8"}, Searches: []string{"x.y"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &five}, {Name: "rotate"}}}
		}, want: &runtimeapi.DNSConfig{Servers: []string{"10.0.0.2", "10.0.0.3", "9.9.9.9"}, Searches: []string{"corp.example", "example", "x.y"}, Options: []string{"ndots:5", "edns0", "rotate"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := dnsConfig(testPod(tc.mut), []byte(hostResolv))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSandboxHostname(t *testing.T) {
	t.Parallel()
	fqdn := func(p *v1.Pod) { p.Spec.Subdomain = "t"; p.Spec.SetHostnameAsFQDN = new(true) }
	override := func(h string) func(*v1.Pod) { return func(p *v1.Pod) { p.Spec.HostnameOverride = &h } }
	for _, tc := range []struct {
		name          string
		mut           func(*v1.Pod)
		clusterDomain string
		want          string
		wantErr       string
	}{
		{name: "pod name", mut: func(*v1.Pod) {}, want: "web"},
		{name: "spec.hostname", mut: func(p *v1.Pod) { p.Spec.Hostname = "h" }, want: "h"},
		{name: "host network keeps the node's", mut: func(p *v1.Pod) { p.Spec.HostNetwork = true }, want: ""},
		{name: "a long (generated) name is cut to 63 bytes",
			mut:  func(p *v1.Pod) { p.Name = "termination-message-container" + "a8272c37-c3c1-4f6b-825a-76412b3c7138" },
			want: "termination-message-containera8272c37-c3c1-4f6b-825a-76412b3c71"},
		{name: "cut at a dash", mut: func(p *v1.Pod) { p.Name = strings.Repeat("a", 62) + "-bcd" }, want: strings.Repeat("a", 62)},
		{name: "a subdomain alone leaves the short name", mut: func(p *v1.Pod) { p.Spec.Subdomain = "t" }, want: "web"},
		{name: "setHostnameAsFQDN without a subdomain", mut: func(p *v1.Pod) { p.Spec.SetHostnameAsFQDN = new(true) }, want: "web"},
		{name: "setHostnameAsFQDN, no cluster domain", mut: fqdn, want: "web.t.ns.svc."},
		{name: "setHostnameAsFQDN with the cluster domain", mut: fqdn, clusterDomain: "cluster.local", want: "web.t.ns.svc.cluster.local"},
		{name: "an FQDN of 64 bytes fits", clusterDomain: "cluster.local",
			mut:  func(p *v1.Pod) { fqdn(p); p.Name = strings.Repeat("a", 41) },
			want: strings.Repeat("a", 41) + ".t.ns.svc.cluster.local"},
		{name: "an FQDN of 65 bytes does not", clusterDomain: "cluster.local",
			mut:     func(p *v1.Pod) { fqdn(p); p.Name = strings.Repeat("a", 42) },
			wantErr: "failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("a", 42) + ".t.ns.svc.cluster.local is too long (64 characters is the max, 65 characters requested)"},
		{name: "hostnameOverride", mut: override("override-host"), want: "override-host"},
		{name: "hostnameOverride, a DNS subdomain", mut: override("override.example.host"), want: "override.example.host"},
		{name: "hostnameOverride wins over hostname and subdomain", clusterDomain: "cluster.local",
			mut:  func(p *v1.Pod) { override("override-host")(p); p.Spec.Hostname = "custom-host"; p.Spec.Subdomain = "t" },
			want: "override-host"},
		{name: "hostnameOverride not a DNS subdomain", mut: override("Not-RFC1123"),
			wantErr: `pod HostnameOverride "Not-RFC1123" is not a valid DNS subdomain: `},
	} {
		cfg, err := Sandbox(testPod(tc.mut), 0, "/logs", nil, "", tc.clusterDomain)
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Hostname != tc.want {
			t.Errorf("%s: hostname = %q, want %q", tc.name, cfg.Hostname, tc.want)
		}
	}
}
