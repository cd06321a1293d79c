// Package e2eimages builds local stand-ins for the container images the
// upstream node e2e suite (e2e_node.test) runs its pods from, so the suite can
// run where registry.k8s.io is unreachable. Each stand-in carries the
// reference the suite asks for and is assembled from the agnhost program (and
// the sample device plugin) and Debian's own binaries on the host
// (busybox-static, bash, nginx, util-linux), copied with the shared libraries
// they load. They are not the upstream
// images: Image.Differs says how each one differs.
package e2eimages

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
)

// The references of the stand-ins, as the e2e suite of Kubernetes v1.36.3
// names the images (test/utils/image/manifest.go and the tests' literals).
const (
	BusyboxRef     = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	BusyboxPrevRef = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
	AgnhostRef     = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	AgnhostPrevRef = "registry.k8s.io/e2e-test-images/agnhost:2.55"
	NginxRef       = "registry.k8s.io/e2e-test-images/nginx:1.15-4"
	NginxNewRef    = "registry.k8s.io/e2e-test-images/nginx:1.27-0"
	NonRootRef     = "registry.k8s.io/e2e-test-images/nonroot:1.5"
	NonewprivsRef  = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	IpcUtilsRef    = "registry.k8s.io/e2e-test-images/ipc-utils:1.4"
	GlibcDNSRef    = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
	PauseRef       = "registry.k8s.io/pause:3.10.2"
	// SampleDevicePluginRef is the image of the daemonsets
	// test/e2e/testing-manifests/sample-device-plugin/*.yaml, which the
	// device-plugin, device-manager and pod-resources specs deploy.
	SampleDevicePluginRef = "registry.k8s.io/e2e-test-images/sample-device-plugin:1.7"
)

// The images the suite's PrePullAllImages pulls (NodePrePullImageList and
// updateImageAllowList in test/e2e_node/image_list.go, with
// test/e2e/common's PrePulledImages) that none of the specs nodekeeper's
// harness runs starts: each has a placeholder stand-in (Placeholders), so
// that the prepull finds every image it names.
const (
	CadvisorRef            = "gcr.io/cadvisor/cadvisor:v0.47.2"
	PerlRef                = "registry.k8s.io/e2e-test-images/perl:5.26"
	NpbEpRef               = "registry.k8s.io/e2e-test-images/node-perf/npb-ep:1.6.0"
	NpbIsRef               = "registry.k8s.io/e2e-test-images/node-perf/npb-is:1.7.0"
	PytorchWideDeepRef     = "registry.k8s.io/e2e-test-images/node-perf/pytorch-wide-deep:1.0.0"
	EtcdRef                = "registry.k8s.io/etcd:3.6.8-0"
	VolumeNFSRef           = "registry.k8s.io/e2e-test-images/volume/nfs:1.6.0"
	NodeProblemDetectorRef = "registry.k8s.io/node-problem-detector/node-problem-detector:v1.34.0"
	SRIOVDevicePluginRef   = "docker.io/nfvpe/sriov-device-plugin:v3.1"
	// BusyboxDigestRef names upstream's busybox by its manifest digest.
	// No stand-in can have that digest, so a registry cannot serve it (the
	// client checks the digest): it is only ever imported under this name.
	BusyboxDigestRef = "registry.k8s.io/e2e-test-images/busybox@sha256:a9155b13325b2abef48e71de77bb8ac015412a566829f621d06bfae5c699b1b9"
)

// Placeholders are the prepull-only images (above) and what each upstream
// image holds that its placeholder does not.
var Placeholders = []struct{ Ref, Lacks string }{
	{CadvisorRef, "cAdvisor (the suite's resource collector for the [Benchmark] specs)"},
	{PerlRef, "perl (the node-perf workloads)"},
	{NpbEpRef, "the NAS parallel benchmark EP (node-perf)"},
	{NpbIsRef, "the NAS parallel benchmark IS (node-perf)"},
	{PytorchWideDeepRef, "python and pytorch (node-perf)"},
	{EtcdRef, "etcd"},
	{VolumeNFSRef, "the NFS server (MirrorPod's NFS spec, which stays skipped)"},
	{NodeProblemDetectorRef, "node-problem-detector"},
	{SRIOVDevicePluginRef, "the SR-IOV device plugin (its specs need SR-IOV devices and stay skipped)"},
	{BusyboxDigestRef, "nothing a spec uses, but its digest: it is upstream's busybox named by a manifest digest no stand-in can have"},
}

