package podruntime

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
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
			m, err := etcHostsMount(containerInput{Input: criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0], PodIPs: tc.ips, HostIP: "192.168.1.2"}, podsDir: dir, hostsFile: hostHosts, clusterDomain: tc.clusterDomain}, tc.mounts)
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

// TestMemoryEmptyDirSize mounts memory-backed emptyDirs for real and reads
// their size back: the kubelet's rule (nodeapi.TmpfsSize), the pod's memory
// limit as its cgroup has it. Before issue 28 the size counted only the
// regular containers' limits: a pod-level limit, a larger init container or
// an init container without a limit gave the wrong size.
func TestMemoryEmptyDirSize(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting tmpfs needs root")
	}
	const node = 1 << 30
	podsDir, err := os.MkdirTemp("/tmp", "nkpr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(podsDir) })
	limit := func(q string) v1.ResourceRequirements { return v1.ResourceRequirements{Limits: rl("memory", q)} }
	tests := []struct {
		name      string
		pod       func(*v1.Pod)
		sizeLimit string
		want      int64
	}{
		{"sizeLimit", func(*v1.Pod) {}, "1Mi", 1 << 20},
		{"node memory", func(*v1.Pod) {}, "", node},
		{"sizeLimit above the pod limit", func(p *v1.Pod) {
			p.Spec.Containers = []v1.Container{{Name: "a", Resources: limit("30Mi")}, {Name: "b", Resources: limit("20Mi")}}
		}, "100Mi", 50 << 20},
		{"pod-level limit", func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Limits: rl("memory", "8Mi")}
		}, "", 8 << 20},
		{"a larger init container", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: limit("24Mi")}}
			p.Spec.Containers[0].Resources = limit("4Mi")
		}, "", 24 << 20},
		{"an init container without a limit", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init"}}
			p.Spec.Containers[0].Resources = limit("4Mi")
		}, "", node},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(tc.pod)
			pod.UID = types.UID("uid-" + strconv.Itoa(i))
			ed := &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}
			if tc.sizeLimit != "" {
				ed.SizeLimit = new(resource.MustParse(tc.sizeLimit))
			}
			dir, err := volumeHostPath(podsDir, pod, &v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: ed}}, node)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unmountIfMounted(dir) })
			var st syscall.Statfs_t
			if err := syscall.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
			if got := int64(st.Blocks) * st.Bsize; got != tc.want {
				t.Errorf("tmpfs size %d (%dMi), want %d (%dMi)", got, got>>20, tc.want, tc.want>>20)
			}
		})
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
