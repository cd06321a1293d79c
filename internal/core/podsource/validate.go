package podsource

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Validate checks a defaulted pod (SetDefaults) for what a node relies on,
// before it is made static for nodeName: names, container names and images,
// resource quantities, enums, ports, volumes (a hostPath absolute, without
// '..', of a known type) and their mounts (subPaths that stay in the
// volume), security contexts (user and group IDs, procMount, capability
// names, seccomp and AppArmor profiles), probes, and no references to API
// objects (which a static pod cannot have). It
// returns one error per problem, each naming the field path and the value;
// nil when the pod is valid.
func Validate(pod *v1.Pod, nodeName string) []error {
	var v validator
	v.meta(pod, nodeName)
	v.spec(&pod.Spec)
	v.apiReferences(&pod.Spec)
	return v.errs
}

// apiReferences rejects what a static pod cannot have without an API server,
// as the kubelet does (PreventStaticPodAPIReferences, on by default since
// 1.34): a service account, secrets, config maps, resource claims, and volumes
// backed by API objects.
func (v *validator) apiReferences(s *v1.PodSpec) {
	const why = "static pods may not reference %s"
	if s.ServiceAccountName != "" {
		v.add("spec.serviceAccountName", s.ServiceAccountName, why, "service accounts")
	}
	if len(s.ImagePullSecrets) > 0 {
		v.add("spec.imagePullSecrets[0].name", s.ImagePullSecrets[0].Name, why, "secrets")
	}
	if len(s.ResourceClaims) > 0 {
		v.add("spec.resourceClaims[0].name", s.ResourceClaims[0].Name, why, "resource claims")
	}
	for i, vol := range s.Volumes {
		path := fmt.Sprintf("spec.volumes[%d]", i)
		kind := ""
		switch {
		case vol.ConfigMap != nil:
			kind = "config maps"
		case vol.Secret != nil, vol.AzureFile != nil:
			kind = "secrets"
		case vol.CSI != nil:
			kind = "CSI drivers"
		case vol.Glusterfs != nil:
			kind = "endpoints"
		case vol.PersistentVolumeClaim != nil, vol.Ephemeral != nil:
			kind = "persistent volume claims"
		case vol.Projected != nil:
			for j, src := range vol.Projected.Sources {
				if src.DownwardAPI == nil {
					v.add(fmt.Sprintf("%s.projected.sources[%d]", path, j), vol.Name, why, "API objects other than the downward API")
				}
			}
		}
		if kind != "" {
			v.add(path, vol.Name, why, kind)
		}
	}
	for _, ct := range containersOf(s) {
		for i, e := range ct.c.Env {
			if vf := e.ValueFrom; vf != nil && vf.SecretKeyRef != nil {
				v.add(fmt.Sprintf("%s.env[%d].valueFrom.secretKeyRef", ct.path, i), vf.SecretKeyRef.Name, why, "secrets")
			} else if vf != nil && vf.ConfigMapKeyRef != nil {
				v.add(fmt.Sprintf("%s.env[%d].valueFrom.configMapKeyRef", ct.path, i), vf.ConfigMapKeyRef.Name, why, "config maps")
			}
		}
		for i, e := range ct.c.EnvFrom {
			if e.SecretRef != nil {
				v.add(fmt.Sprintf("%s.envFrom[%d].secretRef", ct.path, i), e.SecretRef.Name, why, "secrets")
			} else if e.ConfigMapRef != nil {
				v.add(fmt.Sprintf("%s.envFrom[%d].configMapRef", ct.path, i), e.ConfigMapRef.Name, why, "config maps")
			}
		}
	}
}

type validator struct{ errs []error }

func (v *validator) add(path string, value any, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s: %s", path, show(value), fmt.Sprintf(format, args...)))
}

func show(value any) string {
	switch x := value.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case fmt.Stringer:
		return fmt.Sprintf("%q", x.String())
	}
	return fmt.Sprint(value)
}

// dns adds an error for each message of a name check.
func (v *validator) dns(path, value string, msgs []string) {
	if len(msgs) > 0 {
		v.add(path, value, "%s", strings.Join(msgs, "; "))
	}
}

