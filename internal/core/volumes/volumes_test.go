package volumes

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

func testPod(vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": "a \"quoted\" value"},
		},
		Spec: v1.PodSpec{
			ServiceAccountName: "robot",
			Containers:         []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}}},
			Volumes:            vols,
		},
	}
}

func newTestManager(t *testing.T, onDisk bool, objs ...runtime.Object) (*Manager, *fake.Clientset) {
	t.Helper()
	c, _ := tokenClient(nil)
	for _, o := range objs {
		if err := c.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(Config{PodsDir: filepath.Join(t.TempDir(), "pods"), MemoryCapacity: 1 << 30, OnDisk: onDisk},
		Deps{API: kubeclient.PodObjects{Client: clientgo.Wrap(c)}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.tokens.jitter = func() time.Duration { return 0 }
	return m, c
}

func configMap(name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data}
}

func secret(name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func memLimit(ref *v1.ResourceFieldSelector) (string, error) {
	if ref.Resource == "limits.memory" {
		return "67108864", nil
	}
	return "", errors.New("unknown resource")
}

func TestSetUp(t *testing.T) {
	t.Parallel()
	objs := []runtime.Object{
		configMap("cfg", map[string]string{"a.conf": "A", "b.conf": "B"}),
		secret("creds", map[string]string{"user": "admin", "pass": "s3cret"}),
		configMap("kube-root-ca.crt", map[string]string{"ca.crt": "CA"}),
	}
	tests := []struct {
		name      string
		vol       v1.Volume
		kind      string
		wantFiles map[string]string
		wantModes map[string]os.FileMode
		wantErr   string
	}{
		{
			name: "configMap all keys", kind: KindConfigMap,
			vol:       v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
			wantFiles: map[string]string{"a.conf": "A", "b.conf": "B"},
			wantModes: map[string]os.FileMode{"a.conf": 0o644, "b.conf": 0o644},
		},
		{
			name: "configMap items and modes", kind: KindConfigMap,
			vol: v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
				LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr(int32(0o400)),
				Items: []v1.KeyToPath{{Key: "a.conf", Path: "etc/a"}, {Key: "b.conf", Path: "b", Mode: ptr(int32(0o640))}},
			}}},
			wantFiles: map[string]string{"etc/a": "A", "b": "B"},
			wantModes: map[string]os.FileMode{"etc/a": 0o400, "b": 0o640},
		},
		{
			name: "configMap missing", kind: KindConfigMap,
			vol:     v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}},
			wantErr: `MountVolume.SetUp failed for volume "v" : configmap "nope" not found`,
		},
		{
			name: "configMap missing optional", kind: KindConfigMap,
			vol:       v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: ptr(true)}}},
			wantFiles: map[string]string{}, wantModes: map[string]os.FileMode{},
		},
		{
			name: "configMap missing key", kind: KindConfigMap,
			vol: v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
				LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Items: []v1.KeyToPath{{Key: "zzz", Path: "z"}},
			}}},
			wantErr: `MountVolume.SetUp failed for volume "v" : configmap references non-existent config key: zzz`,
		},
		{
			name: "secret", kind: KindSecret,
			vol:       v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds", Items: []v1.KeyToPath{{Key: "pass", Path: "password"}}}}},
			wantFiles: map[string]string{"password": "s3cret"},
			wantModes: map[string]os.FileMode{"password": 0o644},
		},
		{
			name: "secret missing key", kind: KindSecret,
			vol:     v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds", Items: []v1.KeyToPath{{Key: "token", Path: "t"}}}}},
			wantErr: `MountVolume.SetUp failed for volume "v" : references non-existent secret key: token`,
		},
		{
			name: "secret missing", kind: KindSecret,
			vol:     v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "other"}}},
			wantErr: `MountVolume.SetUp failed for volume "v" : secret "other" not found`,
		},
		{
			name: "downwardAPI", kind: KindDownwardAPI,
			vol: v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "ns", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
				{Path: "uid", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
				{Path: "tier", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}},
				{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory"}, Mode: ptr(int32(0o600))},
			}}}},
			wantFiles: map[string]string{
				"name": "web", "ns": "ns", "uid": "uid-1", "labels": "app=\"web\"\ntier=\"front\"",
				"annotations": `note="a \"quoted\" value"`, "tier": "front", "mem": "67108864",
			},
			wantModes: map[string]os.FileMode{"name": 0o644, "ns": 0o644, "uid": 0o644, "labels": 0o644, "annotations": 0o644, "tier": 0o644, "mem": 0o600},
		},
		{
			name: "projected kube-api-access", kind: KindProjected,
			vol: v1.Volume{Name: "kube-api-access-x", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				DefaultMode: ptr(int32(0o644)),
				Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr(int64(3607)), Path: "token"}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				},
			}}},
			wantFiles: map[string]string{"token": "token-1", "ca.crt": "CA", "namespace": "ns"},
			wantModes: map[string]os.FileMode{"token": 0o644, "ca.crt": 0o644, "namespace": 0o644},
		},
		{
			name: "projected errors together", kind: KindProjected,
			vol: v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "nope2"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "nope3"}, Optional: ptr(true)}},
			}}}},
			wantErr: `MountVolume.SetUp failed for volume "v" : [configmap "nope" not found, secret "nope2" not found]`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newTestManager(t, true, objs...)
			pod := testPod(tc.vol)
			failed := m.SetUp(context.Background(), pod, memLimit)
			path, ready := m.HostPath(pod, &pod.Spec.Volumes[0])
			if want := filepath.Join(m.cfg.PodsDir, "uid-1", "volumes", tc.kind, tc.vol.Name); path != want {
				t.Errorf("HostPath = %s, want %s", path, want)
			}
			if tc.wantErr != "" {
				if len(failed) != 1 || failed[0].Error() != tc.wantErr || failed[0].Ready {
					t.Fatalf("SetUp = %v, want one error %q, not ready", failed, tc.wantErr)
				}
				if ready {
					t.Error("HostPath reports a volume never written as ready")
				}
				return
			}
			if len(failed) > 0 {
				t.Fatalf("SetUp: %v", failed)
			}
			if !ready {
				t.Fatal("HostPath: not ready after SetUp")
			}
			got := look(t, path)
			if diff := cmp.Diff(tc.wantFiles, got.Files); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantModes, got.Modes); diff != "" {
				t.Errorf("modes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSetUpRefresh: a sync after the ConfigMap changed shows the new data; a
// sync after it was deleted keeps the last content and reports the failure
// as a refresh (Ready); the token is renewed at 80 % of its lifetime (the
// time package's clock, in a synctest bubble).
func TestSetUpRefresh(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testSetUpRefresh)
}

func testSetUpRefresh(t *testing.T) {
	m, c := newTestManager(t, true, configMap("cfg", map[string]string{"k": "v1", "gone": "x"}))
	pod := testPod(
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		v1.Volume{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr(int64(600)), Path: "token", Audience: "vault"}},
		}}}},
	)
	ctx := context.Background()
	files := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for i := range pod.Spec.Volumes {
			p, _ := m.HostPath(pod, &pod.Spec.Volumes[i])
			for k, v := range look(t, p).Files {
				out[pod.Spec.Volumes[i].Name+"/"+k] = v
			}
		}
		return out
	}
	if f := m.SetUp(ctx, pod, nil); len(f) > 0 {
		t.Fatal(f)
	}
	if diff := cmp.Diff(map[string]string{"cfg/k": "v1", "cfg/gone": "x", "tok/token": "token-1"}, files()); diff != "" {
		t.Errorf("first (-want +got):\n%s", diff)
	}
	if _, err := c.CoreV1().ConfigMaps("ns").Update(ctx, configMap("cfg", map[string]string{"k": "v2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8*time.Minute + time.Second) // past 80 % of 10 minutes
	if f := m.SetUp(ctx, pod, nil); len(f) > 0 {
		t.Fatal(f)
	}
	if diff := cmp.Diff(map[string]string{"cfg/k": "v2", "tok/token": "token-2"}, files()); diff != "" {
		t.Errorf("after update (-want +got):\n%s", diff)
	}
	if err := c.CoreV1().ConfigMaps("ns").Delete(ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f := m.SetUp(ctx, pod, nil)
	if len(f) != 1 || f[0].Volume != "cfg" || !f[0].Ready {
		t.Fatalf("after delete: %v, want cfg failing as a refresh", f)
	}
	if diff := cmp.Diff(map[string]string{"cfg/k": "v2", "tok/token": "token-2"}, files()); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}
}

func TestSetUpStandalone(t *testing.T) {
	t.Parallel()
	m, err := New(Config{PodsDir: t.TempDir(), MemoryCapacity: 1 << 30, OnDisk: true}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod(
		v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		v1.Volume{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}},
	)
	failed := m.SetUp(context.Background(), pod, nil)
	var got []string
	for _, f := range failed {
		if !errors.Is(f, ErrNoAPIServer) {
			t.Errorf("%v is not ErrNoAPIServer", f)
		}
		got = append(got, f.Error())
	}
	want := []string{
		`MountVolume.SetUp failed for volume "cfg" : configMap volumes need ConfigMaps: a node without an API server does not have them`,
		`MountVolume.SetUp failed for volume "tok" : serviceAccountToken projections need tokens from the API server: a node without an API server does not have them`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, ready := m.HostPath(pod, &pod.Spec.Volumes[0]); !ready {
		t.Error("the downwardAPI volume is not ready on a node without an API server")
	}
}

// TestSetUpTmpfs: secret volumes live on a tmpfs of their own, sized to the
// pod's memory limit, and TearDown unmounts it.
func TestSetUpTmpfs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting a tmpfs needs root")
	}
	m, _ := newTestManager(t, false, secret("creds", map[string]string{"pass": "s3cret"}),
		configMap("cfg", map[string]string{"k": "v"}))
	pod := testPod(
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
		v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
	)
	t.Cleanup(func() {
		if err := m.TearDown(pod.UID); err != nil {
			t.Error(err)
		}
	})
	if f := m.SetUp(context.Background(), pod, nil); len(f) > 0 {
		t.Fatal(f)
	}
	sdir, _ := m.HostPath(pod, &pod.Spec.Volumes[0])
	cdir, _ := m.HostPath(pod, &pod.Spec.Volumes[1])
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == sdir {
			line = l
		}
		if f := strings.Fields(l); len(f) > 4 && f[4] == cdir {
			t.Errorf("the configMap volume is a mount point: %s", l)
		}
	}
	if !strings.Contains(line, "tmpfs") || !strings.Contains(line, "size=65536k") {
		t.Errorf("secret volume mount %q, want a tmpfs of 64Mi", line)
	}
	// SetUp again does not stack a second tmpfs.
	if f := m.SetUp(context.Background(), pod, nil); len(f) > 0 {
		t.Fatal(f)
	}
	if b, _ := os.ReadFile(filepath.Join(sdir, "pass")); string(b) != "s3cret" {
		t.Errorf("pass = %q", b)
	}
	if err := m.TearDown(pod.UID); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := isMountPoint(sdir); mounted {
		t.Error("secret volume still mounted after TearDown")
	}
}

