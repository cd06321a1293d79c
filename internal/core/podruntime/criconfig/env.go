package criconfig

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// EnvSources are the API objects a container's environment reads, as the
// pod runtime fetched them (the same fields as volumes.EnvObjects, which
// converts to it).
type EnvSources struct {
	// ConfigMaps are the ConfigMaps the container refers to, by name; one
	// that does not exist is absent.
	ConfigMaps map[string]*v1.ConfigMap
	// Secrets are the Secrets the container refers to, by name; one that
	// does not exist is absent.
	Secrets map[string]*v1.Secret
	// ServiceEnv are the service variables the container gets
	// (KUBERNETES_SERVICE_HOST, ...), by name.
	ServiceEnv map[string]string
}

// EnvFileRef names an env file a fileKeyRef reads: a path in an emptyDir
// volume of the pod.
type EnvFileRef struct {
	Volume, Path string
}

// EnvFile is an env file as the pod runtime read it from the volume: its
// content, or that it does not exist (Missing), or the error that stopped
// the read. A fileKeyRef whose file has no entry reads as missing.
type EnvFile struct {
	Content string
	Missing bool
	Err     error
}

// CheckEnvFileRef checks that a fileKeyRef names a file inside an emptyDir
// volume of pod, so the pod runtime may read it.
func CheckEnvFileRef(pod *v1.Pod, ref *v1.FileKeySelector) error {
	i := slices.IndexFunc(pod.Spec.Volumes, func(v v1.Volume) bool { return v.Name == ref.VolumeName })
	if i < 0 || pod.Spec.Volumes[i].EmptyDir == nil {
		return fmt.Errorf("fileKeyRef volume %q: not an emptyDir volume of the pod", ref.VolumeName)
	}
	if filepath.IsAbs(ref.Path) || !filepath.IsLocal(ref.Path) {
		return fmt.Errorf("fileKeyRef path %q: want a relative path inside the volume", ref.Path)
	}
	return nil
}

// noAPIServer is the tail of the error of an env source that needs an API
// server on a node without one.
const noAPIServer = "which a node without an API server does not have"

// envList is an environment under construction: a later definition of a
// name replaces the value in the name's first place.
type envList struct {
	out     []*runtimeapi.KeyValue
	index   map[string]int
	defined map[string]string
}

func (l *envList) set(name, val string) {
	l.defined[name] = val
	if j, ok := l.index[name]; ok {
		l.out[j].Value = []byte(val)
		return
	}
	l.index[name] = len(l.out)
	l.out = append(l.out, &runtimeapi.KeyValue{Key: name, Value: []byte(val)})
}

// Env is the container's environment: the envFrom sources' keys first
// (each with its prefix, a later source replacing an earlier one's value),
// then env in spec order, each value with $(NAME) references to the names
// before it and to the service variables expanded, valueFrom resolved
// through the downward API, ConfigMaps, Secrets and env files, and last the
// service variables (in name order) whose names nothing else defined. A
// missing ConfigMap, Secret, file or key fails the container with the
// kubelet's message, unless the reference is optional, which skips it.
func Env(in Input) ([]*runtimeapi.KeyValue, error) {
	l := &envList{index: map[string]int{}, defined: map[string]string{}}
	if err := envFrom(in, l); err != nil {
		return nil, err
	}
	var services map[string]string
	if in.Sources != nil {
		services = in.Sources.ServiceEnv
	}
	lookup := func(name string) (string, bool) {
		if v, ok := l.defined[name]; ok {
			return v, true
		}
		v, ok := services[name]
		return v, ok
	}
	for i := range in.Container.Env {
		e := &in.Container.Env[i]
		val, ok, err := envValue(in, e, lookup)
		var asIs unwrapped
		if errors.As(err, &asIs) {
			return nil, asIs.error
		}
		if err != nil {
			return nil, fmt.Errorf("container %q: env[%d] %s: %w", in.Container.Name, i, e.Name, err)
		}
		if ok {
			l.set(e.Name, val)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(services)) {
		if _, ok := l.defined[k]; !ok {
			l.out = append(l.out, &runtimeapi.KeyValue{Key: k, Value: []byte(services[k])})
		}
	}
	return l.out, nil
}

// envFrom sets the keys of the container's envFrom sources in l.
func envFrom(in Input, l *envList) error {
	c := in.Container
	for _, from := range c.EnvFrom {
		if in.Sources == nil {
			return fmt.Errorf("container %q: envFrom needs ConfigMaps or Secrets, %s", c.Name, noAPIServer)
		}
		data, ok, err := envFromData(in.Sources, from)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			l.set(from.Prefix+k, data[k])
		}
	}
	return nil
}

// envFromData is the data of one envFrom source; ok is false for an
// optional source that does not exist.
func envFromData(src *EnvSources, from v1.EnvFromSource) (data map[string]string, ok bool, err error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, found := src.ConfigMaps[from.ConfigMapRef.Name]
		if !found {
			return nil, false, missing(from.ConfigMapRef.Optional, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name))
		}
		return cm.Data, true, nil
	case from.SecretRef != nil:
		s, found := src.Secrets[from.SecretRef.Name]
		if !found {
			return nil, false, missing(from.SecretRef.Optional, fmt.Errorf("secret %q not found", from.SecretRef.Name))
		}
		data = make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			data[k] = string(v)
		}
		return data, true, nil
	}
	return nil, true, nil
}