// SampleDevicePluginEntrypoint is the entrypoint of upstream's
// sample-device-plugin image (its Dockerfile); the program parses no flags.
var SampleDevicePluginEntrypoint = []string{"/sampledeviceplugin", "-alsologtostderr"}

// StandInLabel is the image label every stand-in carries, with its own
// reference as the value. It marks the image as a local stand-in and gives
// two stand-ins with the same content (busybox 1.37.0-1 and 1.36.1-1)
// distinct image IDs, as upstream's are.
const StandInLabel = "io.nodekeeper.e2e-stand-in"

// NonRootUID is the user the nonroot image runs as (upstream's USER 1234).
const NonRootUID = 1234

// defaultPath is the PATH of the upstream Alpine and busybox images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options name the host files the stand-ins are made of. Empty host paths
// take the Debian locations.
type Options struct {
	// Agnhost is the path of a static (CGO_ENABLED=0) agnhost binary built
	// from k8s.io/kubernetes/test/images/agnhost. Required.
	Agnhost string
	// Pause, if set, is the path of a static pause program (the project's
	// images/pause) for the pause image; if empty the pause image runs
	// "agnhost pause".
	Pause string
	// Nmeter, if set, is the path of a static nmeter program (the project's
	// images/nmeter), put at /bin/nmeter in every image of the busybox
	// userland: Debian's busybox-static has no nmeter applet, with which the
	// container-lifecycle specs timestamp their output. If empty the images
	// have none.
	Nmeter string
	// Busybox is Debian's static busybox (package busybox-static);
	// default /bin/busybox.
	Busybox string
	// Bash is the host's bash, copied with its libraries; default /bin/bash.
	Bash string
	// Nginx is the host's nginx, copied with its libraries; default
	// /usr/sbin/nginx. MimeTypes is its mime.types; default
	// /etc/nginx/mime.types.
	Nginx, MimeTypes string
	// IpcUtils is the directory holding util-linux's ipcs, ipcmk and ipcrm;
	// default /usr/bin.
	IpcUtils string
	// Curl is the host's curl, copied with its libraries into the agnhost
	// images (specs' exec hooks call it there); default /usr/bin/curl.
	Curl string
	// Hostname is Debian's glibc hostname program (package hostname), whose
	// "hostname -f" resolves through /etc/hosts; default /bin/hostname.
	Hostname string
	// SampleDevicePlugin, if set, is the path of a static (CGO_ENABLED=0)
	// sampledeviceplugin binary built from
	// k8s.io/kubernetes/test/images/sample-device-plugin, for the
	// SampleDevicePluginRef stand-in; if empty there is none.
	SampleDevicePlugin string
	// Porter, if set, is agnhost's porter source directory, whose
	// localhost.crt and localhost.key the agnhost images carry at
	// /localhost.crt and /localhost.key as upstream's do (specs serve HTTPS
	// with them); if empty the images have none.
	Porter string
}

// withDefaults fills the empty host paths.
func (o Options) withDefaults() Options {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.Busybox, "/bin/busybox")
	def(&o.Bash, "/bin/bash")
	def(&o.Nginx, "/usr/sbin/nginx")
	def(&o.MimeTypes, "/etc/nginx/mime.types")
	def(&o.IpcUtils, "/usr/bin")
	def(&o.Hostname, "/bin/hostname")
	def(&o.Curl, "/usr/bin/curl")
	return o
}