// TestSetUpTmpfsPodLimit: the tmpfs of a downwardAPI (as of a secret or
// projected) volume is sized by the pod's memory limit as its cgroup has it
// (nodeapi.TmpfsSize): a pod-level limit counts, and so does a larger init
// container. Before issue 28 only the regular containers' limits counted, and
// both pods got the node's memory (no limit) or the regular container's.
func TestSetUpTmpfsPodLimit(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting a tmpfs needs root")
	}
	m, _ := newTestManager(t, false)
	vol := v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
		Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}
	podLevel := testPod(vol)
	podLevel.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}}
	bigInit := testPod(vol)
	bigInit.UID = "uid-2"
	bigInit.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("96Mi")}}}}
	for _, tc := range []struct {
		pod  *v1.Pod
		want int64
	}{{podLevel, 16 << 20}, {bigInit, 96 << 20}} {
		t.Cleanup(func() {
			if err := m.TearDown(tc.pod.UID); err != nil {
				t.Error(err)
			}
		})
		if f := m.SetUp(context.Background(), tc.pod, nil); len(f) > 0 {
			t.Fatal(f)
		}
		dir, _ := m.HostPath(tc.pod, &tc.pod.Spec.Volumes[0])
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if got := int64(st.Blocks) * st.Bsize; got != tc.want {
			t.Errorf("pod %s: tmpfs size %dMi, want %dMi", tc.pod.UID, got>>20, tc.want>>20)
		}
	}
}