// missing is err, or nil when the reference is optional (it is skipped).
func missing(optional *bool, err error) error {
	if optional != nil && *optional {
		return nil
	}
	return err
}

// envValue is the value of env var e; ok is false for an optional
// reference to something missing, which sets nothing. Errors not of the
// ConfigMap or Secret lookups are wrapped by the caller with the variable.
func envValue(in Input, e *v1.EnvVar, lookup func(string) (string, bool)) (val string, ok bool, err error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return nodeapi.ExpandVars(e.Value, lookup), true, nil
	case from.FieldRef != nil:
		v, err := nodeapi.FieldRefValue(in.Pod, from.FieldRef.FieldPath, nodeapi.FieldInEnv,
			nodeapi.PodFacts{NodeName: in.NodeName, HostIP: in.HostIP, PodIPs: in.IPs()})
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := nodeapi.ResourceFieldValue(in.Pod, in.Container, from.ResourceFieldRef, NodeLimits(in.CPUs, in.MemoryCapacity))
		return v, err == nil, err
	case from.FileKeyRef != nil:
		return fileKeyValue(in, from.FileKeyRef)
	case in.Sources == nil:
		return "", false, fmt.Errorf("valueFrom needs ConfigMaps or Secrets, %s", noAPIServer)
	case from.ConfigMapKeyRef != nil:
		return configMapKey(in, from.ConfigMapKeyRef)
	case from.SecretKeyRef != nil:
		return secretKey(in, from.SecretKeyRef)
	}
	return "", false, fmt.Errorf("this valueFrom source is not supported")
}

// unwrapped marks an error Env returns as it is, not wrapped with the
// variable (the kubelet's messages for ConfigMap and Secret references).
type unwrapped struct{ error }

// configMapKey is a configMapKeyRef's value.
func configMapKey(in Input, ref *v1.ConfigMapKeySelector) (string, bool, error) {
	cm, ok := in.Sources.ConfigMaps[ref.Name]
	if !ok {
		return "", false, asIs(missing(ref.Optional, fmt.Errorf("configmap %q not found", ref.Name)))
	}
	v, ok := cm.Data[ref.Key]
	if !ok {
		return "", false, asIs(missing(ref.Optional, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, in.Pod.Namespace, ref.Name)))
	}
	return v, true, nil
}

// secretKey is a secretKeyRef's value.
func secretKey(in Input, ref *v1.SecretKeySelector) (string, bool, error) {
	s, ok := in.Sources.Secrets[ref.Name]
	if !ok {
		return "", false, asIs(missing(ref.Optional, fmt.Errorf("secret %q not found", ref.Name)))
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return "", false, asIs(missing(ref.Optional, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, in.Pod.Namespace, ref.Name)))
	}
	return string(v), true, nil
}

func asIs(err error) error {
	if err == nil {
		return nil
	}
	return unwrapped{err}
}

// fileKeyValue is a fileKeyRef's value from the env file the pod runtime
// read (the EnvFiles feature: an init container writes the file into an
// emptyDir volume).
func fileKeyValue(in Input, ref *v1.FileKeySelector) (string, bool, error) {
	if err := CheckEnvFileRef(in.Pod, ref); err != nil {
		return "", false, err
	}
	f, ok := in.EnvFiles[EnvFileRef{Volume: ref.VolumeName, Path: ref.Path}]
	if f.Err != nil {
		return "", false, f.Err
	}
	var v string
	if ok && !f.Missing {
		env, err := parseEnvFile(f.Content)
		if err != nil {
			return "", false, fmt.Errorf("env file %s of volume %s: %w", ref.Path, ref.VolumeName, err)
		}
		v, ok = env[ref.Key]
	} else {
		ok = false
	}
	if !ok {
		return "", false, missing(ref.Optional, fmt.Errorf("key %s not found in env file %s of volume %s", ref.Key, ref.Path, ref.VolumeName))
	}
	return v, true, nil
}

// parseEnvFile parses KEY=VALUE lines: blank lines and lines starting with
// '#' are skipped, space around the key and value is trimmed, and a value in
// single or double quotes loses them.
func parseEnvFile(s string) (map[string]string, error) {
	env := map[string]string{}
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=VALUE, got %q", n+1, line)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	return env, nil
}

// NodeLimits are what a resourceFieldRef reads for an absent limit: the
// node's cpus and memory (bytes).
func NodeLimits(cpus int, memory int64) v1.ResourceList {
	return v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(cpus), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
	}
}

// Vars is env as a map, for $(NAME) references (a later value of a name
// wins).
func Vars(env []*runtimeapi.KeyValue) map[string]string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		vars[kv.Key] = string(kv.Value)
	}
	return vars
}

func mapVars(m map[string]string) func(string) (string, bool) {
	return func(n string) (string, bool) { v, ok := m[n]; return v, ok }
}