// Image is a built stand-in.
type Image struct {
	// Ref is the reference the e2e suite uses, e.g. BusyboxRef.
	Ref string
	// Path is the OCI image-layout tarball, for `ctr images import` or
	// containerd.Managed.ImportFiles.
	Path string
	// ID is the image ID (the config digest, "sha256:...").
	ID string
	// Differs says in one line how the stand-in differs from upstream's image.
	Differs string
}

// Need is a host file Build needs and the Debian package that installs it.
type Need struct {
	Path    string
	Package string // "" when no package provides it (the agnhost binary)
}

// Required returns the host files Build needs that are missing, in a fixed
// order; nil when Build can run. It only stats files.
func Required(opts Options) []Need {
	o := opts.withDefaults()
	var missing []Need
	check := func(p, pkg string, exe bool) {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || exe && st.Mode()&0o111 == 0 {
			missing = append(missing, Need{Path: p, Package: pkg})
		}
	}
	if o.Agnhost == "" {
		missing = append(missing, Need{Path: "(Options.Agnhost unset)"})
	} else {
		check(o.Agnhost, "", true)
	}
	if o.Pause != "" {
		check(o.Pause, "", true)
	}
	if o.Nmeter != "" {
		check(o.Nmeter, "", true)
	}
	if o.SampleDevicePlugin != "" {
		check(o.SampleDevicePlugin, "", true)
	}
	if o.Porter != "" {
		check(filepath.Join(o.Porter, "localhost.crt"), "", false)
		check(filepath.Join(o.Porter, "localhost.key"), "", false)
	}
	check(o.Busybox, "busybox-static", true)
	check(o.Bash, "bash", true)
	check(o.Nginx, "nginx", true)
	check(o.MimeTypes, "nginx-common", false)
	for _, name := range ipcTools {
		check(filepath.Join(o.IpcUtils, name), "util-linux", true)
	}
	check(o.Hostname, "hostname", true)
	check(o.Curl, "curl", true)
	if _, err := exec.LookPath("ldd"); err != nil {
		missing = append(missing, Need{Path: "ldd", Package: "libc-bin"})
	}
	return missing
}

// InstallCommand is the apt-get command installing the packages of needs, or
// "" if no need has a package.
func InstallCommand(needs []Need) string {
	seen := map[string]bool{}
	var pkgs []string
	for _, n := range needs {
		if n.Package != "" && !seen[n.Package] {
			seen[n.Package] = true
			pkgs = append(pkgs, n.Package)
		}
	}
	if len(pkgs) == 0 {
		return ""
	}
	return "apt-get install -y " + strings.Join(pkgs, " ")
}

// ipcTools are the util-linux programs of the ipc-utils image.
var ipcTools = []string{"ipcs", "ipcmk", "ipcrm"}

// Build writes one OCI image-layout tarball per stand-in into dir (created if
// needed), named after the reference, and returns them in a fixed order. It
// fails, naming the missing files and the apt-get command, if Required
// reports anything. Existing tarballs are replaced atomically; the same
// inputs give the same image IDs.
func Build(dir string, opts Options) ([]Image, error) {
	if missing := Required(opts); len(missing) > 0 {
		var paths []string
		for _, n := range missing {
			paths = append(paths, n.Path)
		}
		msg := "e2e stand-in images: missing " + strings.Join(paths, ", ")
		if cmd := InstallCommand(missing); cmd != "" {
			msg += " (" + cmd + ")"
		}
		return nil, errors.New(msg)
	}
	o := opts.withDefaults()
	specs, err := standIns(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(specs))
	for _, s := range specs {
		s.img.Labels = map[string]string{StandInLabel: s.img.Ref}
		p := filepath.Join(dir, fileName(s.img.Ref))
		b, err := ocibuild.WriteFile(p, s.img)
		if err != nil {
			return nil, err
		}
		out = append(out, Image{Ref: b.Ref, Path: p, ID: b.ID, Differs: s.differs})
	}
	return out, nil
}

// fileName turns a reference into a tarball name:
// "registry.k8s.io/pause:3.10.2" -> "registry.k8s.io_pause_3.10.2.tar"
// ("@" too becomes "_").
func fileName(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref) + ".tar"
}

