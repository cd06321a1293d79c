package podruntime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// containerInput is what a container's config is built from: criconfig's
// pure input and what the host side of it needs.
type containerInput struct {
	criconfig.Input
	podsDir string
	// termLog is the host file mounted at the termination message path; ""
	// makes one under podsDir.
	termLog string
	// hostsFile is the host's hosts file, the base of a host-network pod's.
	hostsFile string
	// clusterDomain is the kubelet's clusterDomain, in the FQDN the hosts
	// file gives a pod with a subdomain.
	clusterDomain string
	// volumes gives the host directories of the volumes the node writes
	// (configMap, secret, downwardAPI, projected); nil: none are set up.
	volumes volumePaths
	// supportsRRO: the runtime supports recursive read-only mounts.
	supportsRRO bool
}

// volumePaths finds the host directory of a volume the node writes;
// *volumes.Manager implements it.
type volumePaths interface {
	// HostPath returns the volume's directory and whether it has been
	// written.
	HostPath(pod *v1.Pod, v *v1.Volume) (path string, ready bool)
}

// containerConfig builds the CRI ContainerConfig of in.Container: it reads
// the env files its fileKeyRefs name, resolves its environment
// (criconfig.Env), makes the host directories and files its mounts need
// (emptyDir, hostPath with a *OrCreate type, subpaths, the hosts file, the
// termination log) and builds the config (criconfig.Container).
func containerConfig(in containerInput) (*runtimeapi.ContainerConfig, error) {
	in.EnvFiles = readEnvFiles(in.podsDir, in.Pod, in.Container)
	env, err := criconfig.Env(in.Input)
	if err != nil {
		return nil, err
	}
	mounts, err := containerMounts(in, criconfig.Vars(env))
	if err != nil {
		return nil, err
	}
	return criconfig.Container(in.Input, env, mounts)
}

// readEnvFiles reads the env files c's fileKeyRefs name in pod's emptyDir
// volumes (an init container wrote them); a reference criconfig refuses is
// not read (criconfig.Env reports it).
func readEnvFiles(podsDir string, pod *v1.Pod, c *v1.Container) map[criconfig.EnvFileRef]criconfig.EnvFile {
	var out map[criconfig.EnvFileRef]criconfig.EnvFile
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FileKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.FileKeyRef
		key := criconfig.EnvFileRef{Volume: ref.VolumeName, Path: ref.Path}
		if _, done := out[key]; done || criconfig.CheckEnvFileRef(pod, ref) != nil {
			continue
		}
		var f criconfig.EnvFile
		b, err := os.ReadFile(filepath.Join(emptyDirPath(podsDir, string(pod.UID), ref.VolumeName), ref.Path))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			f.Missing = true
		case err != nil:
			f.Err = err
		default:
			f.Content = string(b)
		}
		if out == nil {
			out = map[criconfig.EnvFileRef]criconfig.EnvFile{}
		}
		out[key] = f
	}
	return out
}

// emptyDirPath is the host directory of the pod's emptyDir volume name.
func emptyDirPath(podsDir, uid, name string) string {
	return filepath.Join(podsDir, uid, "volumes", "kubernetes.io~empty-dir", name)
}

// containerMounts are the container's volume mounts, hosts file and
// termination log; vars is the container's environment, which subPathExpr
// reads.
func containerMounts(in containerInput, vars map[string]string) ([]*runtimeapi.Mount, error) {
	pod, c := in.Pod, in.Container
	vols := map[string]*v1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var out []*runtimeapi.Mount
	for i, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("container %q: volumeMounts[%d]: no volume %q in the pod", c.Name, i, vm.Name)
		}
		m, err := volumeMount(in, i, vm, v, vars)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if hosts, err := etcHostsMount(in, out); err != nil {
		return nil, err
	} else if hosts != nil {
		out = append(out, hosts)
	}
	host := in.termLog
	if host == "" {
		var err error
		if host, err = newTerminationLog(in.podsDir, string(pod.UID), c.Name); err != nil {
			return nil, err
		}
	}
	out = append(out, &runtimeapi.Mount{ContainerPath: criconfig.TerminationMessagePath(c), HostPath: host})
	return out, nil
}