func (v *validator) meta(pod *v1.Pod, nodeName string) {
	if pod.Name == "" {
		v.errs = append(v.errs, errors.New("metadata.name: required"))
	} else {
		v.dns("metadata.name", pod.Name, validation.IsDNS1123Subdomain(pod.Name))
		static := staticName(pod.Name, nodeName)
		if len(static) > validation.DNS1123SubdomainMaxLength {
			v.add("metadata.name", pod.Name, "with the node name the static pod name %q is %d characters, more than %d",
				static, len(static), validation.DNS1123SubdomainMaxLength)
		}
	}
	if pod.Namespace != "" {
		v.dns("metadata.namespace", pod.Namespace, validation.IsDNS1123Label(pod.Namespace))
	}
}

func (v *validator) spec(s *v1.PodSpec) {
	switch s.RestartPolicy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	default:
		v.add("spec.restartPolicy", string(s.RestartPolicy), "want Always, OnFailure or Never")
	}
	switch s.DNSPolicy {
	case v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet, v1.DNSDefault, v1.DNSNone:
	default:
		v.add("spec.dnsPolicy", string(s.DNSPolicy), "want ClusterFirst, ClusterFirstWithHostNet, Default or None")
	}
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		v.add("spec.terminationGracePeriodSeconds", *g, "must not be negative")
	}
	if d := s.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		v.add("spec.activeDeadlineSeconds", *d, "must be positive")
	}
	if len(s.EphemeralContainers) > 0 {
		v.add("spec.ephemeralContainers", len(s.EphemeralContainers), "may not be set when a pod is created")
	}
	if len(s.Containers) == 0 {
		v.errs = append(v.errs, errors.New("spec.containers: required: a pod needs at least one container"))
	}
	for name, q := range s.Overhead {
		if q.Sign() < 0 {
			v.add("spec.overhead."+string(name), q.String(), "must not be negative")
		}
	}

	volumes := map[string]bool{}
	for i, vol := range s.Volumes {
		path := fmt.Sprintf("spec.volumes[%d].name", i)
		v.dns(path, vol.Name, validation.IsDNS1123Label(vol.Name))
		if volumes[vol.Name] {
			v.add(path, vol.Name, "duplicate volume name")
		}
		volumes[vol.Name] = true
		if ed := vol.EmptyDir; ed != nil && ed.SizeLimit != nil && ed.SizeLimit.Sign() < 0 {
			v.add(fmt.Sprintf("spec.volumes[%d].emptyDir.sizeLimit", i), ed.SizeLimit.String(), "must not be negative")
		}
		if hp := vol.HostPath; hp != nil {
			v.hostPath(fmt.Sprintf("spec.volumes[%d].hostPath", i), hp)
		}
	}
	v.podSecurityContext(s.SecurityContext)

	names := map[string]string{} // container name -> the path of the first container with it
	hostUsers := s.HostUsers == nil || *s.HostUsers
	for _, ct := range containersOf(s) {
		v.container(ct.path, ct.c, ct.init, s.HostNetwork, names, volumes)
		v.securityContext(ct.path+".securityContext", ct.c.SecurityContext, hostUsers)
	}
}

// hostPathTypes are the valid spec.volumes[*].hostPath.type values.
var hostPathTypes = []v1.HostPathType{v1.HostPathUnset, v1.HostPathDirectoryOrCreate, v1.HostPathDirectory,
	v1.HostPathFileOrCreate, v1.HostPathFile, v1.HostPathSocket, v1.HostPathCharDev, v1.HostPathBlockDev}

// hostPath checks a hostPath volume as the API server does (a path without
// '..' elements, a known type) and, as a node that resolves it on its own
// file system, that the path is absolute.
func (v *validator) hostPath(path string, hp *v1.HostPathVolumeSource) {
	switch {
	case hp.Path == "":
		v.add(path+".path", "", "required")
	case !strings.HasPrefix(hp.Path, "/"):
		v.add(path+".path", hp.Path, "must be an absolute path")
	case hasBackstep(hp.Path):
		v.add(path+".path", hp.Path, "must not contain '..'")
	}
	if t := hp.Type; t != nil && !slices.Contains(hostPathTypes, *t) {
		v.add(path+".type", string(*t), `want "", DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice or BlockDevice`)
	}
}