// standIn is one image to write and how it differs from upstream.
type standIn struct {
	img     ocibuild.Image
	differs string
}

// standIns assembles every stand-in from the host files o names.
func standIns(o Options) ([]standIn, error) {
	agnhost, err := os.ReadFile(o.Agnhost)
	if err != nil {
		return nil, err
	}
	userland, err := busyboxUserland(o)
	if err != nil {
		return nil, err
	}
	nginx, err := nginxFiles(o)
	if err != nil {
		return nil, err
	}
	var ipc []ocibuild.File
	for _, name := range ipcTools {
		if ipc, err = addDynamic(ipc, filepath.Join(o.IpcUtils, name), "/usr/bin/"+name); err != nil {
			return nil, err
		}
	}
	// Debian's hostname replaces busybox's applet (merge keeps the first).
	dns, err := addDynamic([]ocibuild.File{{Path: "/etc/nsswitch.conf", Data: []byte(nsswitch)}}, o.Hostname, "/bin/hostname")
	if err != nil {
		return nil, err
	}
	curl, err := addDynamic(nil, o.Curl, "/usr/bin/curl")
	if err != nil {
		return nil, err
	}
	var porter []ocibuild.File
	noPorter := ", porter certificates"
	if o.Porter != "" {
		for _, name := range []string{"localhost.crt", "localhost.key"} {
			b, err := os.ReadFile(filepath.Join(o.Porter, name))
			if err != nil {
				return nil, err
			}
			porter = append(porter, ocibuild.File{Path: "/" + name, Mode: 0o644, Data: b})
		}
		noPorter = ""
	}
	pause := []ocibuild.File{{Path: "/pause", Mode: 0o755, Data: agnhost}}
	pauseEntry := []string{"/pause", "pause"}
	pauseDiffers := "/pause is agnhost's pause subcommand (exits 2 on SIGTERM, not 0), not the C pause program"
	if o.Pause != "" {
		bin, err := os.ReadFile(o.Pause)
		if err != nil {
			return nil, err
		}
		pause[0].Data, pauseEntry = bin, []string{"/pause"}
		pauseDiffers = "/pause is nodekeeper's images/pause (sleeps until SIGTERM/SIGINT), not the C pause program"
	}

	nmeter := ""
	if o.Nmeter != "" {
		nmeter = ", and nodekeeper's images/nmeter for the nmeter applet (only its %t time directive)"
	}
	busybox := func(ref string) standIn {
		return standIn{
			img: ocibuild.Image{Ref: ref, Files: withPasswd(userland, nil, nil), Cmd: []string{"sh"}, Env: []string{defaultPath}},
			differs: "Debian's busybox-static with its applets linked in /bin, plus Debian's bash and its libraries" + nmeter + ", " +
				"instead of upstream busybox " + strings.TrimSuffix(ref[strings.LastIndex(ref, ":")+1:], "-1") + " (no bash)",
		}
	}
	agnhostImg := func(ref string) standIn {
		files := withPasswd(userland,
			[]string{"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh"},
			[]string{"user-defined-in-image:x:1000:", "group-defined-in-image:x:50000:user-defined-in-image"})
		files = append(files,
			ocibuild.File{Path: "/agnhost", Mode: 0o755, Data: agnhost},
			ocibuild.File{Path: "/agnhost-2", Mode: fs.ModeSymlink, Link: "agnhost"},
			ocibuild.File{Path: "/uploads", Mode: fs.ModeDir | 0o755},
			ocibuild.File{Path: "/home/user-defined-in-image", Mode: fs.ModeDir | 0o755},
		)
		files = merge(merge(files, curl), porter)
		differs := "agnhost v1.36.3 built from source on the busybox-static userland (with bash and Debian's curl) instead of Alpine; " +
			"no dig, iproute2, iperf, netcat-openbsd, coredns" + noPorter + " or fake registry"
		if ref == AgnhostPrevRef {
			differs = "the same agnhost binary as agnhost:2.63.0 (not 2.55), on the busybox-static userland with Debian's curl; " +
				"no dig, iproute2, iperf, netcat-openbsd, coredns" + noPorter + " or fake registry"
		}
		return standIn{
			img:     ocibuild.Image{Ref: ref, Files: files, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{defaultPath}},
			differs: differs,
		}
	}
	nginxImg := func(ref string) standIn {
		files := withPasswd(userland, []string{"nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin"}, []string{"nginx:x:101:nginx"})
		return standIn{
			img: ocibuild.Image{Ref: ref, Files: merge(files, nginx),
				Cmd: []string{"nginx", "-g", "daemon off;"}, Env: []string{defaultPath}},
			differs: "Debian's nginx (1.22 on bookworm) and its libraries (no dynamic modules) on the busybox-static userland, " +
				"serving /usr/share/nginx/html on IPv4 :80 only with a minimal nginx.conf; no entrypoint script; stop signal SIGTERM, not SIGQUIT",
		}
	}
	out := []standIn{
		busybox(BusyboxRef),
		busybox(BusyboxPrevRef),
		agnhostImg(AgnhostRef),
		agnhostImg(AgnhostPrevRef),
		nginxImg(NginxRef),
		nginxImg(NginxNewRef),
		{
			img: ocibuild.Image{Ref: NonRootRef, Files: withPasswd(userland, nil, nil), Cmd: []string{"sh"},
				Env: []string{defaultPath}, User: fmt.Sprint(NonRootUID)},
			differs: "the busybox-static userland (with bash) running as user 1234, instead of debian-base",
		},
		{
			img: ocibuild.Image{Ref: NonewprivsRef, Files: append(withPasswd(userland, nil, nil),
				ocibuild.File{Path: "/usr/local/bin/nnp", Mode: 0o755 | fs.ModeSetuid, Data: agnhost}),
				Cmd: []string{"nnp", "nonewprivs"}, Env: []string{defaultPath}},
			differs: "/usr/local/bin/nnp is a setuid-root agnhost running its nonewprivs subcommand (the same output), " +
				"on the busybox-static userland instead of Alpine",
		},
		{
			img: ocibuild.Image{Ref: IpcUtilsRef, Files: merge(withPasswd(userland, nil, nil), ipc),
				Cmd: []string{"sh"}, Env: []string{defaultPath}},
			differs: "Debian's util-linux ipcs, ipcmk and ipcrm with their libraries on the busybox-static userland instead of Alpine",
		},
		{
			img: ocibuild.Image{Ref: GlibcDNSRef, Files: merge(dns, withPasswd(userland, nil, nil)),
				Cmd: []string{"sh"}, Env: []string{defaultPath}},
			differs: "Debian's glibc hostname (with its libraries and an nsswitch.conf of files then dns) on the busybox-static userland " +
				"instead of debian:bookworm-slim with dnsutils; no dig, nslookup is busybox's, no coredns",
		},
		{
			img:     ocibuild.Image{Ref: PauseRef, Files: pause, Entrypoint: pauseEntry, User: "65535:65535"},
			differs: pauseDiffers,
		},
	}
	for _, p := range Placeholders {
		out = append(out, standIn{
			img: ocibuild.Image{Ref: p.Ref, Files: withPasswd(userland, nil, nil), Cmd: []string{"sh"}, Env: []string{defaultPath}},
			differs: "a placeholder for the suite's prepull: the busybox-static userland (with bash) running sh; " +
				"it lacks " + p.Lacks + ", so a spec running it fails",
		})
	}
	if o.SampleDevicePlugin != "" {
		bin, err := os.ReadFile(o.SampleDevicePlugin)
		if err != nil {
			return nil, err
		}
		// The plugin creates its fake device files in /tmp.
		out = append(out, standIn{
			img: ocibuild.Image{Ref: SampleDevicePluginRef, Files: []ocibuild.File{
				{Path: "/sampledeviceplugin", Mode: 0o755, Data: bin},
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
			}, Entrypoint: SampleDevicePluginEntrypoint, Env: []string{defaultPath}},
			differs: "sampledeviceplugin built from k8s.io/kubernetes v1.36.3's test/images/sample-device-plugin " +
				"(its VERSION says 1.8.0; the suite's daemonsets name 1.7), static, alone with /tmp instead of on Alpine 3.22",
		})
	}
	return out, nil
}