// volumeMount is the container's volumeMounts[i] of volume v: its host
// path made or checked, its subpath made and bound.
func volumeMount(in containerInput, i int, vm v1.VolumeMount, v *v1.Volume, vars map[string]string) (*runtimeapi.Mount, error) {
	pod, c := in.Pod, in.Container
	rro, err := podstatus.RecursiveReadOnly(vm, in.supportsRRO)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
	}
	var host string
	readOnly := vm.ReadOnly
	if volumes.Handles(v) {
		// The node writes these; containers only read them.
		var ready bool
		if in.volumes != nil {
			host, ready = in.volumes.HostPath(pod, v)
		}
		if !ready {
			return nil, fmt.Errorf("container %q: volume %q is not set up", c.Name, v.Name)
		}
		readOnly = true
	} else if host, err = volumeHostPath(in.podsDir, pod, v, in.MemoryCapacity); err != nil {
		return nil, fmt.Errorf("container %q: volume %q: %w", c.Name, v.Name, err)
	}
	sub, written, err := criconfig.SubPath(vm, vars)
	if err != nil {
		return nil, fmt.Errorf("container %q: volumeMounts[%d].%w", c.Name, i, err)
	}
	if sub != "" {
		if host, err = bindSubPath(in, i, v, host, sub, written); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host, Readonly: readOnly, RecursiveReadOnly: rro,
		Propagation: criconfig.MountPropagation(vm.MountPropagation)}, nil
}

// bindSubPath makes the subpath sub (spec names it as written) of volume v
// at root, when the node does not write the volume, and returns the bind
// mount's source.
func bindSubPath(in containerInput, i int, v *v1.Volume, root, sub, written string) (string, error) {
	c := in.Container
	if _, err := os.Lstat(filepath.Join(root, sub)); os.IsNotExist(err) {
		if volumes.Handles(v) {
			return "", fmt.Errorf("container %q: volumeMounts[%d].subPath %q is not in volume %q", c.Name, i, written, v.Name)
		}
		if err := makeSubPath(root, sub); err != nil {
			return "", fmt.Errorf("container %q: volumeMounts[%d]: %w", c.Name, i, err)
		}
	}
	host, err := prepareSubPath(in.podsDir, string(in.Pod.UID), v.Name, c.Name, i, root, sub)
	if err != nil {
		return "", fmt.Errorf("container %q: volumeMounts[%d]: %w", c.Name, i, err)
	}
	return host, nil
}