// hasBackstep reports whether p has a '..' element.
func hasBackstep(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// descendingPath checks a path that must stay below the directory it is
// taken in (a subPath, a localhost profile): relative, without '..'.
func (v *validator) descendingPath(path, p string) {
	switch {
	case strings.HasPrefix(p, "/"):
		v.add(path, p, "must be a relative path")
	case hasBackstep(p):
		v.add(path, p, "must not contain '..'")
	}
}

// ids checks user and group IDs: 0 to 2147483647, as the API server.
func (v *validator) ids(path string, uid, gid *int64) {
	if uid != nil {
		if msgs := validation.IsValidUserID(*uid); len(msgs) > 0 {
			v.add(path+".runAsUser", *uid, "%s", strings.Join(msgs, "; "))
		}
	}
	if gid != nil {
		if msgs := validation.IsValidGroupID(*gid); len(msgs) > 0 {
			v.add(path+".runAsGroup", *gid, "%s", strings.Join(msgs, "; "))
		}
	}
}

// podSecurityContext checks the pod's security context: its IDs, groups
// and profiles.
func (v *validator) podSecurityContext(sc *v1.PodSecurityContext) {
	if sc == nil {
		return
	}
	const path = "spec.securityContext"
	v.ids(path, sc.RunAsUser, sc.RunAsGroup)
	if g := sc.FSGroup; g != nil {
		if msgs := validation.IsValidGroupID(*g); len(msgs) > 0 {
			v.add(path+".fsGroup", *g, "%s", strings.Join(msgs, "; "))
		}
	}
	for i, g := range sc.SupplementalGroups {
		if msgs := validation.IsValidGroupID(g); len(msgs) > 0 {
			v.add(fmt.Sprintf("%s.supplementalGroups[%d]", path, i), g, "%s", strings.Join(msgs, "; "))
		}
	}
	v.seccomp(path+".seccompProfile", sc.SeccompProfile)
	v.appArmor(path+".appArmorProfile", sc.AppArmorProfile)
}

// securityContext checks a container's security context: its IDs, the
// procMount (Unmasked only in a user namespace), capability names,
// privileged without privilege escalation, and profiles.
func (v *validator) securityContext(path string, sc *v1.SecurityContext, hostUsers bool) {
	if sc == nil {
		return
	}
	v.ids(path, sc.RunAsUser, sc.RunAsGroup)
	if pm := sc.ProcMount; pm != nil {
		switch *pm {
		case v1.DefaultProcMount:
		case v1.UnmaskedProcMount:
			if hostUsers {
				v.add(path+".procMount", string(*pm), "needs spec.hostUsers false")
			}
		default:
			v.add(path+".procMount", string(*pm), "want Default or Unmasked")
		}
	}
	if c := sc.Capabilities; c != nil {
		for _, l := range []struct {
			name string
			caps []v1.Capability
		}{{"add", c.Add}, {"drop", c.Drop}} {
			for i, cp := range l.caps {
				if strings.TrimSpace(string(cp)) == "" {
					v.add(fmt.Sprintf("%s.capabilities.%s[%d]", path, l.name, i), string(cp), "must not be empty")
				}
			}
		}
	}
	if sc.Privileged != nil && *sc.Privileged && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		v.add(path+".allowPrivilegeEscalation", "false", "cannot be false while privileged is true")
	}
	v.seccomp(path+".seccompProfile", sc.SeccompProfile)
	v.appArmor(path+".appArmorProfile", sc.AppArmorProfile)
}

// seccomp checks a seccomp profile: a known type; localhostProfile, a
// path below the node's seccomp directory, with Localhost and only then.
func (v *validator) seccomp(path string, p *v1.SeccompProfile) {
	if p == nil {
		return
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault, v1.SeccompProfileTypeUnconfined:
		if p.LocalhostProfile != nil {
			v.add(path+".localhostProfile", *p.LocalhostProfile, "only with type Localhost")
		}
	case v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			v.add(path+".localhostProfile", "", "required with type Localhost")
		} else {
			v.descendingPath(path+".localhostProfile", *p.LocalhostProfile)
		}
	default:
		v.add(path+".type", string(p.Type), "want RuntimeDefault, Unconfined or Localhost")
	}
}