// merge returns base followed by the entries of more whose paths base does
// not hold (the host libraries two programs share).
func merge(base, more []ocibuild.File) []ocibuild.File {
	have := map[string]bool{}
	for _, f := range base {
		have[path.Clean("/"+f.Path)] = true
	}
	out := append([]ocibuild.File(nil), base...)
	for _, f := range more {
		if p := path.Clean("/" + f.Path); !have[p] {
			have[p] = true
			out = append(out, f)
		}
	}
	return out
}

// passwd and group are the accounts of the upstream busybox image.
var (
	passwd = []string{
		"root:x:0:0:root:/root:/bin/sh",
		"daemon:x:1:1:daemon:/usr/sbin:/bin/false",
		"bin:x:2:2:bin:/bin:/bin/false",
		"sys:x:3:3:sys:/dev:/bin/false",
		"sync:x:4:100:sync:/bin:/bin/sync",
		"mail:x:8:8:mail:/var/spool/mail:/bin/false",
		"www-data:x:33:33:www-data:/var/www:/bin/false",
		"operator:x:37:37:Operator:/var:/bin/false",
		"nobody:x:65534:65534:nobody:/home:/bin/false",
	}
	group = []string{
		"root:x:0:", "daemon:x:1:", "bin:x:2:", "sys:x:3:", "adm:x:4:", "tty:x:5:", "disk:x:6:",
		"lp:x:7:", "mail:x:8:", "kmem:x:9:", "wheel:x:10:root", "cdrom:x:11:", "dialout:x:18:",
		"floppy:x:19:", "video:x:28:", "audio:x:29:", "tape:x:32:", "www-data:x:33:", "operator:x:37:",
		"utmp:x:43:", "plugdev:x:46:", "staff:x:50:", "lock:x:54:", "netdev:x:82:", "users:x:100:",
		"nogroup:x:65534:",
	}
)

