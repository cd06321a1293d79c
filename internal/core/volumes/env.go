package volumes

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// EnvObjects are the API objects one container's environment reads, fetched
// together right before the container is created.
type EnvObjects struct {
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

// EnvObjects fetches what container c of pod reads into its environment:
// the ConfigMaps and Secrets of its envFrom and valueFrom, the `kubernetes`
// Service of the default namespace and, when the pod's enableServiceLinks
// is not false, the Services of its namespace. It returns nil, nil on a
// node without an API server.
//
// When the API fails (other than NotFound) and an earlier call for the same
// pod and container succeeded, that call's objects are returned and the
// failure logged, so a container restarts while the API server is away, as
// the kubelet's caches let it.
func (m *Manager) EnvObjects(ctx context.Context, pod *v1.Pod, c *v1.Container) (*EnvObjects, error) {
	if m.api == nil {
		return nil, nil
	}
	out, err := m.fetchEnv(ctx, pod, c)
	m.envMu.Lock()
	defer m.envMu.Unlock()
	if err != nil {
		if last := m.lastEnv[pod.UID][c.Name]; last != nil {
			m.log.Warn("reading the container environment's objects failed; using the last ones read",
				"pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "containerName", c.Name, "err", err)
			return last, nil
		}
		return nil, err
	}
	if m.lastEnv[pod.UID] == nil {
		m.lastEnv[pod.UID] = map[string]*EnvObjects{}
	}
	m.lastEnv[pod.UID][c.Name] = out
	return out, nil
}

// fetchEnv reads what EnvObjects returns from the API.
func (m *Manager) fetchEnv(ctx context.Context, pod *v1.Pod, c *v1.Container) (*EnvObjects, error) {
	out := &EnvObjects{ConfigMaps: map[string]*v1.ConfigMap{}, Secrets: map[string]*v1.Secret{}}
	var cms, secrets []string
	for _, f := range c.EnvFrom {
		switch {
		case f.ConfigMapRef != nil:
			cms = append(cms, f.ConfigMapRef.Name)
		case f.SecretRef != nil:
			secrets = append(secrets, f.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.ConfigMapKeyRef != nil:
			cms = append(cms, e.ValueFrom.ConfigMapKeyRef.Name)
		case e.ValueFrom.SecretKeyRef != nil:
			secrets = append(secrets, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, name := range cms {
		if _, ok := out.ConfigMaps[name]; ok {
			continue
		}
		cm, err := m.api.GetConfigMap(ctx, pod.Namespace, name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			out.ConfigMaps[name] = cm
		}
	}
	for _, name := range secrets {
		if _, ok := out.Secrets[name]; ok {
			continue
		}
		s, err := m.api.GetSecret(ctx, pod.Namespace, name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			out.Secrets[name] = s
		}
	}
	services, err := m.services(ctx, pod)
	if err != nil {
		if !qos.IsStatic(pod) {
			return nil, err
		}
		// As the kubelet: a static pod does not wait for the API server;
		// it starts without the service variables it cannot read.
		m.log.Warn("static pod's container started without service variables", "pod", pod.Namespace+"/"+pod.Name,
			"containerName", c.Name, "err", err)
		services = nil
	}
	out.ServiceEnv = ServiceEnv(services, pod.Namespace, pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks)
	return out, nil
}

// services reads the Services whose variables a container of pod gets: the
// `kubernetes` Service of the default namespace and, with service links, the
// pod namespace's.
func (m *Manager) services(ctx context.Context, pod *v1.Pod) ([]v1.Service, error) {
	var services []v1.Service
	master, err := m.api.GetService(ctx, metav1.NamespaceDefault, "kubernetes")
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get the kubernetes service for the container environment: %w", err)
	default:
		services = append(services, *master)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		l, err := m.api.ListServices(ctx, pod.Namespace)
		if err != nil {
			return nil, fmt.Errorf("list the services of namespace %s for the container environment: %w", pod.Namespace, err)
		}
		services = append(services, l...)
	}
	return services, nil
}

// ServiceEnv are the service variables of a container in namespace ns, made
// from services as the kubelet makes them: always those of the `kubernetes`
// Service in the default namespace, and, when links is set, those of every
// Service of ns. A Service without a cluster IP gives none.
func ServiceEnv(services []v1.Service, ns string, links bool) map[string]string {
	chosen := map[string]*v1.Service{}
	for i := range services {
		s := &services[i]
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == v1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		switch {
		case s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes":
			if _, ok := chosen[s.Name]; !ok {
				chosen[s.Name] = s
			}
		case s.Namespace == ns && links:
			chosen[s.Name] = s // as in the kubelet, a namespace's own "kubernetes" service wins
		}
	}
	out := map[string]string{}
	for _, s := range chosen {
		serviceVars(s, out)
	}
	return out
}

// envName is a service or port name as a variable name.
func envName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// serviceVars adds service s's variables to out: NAME_SERVICE_HOST, the
// ports, and the Docker-link-style NAME_PORT variables.
func serviceVars(s *v1.Service, out map[string]string) {
	name := envName(s.Name)
	ip := s.Spec.ClusterIP
	out[name+"_SERVICE_HOST"] = ip
	out[name+"_SERVICE_PORT"] = strconv.Itoa(int(s.Spec.Ports[0].Port))
	for i, p := range s.Spec.Ports {
		port := strconv.Itoa(int(p.Port))
		if p.Name != "" {
			out[name+"_SERVICE_PORT_"+envName(p.Name)] = port
		}
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		url := proto + "://" + net.JoinHostPort(ip, port)
		if i == 0 {
			out[name+"_PORT"] = url
		}
		pre := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(proto))
		out[pre] = url
		out[pre+"_PROTO"] = proto
		out[pre+"_PORT"] = port
		out[pre+"_ADDR"] = ip
	}
}