// appArmor checks an AppArmor profile: a known type; localhostProfile
// with Localhost and only then.
func (v *validator) appArmor(path string, p *v1.AppArmorProfile) {
	if p == nil {
		return
	}
	switch p.Type {
	case v1.AppArmorProfileTypeRuntimeDefault, v1.AppArmorProfileTypeUnconfined:
		if p.LocalhostProfile != nil {
			v.add(path+".localhostProfile", *p.LocalhostProfile, "only with type Localhost")
		}
	case v1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "" {
			v.add(path+".localhostProfile", "", "required with type Localhost")
		}
	default:
		v.add(path+".type", string(p.Type), "want RuntimeDefault, Unconfined or Localhost")
	}
}

// specContainer is a container of a pod spec with its field path.
type specContainer struct {
	path string
	c    *v1.Container
	init bool
}

// containersOf returns the init containers, then the containers, of s.
func containersOf(s *v1.PodSpec) []specContainer {
	out := make([]specContainer, 0, len(s.InitContainers)+len(s.Containers))
	for i := range s.InitContainers {
		out = append(out, specContainer{fmt.Sprintf("spec.initContainers[%d]", i), &s.InitContainers[i], true})
	}
	for i := range s.Containers {
		out = append(out, specContainer{fmt.Sprintf("spec.containers[%d]", i), &s.Containers[i], false})
	}
	return out
}

// restartRules checks c's own restartPolicy and restartPolicyRules (the
// ContainerRestartRules feature, beta since 1.34; RestartAllContainers,
// beta in 1.36): a policy of Always (for an init container, a sidecar),
// OnFailure or Never; rules only beside a policy, each with the action
// Restart or RestartAllContainers and exitCodes with the operator In or
// NotIn.
func (v *validator) restartRules(path string, c *v1.Container) {
	if rp := c.RestartPolicy; rp != nil {
		switch *rp {
		case v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyNever:
		default:
			v.add(path+".restartPolicy", string(*rp), "want Always, OnFailure, Never or unset")
		}
	}
	for i, r := range c.RestartPolicyRules {
		rp := fmt.Sprintf("%s.restartPolicyRules[%d]", path, i)
		if c.RestartPolicy == nil {
			v.add(rp, string(r.Action), "restartPolicyRules need the container's restartPolicy")
		}
		switch r.Action {
		case v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers:
		default:
			v.add(rp+".action", string(r.Action), "want Restart or RestartAllContainers")
		}
		if r.ExitCodes == nil {
			v.add(rp+".exitCodes", "", "required")
			continue
		}
		switch r.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn:
		default:
			v.add(rp+".exitCodes.operator", string(r.ExitCodes.Operator), "want In or NotIn")
		}
	}
}

