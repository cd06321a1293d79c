// Package volumes fills the pod volumes whose content the node writes itself
// — configMap, secret, downwardAPI and projected (service-account tokens,
// ConfigMaps, Secrets, the downward API) — and resolves the container
// environment that reads ConfigMaps, Secrets and Services, as the kubelet
// does. Files are written atomically (a directory per version, swapped in
// through the ..data link) under <podsDir>/<uid>/volumes/kubernetes.io~<kind>/<name>;
// secret, projected and downwardAPI volumes are on a tmpfs of their own, as
// the kubelet keeps them in memory. Without an API server (Deps.API nil) only
// downwardAPI volumes and projections work; the others fail with a clear
// error.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// ErrNoAPIServer is the class of the errors of a volume or an environment
// variable that needs an API server on a node without one.
var ErrNoAPIServer = errors.New("a node without an API server does not have them")

// Directory names of the volume kinds under <podsDir>/<uid>/volumes, the
// kubelet's plugin names.
const (
	KindConfigMap   = "kubernetes.io~configmap"
	KindSecret      = "kubernetes.io~secret"
	KindProjected   = "kubernetes.io~projected"
	KindDownwardAPI = "kubernetes.io~downward-api"
)

// memoryKinds are the kinds kept on a tmpfs.
var memoryKinds = []string{KindSecret, KindProjected, KindDownwardAPI}

// Config is what the volumes need to know of the node.
type Config struct {
	// PodsDir is <rootDir>/pods, an absolute path.
	PodsDir string
	// MemoryCapacity is the node's memory in bytes, the largest tmpfs.
	MemoryCapacity int64
	// OnDisk keeps secret, projected and downwardAPI volumes on disk
	// instead of a tmpfs (for a node that may not mount).
	OnDisk bool
}

// Deps are the volumes' collaborators.
type Deps struct {
	// API reads ConfigMaps, Secrets and Services and mints tokens; nil on
	// a node without an API server.
	API API
	// Logger may be nil: slog.Default().
	Logger *slog.Logger
}

// Manager writes and removes the volumes of pods. Its methods may be called
// from any goroutine; calls for one pod must be serialised by the caller
// (the pod's worker).
type Manager struct {
	cfg    Config
	api    API
	log    *slog.Logger
	tokens *tokens // nil without an API

	envMu sync.Mutex // guards lastEnv
	// lastEnv is the last EnvObjects read per pod UID and container name,
	// for when the API fails; TearDown drops a pod's.
	lastEnv map[types.UID]map[string]*EnvObjects
}

// New returns a Manager. It checks cfg; it makes no API call.
func New(cfg Config, deps Deps) (*Manager, error) {
	if !filepath.IsAbs(cfg.PodsDir) {
		return nil, fmt.Errorf("volumes: Config.PodsDir %q is not an absolute path", cfg.PodsDir)
	}
	if cfg.MemoryCapacity <= 0 {
		return nil, fmt.Errorf("volumes: Config.MemoryCapacity %d is not positive", cfg.MemoryCapacity)
	}
	m := &Manager{cfg: cfg, api: deps.API, log: deps.Logger, lastEnv: map[types.UID]map[string]*EnvObjects{}}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.log = m.log.With("subsystem", "volumes")
	if m.api != nil {
		m.tokens = newTokens(m.api, m.log)
	}
	return m, nil
}

// kindOf is the directory kind of v, "" for a volume this package does not
// write.
func kindOf(v *v1.Volume) string {
	switch {
	case v.ConfigMap != nil:
		return KindConfigMap
	case v.Secret != nil:
		return KindSecret
	case v.Projected != nil:
		return KindProjected
	case v.DownwardAPI != nil:
		return KindDownwardAPI
	}
	return ""
}

// Handles reports whether v is a volume this package writes.
func Handles(v *v1.Volume) bool { return kindOf(v) != "" }

// dir is the host directory of the pod's volume v of kind.
func (m *Manager) dir(uid types.UID, kind, name string) string {
	return filepath.Join(m.cfg.PodsDir, string(uid), "volumes", kind, name)
}

// HostPath returns the host directory of the pod's volume v when v is a
// volume this package writes and SetUp has written it at least once.
func (m *Manager) HostPath(pod *v1.Pod, v *v1.Volume) (path string, ready bool) {
	kind := kindOf(v)
	if kind == "" {
		return "", false
	}
	dir := m.dir(pod.UID, kind, v.Name)
	if _, err := os.Readlink(filepath.Join(dir, dataLink)); err != nil {
		return dir, false
	}
	return dir, true
}

// SetUpError is a volume SetUp could not write.
type SetUpError struct {
	// Volume is the volume's name.
	Volume string
	// Ready is whether an earlier content of the volume is in place (a
	// failed refresh rather than a volume never written).
	Ready bool
	Err   error
}

