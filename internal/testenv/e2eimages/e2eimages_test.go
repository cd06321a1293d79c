package e2eimages

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/kubebuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

func TestParseLdd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		out   string
		want  []string
		error string
	}{
		{
			name: "bash",
			out: "\tlinux-vdso.so.1 (0x00007ff8fdac8000)\n" +
				"\tlibtinfo.so.6 => /lib/x86_64-linux-gnu/libtinfo.so.6 (0x00007ff8fd944000)\n" +
				"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007ff8fd762000)\n" +
				"\t/lib64/ld-linux-x86-64.so.2 (0x00007ff8fdaca000)\n",
			want: []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libtinfo.so.6", "/lib64/ld-linux-x86-64.so.2"},
		},
		{name: "static", out: "\tstatically linked\n"},
		{
			name:  "not found",
			out:   "\tlibfoo.so.1 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n",
			error: `ldd: a library is not found: "not found"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseLdd(tc.out)
			if tc.error != "" {
				if err == nil || err.Error() != tc.error {
					t.Fatalf("error %v, want %s", err, tc.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("libraries (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeHost makes a directory with an executable fake agnhost, pause, nmeter
// and sampledeviceplugin, porter's certificates and a mime.types; the other host paths are the real ones.
func fakeHost(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("fake "+name), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("localhost.crt", 0o644)
	write("localhost.key", 0o600)
	return Options{Agnhost: write("agnhost", 0o755), Pause: write("pause", 0o755), Nmeter: write("nmeter", 0o755),
		SampleDevicePlugin: write("sampledeviceplugin", 0o755), MimeTypes: write("mime.types", 0o644), Porter: dir}
}

func TestRequired(t *testing.T) {
	t.Parallel()
	opts := fakeHost(t)
	dir := filepath.Dir(opts.Agnhost)
	notExec := filepath.Join(dir, "mime.types")
	for _, tc := range []struct {
		name    string
		opts    func(o *Options)
		want    []Need
		install string
	}{
		{
			name: "no agnhost",
			opts: func(o *Options) { o.Agnhost = "" },
			want: []Need{{Path: "(Options.Agnhost unset)"}},
		},
		{
			name:    "missing packages",
			opts:    func(o *Options) { o.Busybox, o.Nginx, o.MimeTypes = "/nonexistent/busybox", notExec, dir },
			want:    []Need{{"/nonexistent/busybox", "busybox-static"}, {notExec, "nginx"}, {dir, "nginx-common"}},
			install: "apt-get install -y busybox-static nginx nginx-common",
		},
		{
			name:    "ipc tools",
			opts:    func(o *Options) { o.IpcUtils, o.Pause, o.SampleDevicePlugin = dir, "/nonexistent/pause", notExec },
			want:    []Need{{"/nonexistent/pause", ""}, {notExec, ""}, {filepath.Join(dir, "ipcs"), "util-linux"}, {filepath.Join(dir, "ipcmk"), "util-linux"}, {filepath.Join(dir, "ipcrm"), "util-linux"}},
			install: "apt-get install -y util-linux",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := opts
			tc.opts(&o)
			// Only the needs this case provoked: the host may lack others.
			var got []Need
			for _, n := range Required(o) {
				if strings.HasPrefix(n.Path, dir) || strings.HasPrefix(n.Path, "/nonexistent") || n.Path == "(Options.Agnhost unset)" {
					got = append(got, n)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Required (-want +got):\n%s", diff)
			}
			if got := InstallCommand(got); got != tc.install {
				t.Errorf("InstallCommand = %q, want %q", got, tc.install)
			}
		})
	}
}

// hostWhy says why the host cannot build the stand-ins (with fake agnhost
// and pause), or "".
func hostWhy(opts Options) string {
	if missing := Required(opts); len(missing) > 0 {
		var paths []string
		for _, n := range missing {
			paths = append(paths, n.Path)
		}
		return "missing " + strings.Join(paths, ", ") + " (" + InstallCommand(missing) + ")"
	}
	return ""
}

func TestBuildMissing(t *testing.T) {
	t.Parallel()
	opts := fakeHost(t)
	opts.Busybox = "/nonexistent/busybox"
	_, err := Build(t.TempDir(), opts)
	if err == nil || !strings.Contains(err.Error(), "missing /nonexistent/busybox") || !strings.Contains(err.Error(), "apt-get install -y busybox-static") {
		t.Errorf("error %v, want one naming the missing busybox and the apt-get command", err)
	}
}

// entry is a layer entry as the tests compare it.
type entry struct {
	Type byte
	Mode int64
	Link string
}

// readImage returns the config and the layer entries of an image tarball.
func readImage(t *testing.T, path string) (ocispec.Image, map[string]entry, map[string][]byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	blob := func(d string) []byte { return files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] }
	var index ocispec.Index
	var manifest ocispec.Manifest
	var config ocispec.Image
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest.String()), &manifest); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest.String()), &config); err != nil {
		t.Fatal(err)
	}
	entries, contents := map[string]entry{}, map[string][]byte{}
	lr := tar.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest.String())))
	for {
		h, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = entry{h.Typeflag, h.Mode, h.Linkname}
		contents[h.Name], _ = io.ReadAll(lr)
	}
	return config, entries, contents
}

// TestBuild builds the stand-ins from the host's busybox, bash and nginx
// (agnhost and pause are fakes) and checks what the e2e tests rely on.
func TestBuild(t *testing.T) {
	t.Parallel()
	opts := fakeHost(t)
	integration.Require(t, hostWhy(opts))
	dir := t.TempDir()
	start := time.Now()
	imgs, err := Build(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d images in %v", len(imgs), time.Since(start))

	var refs []string
	byRef := map[string]Image{}
	ids := map[string]string{}
	for _, img := range imgs {
		refs = append(refs, img.Ref)
		byRef[img.Ref] = img
		if other, dup := ids[img.ID]; dup {
			t.Errorf("%s and %s share the image ID %s", other, img.Ref, img.ID)
		}
		ids[img.ID] = img.Ref
		if img.Differs == "" {
			t.Errorf("%s: no Differs line", img.Ref)
		}
		if filepath.Dir(img.Path) != dir {
			t.Errorf("%s written to %s, want it in %s", img.Ref, img.Path, dir)
		}
	}
	want := []string{BusyboxRef, BusyboxPrevRef, AgnhostRef, AgnhostPrevRef, NginxRef, NginxNewRef, NonRootRef, NonewprivsRef, IpcUtilsRef, GlibcDNSRef, PauseRef}
	for _, p := range Placeholders {
		want = append(want, p.Ref)
	}
	want = append(want, SampleDevicePluginRef)
	if diff := cmp.Diff(want, refs); diff != "" {
		t.Fatalf("refs (-want +got):\n%s", diff)
	}

	type check struct {
		entrypoint, cmd []string
		user            string
		entries         map[string]entry
		contains        map[string]string // file -> substring
	}
	userland := map[string]entry{
		"bin/busybox":                    {tar.TypeReg, 0o755, ""},
		"bin/sh":                         {tar.TypeSymlink, 0o777, "busybox"},
		"bin/sleep":                      {tar.TypeSymlink, 0o777, "busybox"},
		"bin/wget":                       {tar.TypeSymlink, 0o777, "busybox"},
		"bin/nc":                         {tar.TypeSymlink, 0o777, "busybox"},
		"bin/bash":                       {tar.TypeReg, 0o755, ""},
		"bin/nmeter":                     {tar.TypeReg, 0o755, ""},
		"lib64/ld-linux-x86-64.so.2":     {tar.TypeReg, 0o755, ""},
		"lib/x86_64-linux-gnu/libc.so.6": {tar.TypeReg, 0o755, ""},
		"tmp/":                           {tar.TypeDir, 0o1777, ""},
	}
	with := func(extra map[string]entry) map[string]entry {
		out := map[string]entry{}
		for k, v := range userland {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	checks := map[string]check{
		BusyboxRef: {cmd: []string{"sh"}, entries: userland, contains: map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n"}},
		AgnhostRef: {
			entrypoint: []string{"/agnhost"}, cmd: []string{"pause"},
			entries: with(map[string]entry{"agnhost": {tar.TypeReg, 0o755, ""}, "agnhost-2": {tar.TypeSymlink, 0o777, "agnhost"}}),
			contains: map[string]string{
				"etc/group":     "group-defined-in-image:x:50000:user-defined-in-image\n",
				"etc/passwd":    "user-defined-in-image:x:1000:1000:",
				"agnhost":       "fake agnhost",
				"localhost.crt": "fake localhost.crt",
				"localhost.key": "fake localhost.key",
			},
		},
		NginxRef: {
			cmd:      []string{"nginx", "-g", "daemon off;"},
			entries:  with(map[string]entry{"usr/sbin/nginx": {tar.TypeReg, 0o755, ""}, "lib/x86_64-linux-gnu/libssl.so.3": {tar.TypeReg, 0o755, ""}}),
			contains: map[string]string{"etc/nginx/nginx.conf": "listen 80;", "etc/passwd": "nginx:x:101:101:"},
		},
		NonRootRef:    {cmd: []string{"sh"}, user: "1234", entries: userland},
		NonewprivsRef: {cmd: []string{"nnp", "nonewprivs"}, entries: with(map[string]entry{"usr/local/bin/nnp": {tar.TypeReg, 0o4755, ""}})},
		IpcUtilsRef:   {cmd: []string{"sh"}, entries: with(map[string]entry{"usr/bin/ipcs": {tar.TypeReg, 0o755, ""}, "usr/bin/ipcmk": {tar.TypeReg, 0o755, ""}})},
		GlibcDNSRef: {
			cmd:      []string{"sh"},
			entries:  with(map[string]entry{"bin/hostname": {tar.TypeReg, 0o755, ""}}),
			contains: map[string]string{"etc/nsswitch.conf": "hosts: files dns\n"},
		},
		// The daemonsets run the image's entrypoint with no command or args.
		SampleDevicePluginRef: {
			entrypoint: []string{"/sampledeviceplugin", "-alsologtostderr"},
			entries: map[string]entry{
				"sampledeviceplugin": {tar.TypeReg, 0o755, ""},
				"tmp/":               {tar.TypeDir, 0o1777, ""}, // the plugin's fake device files
			},
			contains: map[string]string{"sampledeviceplugin": "fake sampledeviceplugin"},
		},
		PauseRef: {
			entrypoint: []string{"/pause"}, user: "65535:65535",
			entries:  map[string]entry{"pause": {tar.TypeReg, 0o755, ""}},
			contains: map[string]string{"pause": "fake pause"},
		},
	}
	for ref, c := range checks {
		t.Run(ref, func(t *testing.T) {
			config, entries, contents := readImage(t, byRef[ref].Path)
			got := struct {
				Entrypoint, Cmd []string
				User            string
				Label           string
			}{config.Config.Entrypoint, config.Config.Cmd, config.Config.User, config.Config.Labels[StandInLabel]}
			want := got
			want.Entrypoint, want.Cmd, want.User, want.Label = c.entrypoint, c.cmd, c.user, ref
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			for name, e := range c.entries {
				if diff := cmp.Diff(e, entries[name]); diff != "" {
					t.Errorf("entry %s (-want +got):\n%s", name, diff)
				}
			}
			for name, s := range c.contains {
				if !strings.Contains(string(contents[name]), s) {
					t.Errorf("%s does not contain %q:\n%s", name, s, contents[name])
				}
			}
		})
	}

	// The same inputs give the same images; without Options.Pause the pause
	// image runs agnhost's pause subcommand, and without
	// Options.SampleDevicePlugin there is no sample-device-plugin image.
	opts.Pause, opts.SampleDevicePlugin = "", ""
	again, err := Build(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(imgs)-1 {
		t.Fatalf("rebuilt %d images without Options.SampleDevicePlugin, want %d", len(again), len(imgs)-1)
	}
	for i, img := range again {
		if img.Ref == SampleDevicePluginRef {
			t.Errorf("%s built without Options.SampleDevicePlugin", img.Ref)
		}
		if img.Ref != PauseRef && img.ID != imgs[i].ID {
			t.Errorf("%s: rebuilt with ID %s, was %s", img.Ref, img.ID, imgs[i].ID)
		}
	}
	config, _, contents := readImage(t, byRef[PauseRef].Path)
	if diff := cmp.Diff([]string{"/pause", "pause"}, config.Config.Entrypoint); diff != "" || string(contents["pause"]) != "fake agnhost" {
		t.Errorf("pause without Options.Pause: entrypoint (-want +got):\n%s\n/pause = %q", diff, contents["pause"])
	}
}

// TestSampleDevicePluginMatchesUpstream checks the stand-in's reference
// against the image both of the suite's sample-device-plugin daemonsets name
// (the suite pre-pulls it and the specs deploy it), and its entrypoint
// against upstream's Dockerfile, in the k8s.io/kubernetes release hack/kube
// pins: a bump that renames the image or changes how it starts fails here.
func TestSampleDevicePluginMatchesUpstream(t *testing.T) {
	t.Parallel()
	src, err := kubebuild.SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(src); err != nil {
		dir, err := toolbuild.ModuleDir(kubebuild.Module)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(toolbuild.GoTool(), "mod", "download", "k8s.io/kubernetes")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			integration.Require(t, fmt.Sprintf("k8s.io/kubernetes is not in the module cache and go mod download failed: %v: %s", err, out))
		}
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, ds := range []string{"sample-device-plugin.yaml", "sample-device-plugin-control-registration.yaml"} {
		var images []string
		for line := range strings.Lines(read("test/e2e/testing-manifests/sample-device-plugin/" + ds)) {
			if ref, ok := strings.CutPrefix(strings.TrimSpace(line), "- image: "); ok {
				images = append(images, ref)
			}
		}
		if diff := cmp.Diff([]string{SampleDevicePluginRef}, images); diff != "" {
			t.Errorf("%s: images (-want +got):\n%s", ds, diff)
		}
	}
	var entry []string
	for line := range strings.Lines(read("test/images/sample-device-plugin/Dockerfile")) {
		if args, ok := strings.CutPrefix(strings.TrimSpace(line), "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(args), &entry); err != nil {
				t.Fatalf("Dockerfile: %s: %v", line, err)
			}
		}
	}
	if diff := cmp.Diff(entry, SampleDevicePluginEntrypoint); diff != "" {
		t.Errorf("entrypoint (-upstream's Dockerfile +stand-in's):\n%s", diff)
	}
}

// TestPrePullListCovered resolves the images the suite's PrePullAllImages
// pulls, from the sources of the k8s.io/kubernetes release hack/kube pins
// (NodePrePullImageList and updateImageAllowList in
// test/e2e_node/image_list.go, PrePulledImages in test/e2e/common/util.go,
// the references in test/utils/image/manifest.go, the SR-IOV daemonset), and
// checks each has a stand-in: a bump that adds or renames one fails here
// instead of in the suite's prepull.
func TestPrePullListCovered(t *testing.T) {
	t.Parallel()
	src, err := kubebuild.SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(src); err != nil {
		integration.Require(t, fmt.Sprintf("k8s.io/kubernetes is not in the module cache (%v); TestSampleDevicePluginMatchesUpstream downloads it", err))
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	manifest := read("test/utils/image/manifest.go")
	registries := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(\w+Registry):\s+"([^"]+)",$`).FindAllStringSubmatch(manifest, -1) {
		registries[m[1]] = m[2]
	}
	refs := map[string]string{}
	for _, m := range regexp.MustCompile(`configs\[(\w+)\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}`).FindAllStringSubmatch(manifest, -1) {
		refs[m[1]] = registries[m[2]] + "/" + m[3] + ":" + m[4]
	}
	// list reads the entries of a sets.NewString( ... ) block.
	list := func(file, start string) []string {
		text := read(file)
		i := strings.Index(text, start)
		if i < 0 {
			t.Fatalf("%s: no %q", file, start)
		}
		block, _, _ := strings.Cut(text[i+len(start):], "\n)")
		var out []string
		for line := range strings.Lines(block) {
			line = strings.TrimSuffix(strings.TrimSpace(line), ",")
			var ref string
			switch {
			case line == "":
				continue
			case strings.HasPrefix(line, `"`):
				ref = strings.Trim(line, `"`)
			case line == "busyboxImage":
				ref = refs["BusyBox"]
			case line == "imageutils.GetPauseImageName()":
				ref = refs["Pause"]
			default:
				m := regexp.MustCompile(`^imageutils\.GetE2EImage\(imageutils\.(\w+)\)$`).FindStringSubmatch(line)
				if m == nil || refs[m[1]] == "" {
					t.Fatalf("%s: entry %q: cannot resolve it", file, line)
				}
				ref = refs[m[1]]
			}
			out = append(out, ref)
		}
		return out
	}
	want := list("test/e2e_node/image_list.go", "NodePrePullImageList = sets.NewString(")
	want = append(want, list("test/e2e/common/util.go", "PrePulledImages = sets.NewString(")...)
	if m := regexp.MustCompile(`defaultImage string = "([^"]+)"`).FindStringSubmatch(read("test/e2e_node/image_list.go")); m != nil {
		want = append(want, m[1])
	} else {
		t.Error("image_list.go: no node-problem-detector defaultImage")
	}
	if m := regexp.MustCompile(`image: (\S+)`).FindStringSubmatch(read("test/e2e_node/testing-manifests/sriovdp-ds.yaml")); m != nil {
		want = append(want, m[1])
	} else {
		t.Error("sriovdp-ds.yaml: no image")
	}
	want = append(want, SampleDevicePluginRef) // TestSampleDevicePluginMatchesUpstream checks it

	have := map[string]bool{}
	for _, ref := range []string{BusyboxRef, BusyboxPrevRef, AgnhostRef, AgnhostPrevRef, NginxRef, NginxNewRef, NonRootRef,
		NonewprivsRef, IpcUtilsRef, GlibcDNSRef, PauseRef, SampleDevicePluginRef} {
		have[ref] = true
	}
	for _, p := range Placeholders {
		have[p.Ref] = true
	}
	if len(want) < 15 {
		t.Fatalf("resolved only %d images (%v): the parsing no longer fits the sources", len(want), want)
	}
	for _, ref := range want {
		if !have[ref] {
			t.Errorf("the suite pre-pulls %s, which has no stand-in", ref)
		}
	}
	if !t.Failed() {
		t.Logf("the suite pre-pulls %d references, each with a stand-in", len(want))
	}
}