func (v *validator) container(path string, c *v1.Container, init, hostNetwork bool, names map[string]string, volumes map[string]bool) {
	v.dns(path+".name", c.Name, validation.IsDNS1123Label(c.Name))
	if first, ok := names[c.Name]; ok && c.Name != "" {
		v.add(path+".name", c.Name, "duplicate container name (also %s)", first)
	} else {
		names[c.Name] = path
	}
	if strings.TrimSpace(c.Image) == "" {
		v.add(path+".image", c.Image, "required")
	}
	switch c.ImagePullPolicy {
	case v1.PullAlways, v1.PullIfNotPresent, v1.PullNever:
	default:
		v.add(path+".imagePullPolicy", string(c.ImagePullPolicy), "want Always, IfNotPresent or Never")
	}
	v.restartRules(path, c)
	switch c.TerminationMessagePolicy {
	case v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError:
	default:
		v.add(path+".terminationMessagePolicy", string(c.TerminationMessagePolicy), "want File or FallbackToLogsOnError")
	}

	res := c.Resources
	for _, kind := range []struct {
		name string
		list v1.ResourceList
	}{{"requests", res.Requests}, {"limits", res.Limits}} {
		for name, q := range kind.list {
			if q.Sign() < 0 {
				v.add(fmt.Sprintf("%s.resources.%s.%s", path, kind.name, name), q.String(), "must not be negative")
			}
		}
	}
	for name, req := range res.Requests {
		if limit, ok := res.Limits[name]; ok && req.Cmp(limit) > 0 {
			v.add(fmt.Sprintf("%s.resources.requests.%s", path, name), req.String(), "must be at most the limit %s", limit.String())
		}
	}

	ports := map[string]bool{}
	for i, p := range c.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", path, i)
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			v.add(pp+".containerPort", p.ContainerPort, "want 1 to 65535")
		}
		if p.HostPort < 0 || p.HostPort > 65535 {
			v.add(pp+".hostPort", p.HostPort, "want 0 to 65535")
		}
		if hostNetwork && p.HostPort != p.ContainerPort {
			v.add(pp+".hostPort", p.HostPort, "with hostNetwork it must equal containerPort %d", p.ContainerPort)
		}
		switch p.Protocol {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			v.add(pp+".protocol", string(p.Protocol), "want TCP, UDP or SCTP")
		}
		if p.Name != "" {
			v.dns(pp+".name", p.Name, validation.IsValidPortName(p.Name))
			if ports[p.Name] {
				v.add(pp+".name", p.Name, "duplicate port name")
			}
			ports[p.Name] = true
		}
	}

	for i, e := range c.Env {
		if e.Name == "" {
			v.add(fmt.Sprintf("%s.env[%d].name", path, i), e.Name, "required")
		} else if strings.Contains(e.Name, "=") {
			v.add(fmt.Sprintf("%s.env[%d].name", path, i), e.Name, "must not contain '='")
		}
	}

	mounts := map[string]bool{}
	for i, m := range c.VolumeMounts {
		mp := fmt.Sprintf("%s.volumeMounts[%d]", path, i)
		if !volumes[m.Name] {
			v.add(mp+".name", m.Name, "no volume of that name in spec.volumes")
		}
		if m.MountPath == "" {
			v.add(mp+".mountPath", m.MountPath, "required")
		} else if mounts[m.MountPath] {
			v.add(mp+".mountPath", m.MountPath, "mounted twice")
		}
		mounts[m.MountPath] = true
		if m.SubPath != "" && m.SubPathExpr != "" {
			v.add(mp+".subPathExpr", m.SubPathExpr, "subPath and subPathExpr are mutually exclusive")
		}
		v.descendingPath(mp+".subPath", m.SubPath)
		v.descendingPath(mp+".subPathExpr", m.SubPathExpr)
	}

	for _, pr := range []struct {
		name  string
		probe *v1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe == nil {
			continue
		}
		if init && !nodeapi.IsSidecar(c) {
			v.add(path+"."+pr.name, "set", "init containers other than sidecars may not have probes")
			continue
		}
		v.probe(path+"."+pr.name, pr.probe, pr.name != "readinessProbe")
	}
}

func (v *validator) probe(path string, p *v1.Probe, successMustBeOne bool) {
	for _, f := range []struct {
		name string
		val  int32
		min  int32
	}{
		{"initialDelaySeconds", p.InitialDelaySeconds, 0},
		{"timeoutSeconds", p.TimeoutSeconds, 1},
		{"periodSeconds", p.PeriodSeconds, 1},
		{"successThreshold", p.SuccessThreshold, 1},
		{"failureThreshold", p.FailureThreshold, 1},
	} {
		if f.val < f.min {
			v.add(path+"."+f.name, f.val, "must be at least %d", f.min)
		}
	}
	if successMustBeOne && p.SuccessThreshold != 1 {
		v.add(path+".successThreshold", p.SuccessThreshold, "must be 1 for liveness and startup probes")
	}
	handlers := 0
	if h := p.HTTPGet; h != nil {
		handlers++
		v.port(path+".httpGet.port", h.Port)
		switch h.Scheme {
		case v1.URISchemeHTTP, v1.URISchemeHTTPS:
		default:
			v.add(path+".httpGet.scheme", string(h.Scheme), "want HTTP or HTTPS")
		}
	}
	if t := p.TCPSocket; t != nil {
		handlers++
		v.port(path+".tcpSocket.port", t.Port)
	}
	if g := p.GRPC; g != nil {
		handlers++
		if g.Port < 1 || g.Port > 65535 {
			v.add(path+".grpc.port", g.Port, "want 1 to 65535")
		}
	}
	if p.Exec != nil {
		handlers++
	}
	if handlers != 1 {
		v.add(path, handlers, "want exactly one of exec, httpGet, tcpSocket, grpc handlers")
	}
}

// port checks a probe port: a number in range, or a port name.
func (v *validator) port(path string, p intstr.IntOrString) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			v.add(path, p.IntVal, "want 1 to 65535")
		}
		return
	}
	v.dns(path, p.StrVal, validation.IsValidPortName(p.StrVal))
}
