package podruntime

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

func TestEtcHosts(t *testing.T) {
	t.Parallel()
	hostHosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostHosts, []byte("127.0.0.1 localhost\n10.0.0.9 build"), 0o644); err != nil {
		t.Fatal(err)
	}
	aliases := func(p *v1.Pod) {
		p.Spec.HostAliases = []v1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"db", "db.local"}}}
	}
	const head = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
	override := "override.example.host"
	tests := []struct {
		name          string
		mut           func(*v1.Pod)
		clusterDomain string
		ips           []string
		mounts        []*runtimeapi.Mount
		want          string // "" = no mount
	}{
		{name: "subdomain, no cluster domain", mut: func(p *v1.Pod) { p.Spec.Subdomain = "t" }, ips: []string{"10.1.0.5"},
			want: head + "10.1.0.5\tweb.t.ns.svc.\tweb\n"},
		{name: "subdomain and cluster domain", mut: func(p *v1.Pod) { p.Spec.Subdomain = "t"; p.Spec.Hostname = "h" }, clusterDomain: "example.org", ips: []string{"10.1.0.5"},
			want: head + "10.1.0.5\th.t.ns.svc.example.org\th\n"},
		{name: "hostnameOverride has no domain", mut: func(p *v1.Pod) { p.Spec.Subdomain = "t"; p.Spec.HostnameOverride = &override }, clusterDomain: "example.org", ips: []string{"10.1.0.5"},
			want: head + "10.1.0.5\toverride.example.host\n"},
		{name: "pod network", mut: aliases, ips: []string{"10.1.0.5"}, want: "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.1.0.5\tweb\n\n# Entries added by HostAliases.\n10.9.9.9\tdb\tdb.local\n"},
		{name: "host network", mut: func(p *v1.Pod) { p.Spec.HostNetwork = true }, want: "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n10.0.0.9 build\n"},
		{name: "no IP yet", mut: func(*v1.Pod) {}},
		{name: "the container mounts its own", mut: func(*v1.Pod) {}, ips: []string{"10.1.0.5"}, mounts: []*runtimeapi.Mount{{ContainerPath: "/etc/hosts", HostPath: "/x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pod := testPod(tc.mut)
			m, err := etcHostsMount(containerInput{pod: pod, container: &pod.Spec.Containers[0], podIPs: tc.ips, hostIP: "192.168.1.2", podsDir: dir, hostsFile: hostHosts, clusterDomain: tc.clusterDomain}, tc.mounts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if m != nil {
					t.Fatalf("mount %v, want none", m)
				}
				return
			}
			if m == nil || m.ContainerPath != "/etc/hosts" || m.HostPath != filepath.Join(dir, "uid-1", "etc-hosts") {
				t.Fatalf("mount %v", m)
			}
			b, err := os.ReadFile(m.HostPath)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(b)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPreStopHTTPGet: an httpGet pre-stop hook reaches the container's
// named port with its headers, over HTTP and over HTTPS to a server whose
// certificate nobody on the node can verify (as the kubelet's hooks; node
// e2e "should execute prestop https hook properly").
func TestPreStopHTTPGet(t *testing.T) {
	t.Parallel()
	for _, scheme := range []v1.URIScheme{v1.URISchemeHTTP, v1.URISchemeHTTPS} {
		t.Run(string(scheme), func(t *testing.T) {
			t.Parallel()
			got := make(chan string, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.URL.Path + " " + r.Header.Get("X-Drain")
			})
			srv := httptest.NewUnstartedServer(h)
			if scheme == v1.URISchemeHTTPS {
				srv.StartTLS() // a self-signed certificate
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			u, err := url.Parse(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			port, _ := strconv.Atoi(u.Port())
			f := newFixture(t)
			f.m.cfg.HostIP = "127.0.0.1"
			pod := testPod(func(p *v1.Pod) {
				p.Spec.HostNetwork = true
				p.Spec.Containers[0].Ports = []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
				p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{
					Scheme: scheme, Path: "/drain", Port: intstr.FromString("http"), HTTPHeaders: []v1.HTTPHeader{{Name: "X-Drain", Value: "now"}},
				}}}
			})
			if res := f.sync(t, pod); res.Err != nil {
				t.Fatal(res.Err)
			}
			if err := f.m.KillPod(t.Context(), pod, f.status(t, pod.UID), nil); err != nil {
				t.Fatal(err)
			}
			select {
			case req := <-got:
				if req != "/drain now" {
					t.Errorf("hook request %q, want /drain with the header", req)
				}
			default: // KillPod has returned: the hook has run
				t.Fatal("the httpGet pre-stop hook made no request")
			}
		})
	}
}

func TestTmpfsSize(t *testing.T) {
	t.Parallel()
	limit := resource.MustParse("100Mi")
	tests := []struct {
		name      string
		limits    []v1.ResourceList
		sizeLimit *resource.Quantity
		want      int64
	}{
		{"node memory", []v1.ResourceList{nil}, nil, 1 << 30},
		{"sizeLimit", []v1.ResourceList{nil}, &limit, 100 << 20},
		{"pod limit", []v1.ResourceList{rl("memory", "30Mi"), rl("memory", "20Mi")}, &limit, 50 << 20},
		{"one container without a limit", []v1.ResourceList{rl("memory", "30Mi"), nil}, nil, 1 << 30},
	}
	for _, tc := range tests {
		pod := testPod()
		pod.Spec.Containers = nil
		for _, l := range tc.limits {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Resources: v1.ResourceRequirements{Limits: l}})
		}
		if got := tmpfsSize(pod, tc.sizeLimit, 1<<30); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestMemoryEmptyDirIsTmpfs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting tmpfs needs root")
	}
	podsDir, err := os.MkdirTemp("/tmp", "nkpr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(podsDir) })
	limit := resource.MustParse("1Mi")
	pod := testPod()
	vol := &v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &limit}}}
	dir, err := volumeHostPath(podsDir, pod, vol, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountIfMounted(dir) })
	if m, err := mountinfo.Mounted(dir); err != nil || !m {
		t.Fatalf("%s is not a mount point: %v", dir, err)
	}
	// A second container's mount does not stack another tmpfs.
	if _, err := volumeHostPath(podsDir, pod, vol, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644); err == nil {
		t.Error("wrote 2Mi into a 1Mi tmpfs")
	}
	if err := removePodDir(podsDir, "uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(podsDir, "uid-1")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}