// Error is the kubelet's FailedMount message.
func (e *SetUpError) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.Volume, e.Err)
}

func (e *SetUpError) Unwrap() error { return e.Err }

// SetUp writes (or refreshes) every configMap, secret, downwardAPI and
// projected volume of pod from the API's objects now, res resolving the
// downward API's resourceFieldRefs. A volume whose content did not change is
// left alone. It returns the volumes it could not write; the others are
// written all the same.
func (m *Manager) SetUp(ctx context.Context, pod *v1.Pod, res ResourceValue) []*SetUpError {
	var failed []*SetUpError
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		kind := kindOf(v)
		if kind == "" {
			continue
		}
		if err := m.setUp(ctx, pod, v, kind, res); err != nil {
			_, ready := m.HostPath(pod, v)
			failed = append(failed, &SetUpError{Volume: v.Name, Ready: ready, Err: err})
		}
	}
	return failed
}

// setUp writes one volume.
func (m *Manager) setUp(ctx context.Context, pod *v1.Pod, v *v1.Volume, kind string, res ResourceValue) error {
	payload, err := m.payload(ctx, pod, v, res)
	if err != nil {
		return err
	}
	dir := m.dir(pod.UID, kind, v.Name)
	// The parents as the kubelet's, 0750 (PodsDir/<uid> keeps other users
	// out); the volume's own directory is set below.
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if !m.cfg.OnDisk && kind != KindConfigMap {
		if err := mountTmpfs(dir, nodeapi.TmpfsSize(pod, nil, m.cfg.MemoryCapacity)); err != nil {
			return err
		}
	}
	var gid *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		gid = sc.FSGroup
	}
	changed, err := writeAtomic(dir, payload, gid, time.Now())
	if err != nil {
		return fmt.Errorf("write volume %q: %w", v.Name, err)
	}
	if err := setRoot(dir, gid); err != nil {
		return fmt.Errorf("volume %q: %w", v.Name, err)
	}
	if changed {
		m.log.Debug("volume written", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "volume", v.Name)
	}
	return nil
}

// setRoot gives a written volume's directory the mode the kubelet leaves it
// with, 0777, and with an fsGroup gid also that group and the set-group-ID
// bit, and the group to the links in it (the payload directory has had its
// own from writeAtomic).
func setRoot(dir string, gid *int64) error {
	want := fs.FileMode(0o777)
	if gid != nil {
		want |= fs.ModeSetgid
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			if err := os.Lchown(filepath.Join(dir, e.Name()), -1, int(*gid)); err != nil {
				return fmt.Errorf("chown %s: %w", e.Name(), err)
			}
		}
		if err := os.Lchown(dir, -1, int(*gid)); err != nil {
			return fmt.Errorf("chown volume directory: %w", err)
		}
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if info.Mode()&(fs.ModePerm|fs.ModeSetgid) == want {
		return nil
	}
	return os.Chmod(dir, want)
}

// noAPI is the error of a volume that needs an API server on a node
// without one.
func noAPI(what string) error {
	return fmt.Errorf("%s: %w", what, ErrNoAPIServer)
}

// payload fetches what volume v shows and builds its files.
func (m *Manager) payload(ctx context.Context, pod *v1.Pod, v *v1.Volume, res ResourceValue) (Payload, error) {
	switch {
	case v.ConfigMap != nil:
		src := v.ConfigMap
		cm, err := m.configMap(ctx, pod.Namespace, src.Name, src.Optional)
		if err != nil {
			return nil, err
		}
		return configMapPayload(cm, src.Items, src.DefaultMode, isTrue(src.Optional))
	case v.Secret != nil:
		src := v.Secret
		s, err := m.secret(ctx, pod.Namespace, src.SecretName, src.Optional)
		if err != nil {
			return nil, err
		}
		return secretPayload(s, src.Items, src.DefaultMode, isTrue(src.Optional))
	case v.DownwardAPI != nil:
		return downwardPayload(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode, res)
	case v.Projected != nil:
		return m.projectedPayload(ctx, pod, v.Projected, res)
	}
	return nil, fmt.Errorf("volume %q is not a kind this node writes", v.Name)
}

