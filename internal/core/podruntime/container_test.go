package podruntime

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

func envMap(kvs []*runtimeapi.KeyValue) [][2]string {
	var out [][2]string
	for _, kv := range kvs {
		out = append(out, [2]string{kv.Key, string(kv.Value)})
	}
	return out
}

func TestContainerConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	grace := int64(7)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		c := &p.Spec.Containers[0]
		c.Command = []string{"/bin/$(CMD)"}
		c.Args = []string{"--x=$(X)", "$$(X)"}
		c.Env = []v1.EnvVar{{Name: "CMD", Value: "run"}, {Name: "X", Value: "1"}}
		c.WorkingDir = "/work"
		c.VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "scratch", MountPath: "/sub", SubPath: "a/b", ReadOnly: true}}
		c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"stop"}}}}
	})
	t.Cleanup(func() {
		if err := removePodDir(dir, "uid-1"); err != nil {
			t.Error(err)
		}
	})
	got, err := containerConfig(containerInput{Input: criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0], RestartCount: 3, SandboxID: "sb1", MemoryCapacity: 1 << 30, CPUs: 1}, podsDir: dir, termLog: "/term"})
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "uid-1/volumes/kubernetes.io~empty-dir/scratch")
	subBind := filepath.Join(dir, "uid-1/volume-subpaths/scratch/app/1")
	if st, err := os.Stat(filepath.Join(empty, "a/b")); err != nil || !st.IsDir() {
		t.Errorf("emptyDir subPath not made: %v", err)
	}
	want := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "app", Attempt: 3},
		Image:      &runtimeapi.ImageSpec{Image: "img:1", UserSpecifiedImage: "img:1"},
		Command:    []string{"/bin/run"},
		Args:       []string{"--x=1", "$(X)"},
		WorkingDir: "/work",
		Envs:       []*runtimeapi.KeyValue{{Key: "CMD", Value: []byte("run")}, {Key: "X", Value: []byte("1")}},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/scratch", HostPath: empty},
			{ContainerPath: "/sub", HostPath: subBind, Readonly: true},
			{ContainerPath: "/dev/termination-log", HostPath: "/term"},
		},
		Labels: map[string]string{"app": "web", criconfig.LabelPodName: "web", criconfig.LabelPodNamespace: "ns", criconfig.LabelPodUID: "uid-1", criconfig.LabelContainerName: "app", criconfig.LabelKubeletManaged: "true"},
		Annotations: map[string]string{
			criconfig.AnnotationContainerHash: criconfig.Hash(&pod.Spec.Containers[0]), criconfig.AnnotationRestartCount: "3", criconfig.AnnotationTermMsgPath: "/dev/termination-log",
			criconfig.AnnotationTermMsgPolicy: "File", criconfig.AnnotationPodGrace: "7", criconfig.AnnotationSandboxID: "sb1", criconfig.AnnotationImage: "img:1", criconfig.AnnotationPreStop: `{"exec":{"command":["stop"]}}`,
		},
		LogPath: "app/3.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
				MaskedPaths: []string{
					"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
					"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
				},
				ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
			},
		},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestTerminationLogMount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pod := testPod(func(p *v1.Pod) { p.Spec.Containers[0].TerminationMessagePath = "/tmp/msg" })
	got, err := containerMounts(containerInput{Input: criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0]}, podsDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ContainerPath != "/tmp/msg" || filepath.Dir(got[0].HostPath) != filepath.Join(dir, "uid-1/containers/app") {
		t.Fatalf("mounts = %v, want one termination log under %s/uid-1/containers/app", got, dir)
	}
	if st, err := os.Stat(got[0].HostPath); err != nil || !st.Mode().IsRegular() {
		t.Errorf("termination log file: %v", err)
	}
}

func TestHostPathTypes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tests := []struct {
		path    string
		typ     v1.HostPathType
		wantErr string
		made    bool
	}{
		{path: "absent", typ: v1.HostPathUnset},
		{path: "newdir/x", typ: v1.HostPathDirectoryOrCreate, made: true},
		{path: "newfile", typ: v1.HostPathFileOrCreate, made: true},
		{path: "nodir/newfile", typ: v1.HostPathFileOrCreate, wantErr: "no such file"},
		{path: "file", typ: v1.HostPathDirectoryOrCreate, wantErr: "is not a directory"},
		{path: "absent", typ: v1.HostPathDirectory, wantErr: "does not exist"},
		{path: ".", typ: v1.HostPathDirectory},
		{path: "file", typ: v1.HostPathFile},
		{path: ".", typ: v1.HostPathFile, wantErr: "is not a file"},
		{path: "s.sock", typ: v1.HostPathSocket},
		{path: "file", typ: v1.HostPathSocket, wantErr: "is not a socket"},
		{path: "file", typ: v1.HostPathCharDev, wantErr: "is not a character device"},
		{path: "file", typ: "Bogus", wantErr: `hostPath type "Bogus" is not a known type`},
	}
	for _, tc := range tests {
		typ := tc.typ
		p := filepath.Join(dir, tc.path)
		err := checkHostPath(&v1.HostPathVolumeSource{Path: p, Type: &typ})
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s %s: err = %v, want %q", tc.typ, tc.path, err, tc.wantErr)
		}
		if tc.made {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s %s: not made: %v", tc.typ, tc.path, err)
			}
		}
	}
}

func TestVolumeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mut  func(*v1.Pod)
		want string
	}{
		{"unknown volume", func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "x", MountPath: "/x"}} },
			`container "app": volumeMounts[0]: no volume "x" in the pod`},
		{"configMap", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "x", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "x", MountPath: "/x"}}
		}, `container "app": volume "x" is not set up`},
		{"unsupported kind", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "x", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{}}}}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "x", MountPath: "/x"}}
		}, `container "app": volume "x": only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported`},
		{"subPath escapes", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "x", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "x", MountPath: "/x", SubPath: "../../etc"}}
		}, `volumeMounts[0].subPath "../../etc" leaves the volume`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod(tc.mut)
			_, err := containerMounts(containerInput{Input: criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0]}, podsDir: t.TempDir()}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestVerifyNonRoot(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	zero, thousand := int64(0), int64(1000)
	uidImg := func(u int64) *runtimeapi.Image { return &runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: u}} }
	tests := []struct {
		name    string
		pod     *v1.PodSecurityContext
		ctr     *v1.SecurityContext
		img     *runtimeapi.Image
		wantErr string
	}{
		{name: "not asked", img: uidImg(0)},
		{name: "pod asks, image user 1000", pod: &v1.PodSecurityContext{RunAsNonRoot: &yes}, img: uidImg(1000)},
		{name: "pod asks, image root", pod: &v1.PodSecurityContext{RunAsNonRoot: &yes}, img: uidImg(0), wantErr: "container has runAsNonRoot and image will run as root"},
		{name: "image without a user runs as root", pod: &v1.PodSecurityContext{RunAsNonRoot: &yes}, img: &runtimeapi.Image{}, wantErr: "image will run as root"},
		{name: "named user cannot be checked", ctr: &v1.SecurityContext{RunAsNonRoot: &yes}, img: &runtimeapi.Image{Username: "app"}, wantErr: "image has non-numeric user (app)"},
		{name: "runAsUser 0", ctr: &v1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: &zero}, img: uidImg(1000), wantErr: "container's runAsUser breaks non-root policy"},
		{name: "runAsUser 1000 over a root image", pod: &v1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &thousand}, img: uidImg(0)},
		{name: "container turns it off", pod: &v1.PodSecurityContext{RunAsNonRoot: &yes}, ctr: &v1.SecurityContext{RunAsNonRoot: &no}, img: uidImg(0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := testPod(func(p *v1.Pod) { p.Spec.SecurityContext = tc.pod; p.Spec.Containers[0].SecurityContext = tc.ctr })
			err := verifyNonRoot(pod, &pod.Spec.Containers[0], tc.img)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestContainerEnvFileKeyRef: an env file an init container wrote into an
// emptyDir volume feeds fileKeyRef variables (the EnvFiles feature), quotes
// stripped; a missing key is an error unless optional; a volume that is not
// an emptyDir is refused.
func TestContainerEnvFileKeyRef(t *testing.T) {
	t.Parallel()
	podsDir := t.TempDir()
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{
			{Name: "config", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp"}}},
		}
	})
	dir := emptyDirPath(podsDir, string(pod.UID), "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.env"), []byte("# written by an init container\nCONFIG_1='value1'\n\n CONFIG_2 = \"value 2\"\nCONFIG_3=a=b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := func(vol, path, key string, optional bool) v1.EnvVar {
		return v1.EnvVar{Name: key, ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: vol, Path: path, Key: key, Optional: &optional}}}
	}
	pod.Spec.Containers[0].Env = []v1.EnvVar{
		ref("config", "config.env", "CONFIG_1", false),
		ref("config", "config.env", "CONFIG_2", false),
		ref("config", "config.env", "CONFIG_3", false),
		ref("config", "config.env", "MISSING", true),
		ref("config", "absent.env", "X", true),
	}
	env, err := criconfig.Env(criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0], MemoryCapacity: 1 << 30, CPUs: 1, EnvFiles: readEnvFiles(podsDir, pod, &pod.Spec.Containers[0])})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		got[kv.Key] = string(kv.Value)
	}
	for k, want := range map[string]string{"CONFIG_1": "value1", "CONFIG_2": "value 2", "CONFIG_3": "a=b"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	if _, ok := got["MISSING"]; ok {
		t.Error("an optional missing key is set")
	}
	for _, tc := range []struct {
		env  v1.EnvVar
		want string
	}{
		{ref("config", "config.env", "MISSING", false), "key MISSING not found in env file config.env of volume config"},
		{ref("host", "x.env", "X", false), `fileKeyRef volume "host": not an emptyDir volume`},
		{ref("config", "../x.env", "X", false), `fileKeyRef path "../x.env"`},
	} {
		pod.Spec.Containers[0].Env = []v1.EnvVar{tc.env}
		_, err := criconfig.Env(criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0], MemoryCapacity: 1 << 30, CPUs: 1, EnvFiles: readEnvFiles(podsDir, pod, &pod.Spec.Containers[0])})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.env.ValueFrom.FileKeyRef, err, tc.want)
		}
	}
}

// TestTerminationLogWritableByAnyUser: the termination-log file is 0666
// whatever the umask, so a container running as a non-root user can write
// its message (node e2e: "termination message ... as non-root user").
func TestTerminationLogWritableByAnyUser(t *testing.T) {
	path, err := newTerminationLog(t.TempDir(), "uid-1", "app")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o666 {
		t.Errorf("termination log mode %o, want 666", got)
	}
}