// TestSetUpFSGroupRoot: with a pod fsGroup the volume's own directory and
// the links in it get the group too, and the directory the set-group-ID
// bit, as the kubelet's ownership change walks the whole volume; without
// one the directory is plain 0777.
func TestSetUpFSGroupRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "chown needs root")
	}
	m, _ := newTestManager(t, true, configMap("cfg", map[string]string{"k": "v"}))
	vol := v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
	plain := testPod(vol)
	plain.UID = "uid-plain"
	grouped := testPod(vol)
	grouped.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(123))}
	for _, tc := range []struct {
		pod     *v1.Pod
		gid     uint32
		wantDir os.FileMode
	}{
		{plain, 0, os.ModeDir | 0o777},
		{grouped, 123, os.ModeDir | os.ModeSetgid | 0o777},
	} {
		if f := m.SetUp(context.Background(), tc.pod, nil); len(f) > 0 {
			t.Fatal(f)
		}
		dir, _ := m.HostPath(tc.pod, &tc.pod.Spec.Volumes[0])
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if gid := info.Sys().(*syscallStat).Gid; gid != tc.gid || info.Mode() != tc.wantDir {
			t.Errorf("pod %s: volume directory gid %d mode %v, want %d %v", tc.pod.UID, gid, info.Mode(), tc.gid, tc.wantDir)
		}
		for _, name := range []string{dataLink, "k"} {
			info, err := os.Lstat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if gid := info.Sys().(*syscallStat).Gid; gid != tc.gid {
				t.Errorf("pod %s: link %s gid %d, want %d", tc.pod.UID, name, gid, tc.gid)
			}
		}
	}
}

// The daemon's adapter over the node's client is an API.
var _ API = kubeclient.PodObjects{}