// projectedPayload builds a projected volume's files, source by source (a
// later source's file replaces an earlier one's at the same path). The
// errors of all sources are reported together.
func (m *Manager) projectedPayload(ctx context.Context, pod *v1.Pod, src *v1.ProjectedVolumeSource, res ResourceValue) (Payload, error) {
	out := Payload{}
	var errs []error
	add := func(p Payload, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for k, f := range p {
			out[k] = f
		}
	}
	fsUser := fsUserOf(pod)
	var fsGroup *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		fsGroup = sc.FSGroup
	}
	for _, s := range src.Sources {
		switch {
		case s.ConfigMap != nil:
			cm, err := m.configMap(ctx, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			add(configMapPayload(cm, s.ConfigMap.Items, src.DefaultMode, isTrue(s.ConfigMap.Optional)))
		case s.Secret != nil:
			sec, err := m.secret(ctx, pod.Namespace, s.Secret.Name, s.Secret.Optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			add(secretPayload(sec, s.Secret.Items, src.DefaultMode, isTrue(s.Secret.Optional)))
		case s.DownwardAPI != nil:
			add(downwardPayload(pod, s.DownwardAPI.Items, src.DefaultMode, res))
		case s.ServiceAccountToken != nil:
			add(m.tokenPayload(ctx, pod, s.ServiceAccountToken, src.DefaultMode, fsUser, fsGroup))
		case s.ClusterTrustBundle != nil:
			errs = append(errs, errors.New("clusterTrustBundle projections are not supported by this node"))
		case s.PodCertificate != nil:
			errs = append(errs, errors.New("podCertificate projections are not supported by this node"))
		}
	}
	return out, utilerrors.NewAggregate(errs)
}

// tokenPayload is a serviceAccountToken projection: a token for the pod's
// service account bound to the pod, readable only by its owner when the pod
// has a common runAsUser or an fsGroup (which then adds the group).
func (m *Manager) tokenPayload(ctx context.Context, pod *v1.Pod, tp *v1.ServiceAccountTokenProjection, mode *int32, fsUser, fsGroup *int64) (Payload, error) {
	if m.tokens == nil {
		return nil, noAPI("serviceAccountToken projections need tokens from the API server")
	}
	var auds []string
	if tp.Audience != "" {
		auds = []string{tp.Audience}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         auds,
		ExpirationSeconds: tp.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := m.tokens.get(ctx, pod.Namespace, sa, req)
	if err != nil {
		return nil, err
	}
	fm := modeOf(nil, mode)
	if fsUser != nil || fsGroup != nil {
		fm = 0o600
	}
	return Payload{tp.Path: {Data: []byte(tr.Status.Token), Mode: fm, UID: fsUser}}, nil
}

// configMap fetches a ConfigMap; a missing optional one is nil.
func (m *Manager) configMap(ctx context.Context, ns, name string, optional *bool) (*v1.ConfigMap, error) {
	if m.api == nil {
		return nil, noAPI("configMap volumes need ConfigMaps")
	}
	cm, err := m.api.GetConfigMap(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) && isTrue(optional) {
			return nil, nil
		}
		return nil, err
	}
	return cm, nil
}

// secret fetches a Secret; a missing optional one is nil.
func (m *Manager) secret(ctx context.Context, ns, name string, optional *bool) (*v1.Secret, error) {
	if m.api == nil {
		return nil, noAPI("secret volumes need Secrets")
	}
	s, err := m.api.GetSecret(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) && isTrue(optional) {
			return nil, nil
		}
		return nil, err
	}
	return s, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// fsUserOf is the user every container of the pod runs as, when they all
// set the same one (their own runAsUser or the pod's); nil otherwise.
func fsUserOf(pod *v1.Pod) *int64 {
	var user *int64
	var podUser *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		podUser = sc.RunAsUser
	}
	all := make([]v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	all = append(append(all, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		u := podUser
		if sc := all[i].SecurityContext; sc != nil && sc.RunAsUser != nil {
			u = sc.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			return nil
		}
		user = u
	}
	return user
}

// TearDown unmounts the pod's tmpfs volumes and forgets its tokens and
// environment objects. The files stay for the caller to remove with the
// pod's directory. It is idempotent.
func (m *Manager) TearDown(uid types.UID) error {
	if m.tokens != nil {
		m.tokens.forget(uid)
	}
	m.envMu.Lock()
	delete(m.lastEnv, uid)
	m.envMu.Unlock()
	var errs []error
	for _, kind := range memoryKinds {
		base := filepath.Join(m.cfg.PodsDir, string(uid), "volumes", kind)
		entries, err := os.ReadDir(base)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			errs = append(errs, unmountIfMounted(filepath.Join(base, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// mountTmpfs mounts a tmpfs of size bytes on dir unless dir is a mount
// point already.
func mountTmpfs(dir string, size int64) error {
	mounted, err := isMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	opts := fmt.Sprintf("mode=0777,size=%d", size)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is on another device than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := syscall.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// unmountIfMounted unmounts dir if something is mounted on it.
func unmountIfMounted(dir string) error {
	if mounted, err := isMountPoint(dir); err != nil || !mounted {
		return nil
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}