// withPasswd returns a copy of files with /etc/passwd and /etc/group: the
// busybox image's accounts plus the extra lines.
func withPasswd(files []ocibuild.File, extraPasswd, extraGroup []string) []ocibuild.File {
	lines := func(base, extra []string) []byte {
		return []byte(strings.Join(append(append([]string(nil), base...), extra...), "\n") + "\n")
	}
	out := append([]ocibuild.File(nil), files...)
	return append(out,
		ocibuild.File{Path: "/etc/passwd", Data: lines(passwd, extraPasswd)},
		ocibuild.File{Path: "/etc/group", Data: lines(group, extraGroup)},
	)
}

// busyboxUserland is the base of most stand-ins: /bin/busybox with a symlink
// per applet, bash with its libraries, and the usual directories.
func busyboxUserland(o Options) ([]ocibuild.File, error) {
	out, err := exec.Command(o.Busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", o.Busybox, err)
	}
	files := []ocibuild.File{
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: "/home", Mode: fs.ModeDir | 0o755},
		{Path: "/var/spool/mail", Mode: fs.ModeDir | 0o755},
		{Path: "/var/www", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/sbin", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/local/bin", Mode: fs.ModeDir | 0o755},
	}
	for _, name := range strings.Fields(string(out)) {
		// Applet names are plain words; "[" and "[[" included.
		if name == "busybox" || name == "bash" || strings.Contains(name, "/") {
			continue
		}
		files = append(files, ocibuild.File{Path: "/bin/" + name, Mode: fs.ModeSymlink, Link: "busybox"})
	}
	if o.Nmeter != "" {
		b, err := os.ReadFile(o.Nmeter)
		if err != nil {
			return nil, err
		}
		files = append(files, ocibuild.File{Path: "/bin/nmeter", Mode: 0o755, Data: b})
	}
	// busybox-static needs no libraries; a dynamic busybox gets its own.
	if files, err = addDynamic(files, o.Busybox, "/bin/busybox"); err != nil {
		return nil, err
	}
	return addDynamic(files, o.Bash, "/bin/bash")
}

