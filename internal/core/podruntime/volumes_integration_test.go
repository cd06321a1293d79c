package podruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient/clientgo"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// fakeCluster is a fake clientset with a ConfigMap, a Secret, the
// kube-root-ca.crt ConfigMap and the kubernetes Service, whose TokenRequests
// mint "token-for-<pod>".
func fakeCluster() *fake.Clientset {
	c := fake.NewClientset(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"greeting": "hello", "MODE": "fast"}},
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "CA"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"pass": []byte("s3cret")}},
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
			Spec: v1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []v1.ServicePort{{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}}}},
	)
	c.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		req.Status.Token = "token-for-" + req.Spec.BoundObjectRef.Name
		req.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
		return true, req, nil
	})
	return c
}

// TestIntegrationAPIVolumes: a container sees its configMap, secret,
// downwardAPI and kube-api-access files (read-only) and its env from a
// ConfigMap, a Secret and the kubernetes Service; a changed ConfigMap
// reaches the volume on the next sync; RemovePod unmounts and removes it.
func TestIntegrationAPIVolumes(t *testing.T) {
	n := startNode(t)
	client := fakeCluster()
	logger := testLogger(t)
	m, err := New(n.m.cfg, Deps{Runtime: n.ctd.CRI, Logger: logger, Recorder: nodeapi.LogRecorder{Logger: logger}, KubeAPI: kubeclient.PodObjects{Client: clientgo.Wrap(client)}})
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	dirType := v1.HostPathDirectory
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	pod := hostPod("vols", "uid-vols", func(p *v1.Pod) {
		p.Spec.ServiceAccountName = "robot"
		p.Spec.Volumes = []v1.Volume{
			{Name: "out", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}},
			{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
			{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptrTo(int32(0o400))}}},
			{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			}}}},
			{Name: "kube-api-access-abcde", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				DefaultMode: ptrTo(int32(0o644)),
				Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptrTo(int64(3607)), Path: "token"}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				},
			}}},
		}
		p.Spec.Containers[0] = v1.Container{
			Name: "app", Image: appImage,
			Command: []string{"/tools/probe"},
			Args:    []string{"files", "/out/files", "/etc/cfg/greeting", "/etc/creds/pass", "/etc/info/labels", sa + "/token", sa + "/ca.crt", sa + "/namespace"},
			EnvFrom: []v1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
			Env:     []v1.EnvVar{{Name: "PASS", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "pass"}}}},
			VolumeMounts: []v1.VolumeMount{
				{Name: "out", MountPath: "/out"}, {Name: "tools", MountPath: "/tools", ReadOnly: true},
				{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "creds", MountPath: "/etc/creds"}, {Name: "info", MountPath: "/etc/info"},
				{Name: "kube-api-access-abcde", MountPath: sa, ReadOnly: true},
			},
		}
	})
	n.runUntil(t, pod, "Running", running1)
	report := filepath.Join(emptyDirPath(n.m.cfg.PodsDir, "uid-vols", "out"), "files")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var b []byte
	for {
		var err error
		if b, err = os.ReadFile(report); err == nil && len(b) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no report at %s: %v", report, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, want := range []string{
		"CFG_greeting=hello\n", "CFG_MODE=fast\n", "PASS=s3cret\n", "KUBERNETES_SERVICE_HOST=10.0.0.1\n", "KUBERNETES_SERVICE_PORT=443\n",
		"file /etc/cfg/greeting 644 \"hello\"\n",
		"file /etc/creds/pass 400 \"s3cret\"\n",
		"file /etc/info/labels 644 \"app=\\\"web\\\"\"\n",
		"file " + sa + "/token 644 \"token-for-vols\"\n",
		"file " + sa + "/ca.crt 644 \"CA\"\n",
		"file " + sa + "/namespace 644 \"ns\"\n",
		"write /etc/cfg: open /etc/cfg/probe-write: read-only file system\n",
		"write /etc/creds: open /etc/creds/probe-write: read-only file system\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}

	// A changed ConfigMap reaches the volume on the next sync.
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"greeting": "bonjour"}}
	if _, err := client.CoreV1().ConfigMaps("ns").Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := n.syncPod(t.Context(), n.m, pod, n.status(t, pod.UID)); res.Err != nil {
		t.Fatal(res.Err)
	}
	cfgDir, _ := n.m.vols.HostPath(pod, &pod.Spec.Volumes[2])
	if got, err := os.ReadFile(filepath.Join(cfgDir, "greeting")); err != nil || string(got) != "bonjour" {
		t.Errorf("greeting after the update = %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(cfgDir, "MODE")); !os.IsNotExist(err) {
		t.Errorf("the removed key MODE is still in the volume: %v", err)
	}

	credsDir, _ := n.m.vols.HostPath(pod, &pod.Spec.Volumes[3])
	if err := n.m.KillPod(t.Context(), pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), filepath.Join(n.m.cfg.PodsDir, "uid-vols")) {
		t.Errorf("mounts of the pod left after RemovePod:\n%s", mounts)
	}
	if _, err := os.Stat(credsDir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", credsDir, err)
	}
}