// newTerminationLog makes an empty file PodsDir/<uid>/containers/<name>/<id>,
// mode 0666, for the container's termination message.
func newTerminationLog(podsDir, uid, name string) (string, error) {
	dir := filepath.Join(podsDir, uid, "containers", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	path := filepath.Join(dir, hex.EncodeToString(id[:]))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
	if err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	// Writable by the container whatever its user, as the kubelet makes it
	// (the umask took group and other write off).
	return path, os.Chmod(path, 0o666)
}

// volumeHostPath is the host path of volume v, made or checked as its type
// asks.
func volumeHostPath(podsDir string, pod *v1.Pod, v *v1.Volume, memCapacity int64) (string, error) {
	switch {
	case v.EmptyDir != nil:
		dir := emptyDirPath(podsDir, string(pod.UID), v.Name)
		var size int64
		if v.EmptyDir.Medium == v1.StorageMediumMemory {
			size = nodeapi.TmpfsSize(pod, v.EmptyDir.SizeLimit, memCapacity)
		}
		var fsGroup *int64
		if sc := pod.Spec.SecurityContext; sc != nil {
			fsGroup = sc.FSGroup
		}
		return dir, setUpEmptyDir(dir, v.EmptyDir.Medium == v1.StorageMediumMemory, size, fsGroup, propagates(pod, v.Name))
	case v.HostPath != nil:
		return v.HostPath.Path, checkHostPath(v.HostPath)
	}
	return "", fmt.Errorf("only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported")
}

// propagates reports whether a container of pod mounts volume name with
// mount propagation (HostToContainer or Bidirectional).
func propagates(pod *v1.Pod, name string) bool {
	for _, c := range criconfig.AllContainers(pod) {
		for _, vm := range c.VolumeMounts {
			if vm.Name == name && vm.MountPropagation != nil && *vm.MountPropagation != v1.MountPropagationNone {
				return true
			}
		}
	}
	return false
}

// checkHostPath checks (or, for the *OrCreate types, makes) a hostPath
// volume's path by its type.
func checkHostPath(hp *v1.HostPathVolumeSource) error {
	typ := v1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}
	st, err := os.Stat(hp.Path)
	exists := err == nil
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if typ == v1.HostPathUnset {
		return nil
	}
	what, is, known := hostPathKind(typ)
	switch {
	case !known:
		return fmt.Errorf("hostPath type %q is not a known type", typ)
	case exists && !is(st.Mode()):
		return fmt.Errorf("hostPath type %s: %s is not a %s", typ, hp.Path, what)
	case exists:
		return nil
	case typ == v1.HostPathDirectoryOrCreate:
		return os.MkdirAll(hp.Path, 0o755)
	case typ == v1.HostPathFileOrCreate:
		f, err := os.OpenFile(hp.Path, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("hostPath type %s: %w", typ, err)
		}
		return f.Close()
	}
	return fmt.Errorf("hostPath type %s: %s does not exist", typ, hp.Path)
}

// hostPathKind is the kind of file a hostPath type asks for: its name and
// the check of a file's mode; known is false for a type the API does not
// have.
func hostPathKind(typ v1.HostPathType) (what string, is func(fs.FileMode) bool, known bool) {
	switch typ {
	case v1.HostPathDirectoryOrCreate, v1.HostPathDirectory:
		return "directory", fs.FileMode.IsDir, true
	case v1.HostPathFileOrCreate, v1.HostPathFile:
		return "file", fs.FileMode.IsRegular, true
	case v1.HostPathSocket:
		return "socket", func(m fs.FileMode) bool { return m&fs.ModeSocket != 0 }, true
	case v1.HostPathCharDev:
		return "character device", func(m fs.FileMode) bool { return m&fs.ModeCharDevice != 0 }, true
	case v1.HostPathBlockDev:
		return "block device", func(m fs.FileMode) bool { return m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0 }, true
	}
	return "", nil, false
}

// etcHostsPath is the pod's managed hosts file.
func etcHostsPath(podsDir, uid string) string {
	return filepath.Join(podsDir, uid, "etc-hosts")
}

// etcHostsMount writes the pod's hosts file (criconfig.HostsFile) and
// returns its mount at /etc/hosts, as the kubelet manages it. It returns nil
// when the pod has no IP yet or the container mounts /etc/hosts itself.
func etcHostsMount(in containerInput, mounts []*runtimeapi.Mount) (*runtimeapi.Mount, error) {
	ips := in.IPs()
	if len(ips) == 0 {
		return nil, nil
	}
	for _, m := range mounts {
		if m.ContainerPath == "/etc/hosts" {
			return nil, nil
		}
	}
	var host []byte
	if in.Pod.Spec.HostNetwork {
		var err error
		if host, err = os.ReadFile(in.hostsFile); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("read host hosts file: %w", err)
		}
	}
	content, err := criconfig.HostsFile(in.Pod, ips, host, in.clusterDomain)
	if err != nil {
		return nil, err
	}
	path := etcHostsPath(in.podsDir, string(in.Pod.UID))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return nil, err
	}
	return &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: path}, nil
}