// nginxFiles are the nginx binary with its libraries, a configuration like
// upstream's default (HTTP on :80 serving /usr/share/nginx/html, logs to
// stdout and stderr) and the directories Debian's build expects.
func nginxFiles(o Options) ([]ocibuild.File, error) {
	mime, err := os.ReadFile(o.MimeTypes)
	if err != nil {
		return nil, err
	}
	files := []ocibuild.File{
		{Path: "/etc/nginx/nginx.conf", Data: []byte(nginxConf)},
		{Path: "/etc/nginx/mime.types", Data: mime},
		{Path: "/usr/share/nginx/html/index.html", Data: []byte(nginxIndex)},
		{Path: "/var/log/nginx", Mode: fs.ModeDir | 0o755},
		{Path: "/var/lib/nginx", Mode: fs.ModeDir | 0o755},
		{Path: "/var/cache/nginx", Mode: fs.ModeDir | 0o755},
		{Path: "/var/lock", Mode: fs.ModeDir | 0o755},
		{Path: "/run", Mode: fs.ModeDir | 0o755},
	}
	return addDynamic(files, o.Nginx, "/usr/sbin/nginx")
}

// nsswitch is the glibc-dns-testing stand-in's /etc/nsswitch.conf: names
// resolve through /etc/hosts first, as on Debian.
const nsswitch = "passwd: files\ngroup: files\nhosts: files dns\n"

// nginxConf is the stand-in's /etc/nginx/nginx.conf.
const nginxConf = `user nginx;
worker_processes 1;
error_log stderr notice;
pid /run/nginx.pid;

events {
    worker_connections 1024;
}

http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /dev/stdout;
    sendfile on;
    keepalive_timeout 65;

    server {
        listen 80;
        server_name localhost;
        location / {
            root /usr/share/nginx/html;
            index index.html index.htm;
        }
    }
}
`

// nginxIndex is the page the stand-in serves at /.
const nginxIndex = `<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body>
<h1>Welcome to nginx!</h1>
<p>nodekeeper's local stand-in for the e2e nginx image.</p>
</body>
</html>
`

// addDynamic appends the host program src as dst (mode 0o755) and every
// shared library ldd lists for it, each at the path ldd names (the loader
// finds them there without an ld.so.cache), skipping those files already
// holds.
func addDynamic(files []ocibuild.File, src, dst string) ([]ocibuild.File, error) {
	bin, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	libs, err := sharedLibraries(src)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range files {
		have[path.Clean("/"+f.Path)] = true
	}
	files = append(files, ocibuild.File{Path: dst, Mode: 0o755, Data: bin})
	for _, lib := range libs {
		if have[lib] {
			continue
		}
		have[lib] = true
		data, err := os.ReadFile(lib) // follows the host's symlinks
		if err != nil {
			return nil, fmt.Errorf("library of %s: %w", src, err)
		}
		files = append(files, ocibuild.File{Path: lib, Mode: 0o755, Data: data})
	}
	return files, nil
}

// sharedLibraries returns the absolute paths of the libraries (and the
// loader) ldd lists for the host program bin, sorted; none for a static one.
func sharedLibraries(bin string) ([]string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("ldd", bin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if strings.Contains(stdout.String()+stderr.String(), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	return parseLdd(stdout.String())
}

// parseLdd reads ldd's output: "name => /path (0x...)" for a library,
// "/path (0x...)" for the loader, no path for the vDSO. A library ldd could
// not find is an error.
func parseLdd(out string) ([]string, error) {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == "statically linked" {
			continue
		}
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
			if strings.HasPrefix(line, "not found") {
				return nil, fmt.Errorf("ldd: a library is not found: %q", line)
			}
		}
		p, _, _ := strings.Cut(line, " ")
		if strings.HasPrefix(p, "/") {
			libs = append(libs, path.Clean(p))
		}
	}
	sort.Strings(libs)
	return libs, nil
}