// TestIntegrationMissingConfigMap: a pod whose configMap volume names a
// ConfigMap that does not exist is not started; the sync fails with a
// FailedMount event until the ConfigMap appears.
func TestIntegrationMissingConfigMap(t *testing.T) {
	n := startNode(t)
	client := fakeCluster()
	logger := testLogger(t)
	rec := &eventLog{}
	m, err := New(n.m.cfg, Deps{Runtime: n.ctd.CRI, Logger: logger, Recorder: rec, KubeAPI: kubeclient.PodObjects{Client: clientgo.Wrap(client)}})
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	pod := hostPod("late", "uid-late", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "later", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "later"}}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "later", MountPath: "/later"}}
	})
	res := n.syncPod(t.Context(), n.m, pod, nil)
	if !errors.Is(res.Err, errVolumesNotReady) {
		t.Fatalf("sync of a pod with a missing ConfigMap: %v, want errVolumesNotReady", res.Err)
	}
	if got, want := rec.find("FailedMount"), `MountVolume.SetUp failed for volume "later" : configmap "later" not found`; got != want {
		t.Errorf("FailedMount event %q, want %q", got, want)
	}
	if st := n.status(t, pod.UID); st != nil {
		t.Errorf("the runtime holds the pod (%d sandboxes) before its volumes are ready", len(st.Sandboxes))
	}
	ps := n.podStatus(n.m, pod, nil, time.Now())
	if w := ps.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Errorf("container state %+v, want waiting ContainerCreating", ps.ContainerStatuses[0].State)
	}
	if _, err := client.CoreV1().ConfigMaps("ns").Create(t.Context(), &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "later"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.runUntil(t, pod, "Running", running1)
	if err := n.m.KillPod(t.Context(), pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// eventLog is a recorder that keeps the events' reasons and messages.
type eventLog struct {
	mu     sync.Mutex
	events [][2]string
}

func (r *eventLog) Event(_ runtime.Object, _, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, [2]string{reason, message})
}

func (r *eventLog) Eventf(o runtime.Object, typ, reason, format string, args ...any) {
	r.Event(o, typ, reason, fmt.Sprintf(format, args...))
}

func (r *eventLog) AnnotatedEventf(o runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Event(o, typ, reason, fmt.Sprintf(format, args...))
}

// find returns the message of the first event with reason.
func (r *eventLog) find(reason string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e[0] == reason {
			return e[1]
		}
	}
	return ""
}

// TestIntegrationBidirectionalEmptyDir: a privileged init container's
// tmpfs, mounted in an emptyDir it mounts with Bidirectional propagation,
// reaches the next container's plain and read-only mounts of the volume
// (writable there, the read-only mount not being recursive), and a third
// unmounts it; the pod succeeds and RemovePod leaves no mount behind (node
// e2e "Mount recursive read-only ... should accept non-recursive read-only
// mounts": the runtime refuses the propagation on a private mount, as this
// machine's root is).
func TestIntegrationBidirectionalEmptyDir(t *testing.T) {
	n := startNode(t)
	dirType := v1.HostPathDirectory
	bidi := v1.MountPropagationBidirectional
	privileged := &v1.SecurityContext{Privileged: ptrTo(true)}
	tools := v1.VolumeMount{Name: "tools", MountPath: "/tools", ReadOnly: true}
	pod := hostPod("bidi", "uid-bidi", func(p *v1.Pod) {
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.Volumes = []v1.Volume{
			{Name: "mnt", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}},
		}
		p.Spec.InitContainers = []v1.Container{
			{Name: "mount", Image: appImage, Command: []string{"/tools/probe", "mount-tmpfs", "/mnt/tmpfs"}, SecurityContext: privileged,
				VolumeMounts: []v1.VolumeMount{{Name: "mnt", MountPath: "/mnt", MountPropagation: &bidi}, tools}},
			{Name: "test", Image: appImage, Command: []string{"/tools/probe", "touch", "/mnt-ro/tmpfs/foo"},
				VolumeMounts: []v1.VolumeMount{{Name: "mnt", MountPath: "/mnt-ro", ReadOnly: true}, {Name: "mnt", MountPath: "/mnt-rw"}, tools}},
			{Name: "unmount", Image: appImage, Command: []string{"/tools/probe", "umount", "/mnt/tmpfs"}, SecurityContext: privileged,
				VolumeMounts: []v1.VolumeMount{{Name: "mnt", MountPath: "/mnt", MountPropagation: &bidi}, tools}},
		}
		p.Spec.Containers[0] = v1.Container{Name: "completion", Image: appImage, Args: []string{"exit", "0"}}
	})
	st := n.runUntil(t, pod, "Succeeded or Failed", func(st v1.PodStatus) bool {
		return st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed
	})
	if st.Phase != v1.PodSucceeded {
		b, _ := json.MarshalIndent(st.InitContainerStatuses, "", " ")
		t.Fatalf("phase %s, init containers %s", st.Phase, b)
	}
	// The tmpfs was the test container's: its file is not in the volume.
	vol := emptyDirPath(n.m.cfg.PodsDir, "uid-bidi", "mnt")
	if _, err := os.Stat(filepath.Join(vol, "tmpfs", "foo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("foo in the volume's own directory (the tmpfs did not hold it): %v", err)
	}
	if err := n.m.KillPod(t.Context(), pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
	if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(n.m.cfg.PodsDir)); err != nil || len(left) != 0 {
		t.Errorf("mounts left under the pods directory: %v %v", left, err)
	}
}
