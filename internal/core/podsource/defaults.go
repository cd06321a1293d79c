package podsource

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// SetDefaults fills in the fields of pod that the API server defaults when a
// v1 Pod is created, for the fields the agent relies on. Each default is the
// one the k8s.io/api core/v1 reference documents:
//
//   - spec: restartPolicy Always, terminationGracePeriodSeconds 30, dnsPolicy
//     ClusterFirst, schedulerName default-scheduler, enableServiceLinks true,
//     securityContext {}; with hostNetwork, each container port's hostPort is
//     its containerPort.
//   - every init and regular container: imagePullPolicy Always for an image
//     tagged :latest or without tag or digest, else IfNotPresent;
//     terminationMessagePath /dev/termination-log, terminationMessagePolicy
//     File; port protocol TCP; env valueFrom.fieldRef.apiVersion v1; requests
//     copied from limits for each resource with a limit but no request (this
//     decides the QoS class); quantities rounded up to millis; probes
//     timeoutSeconds 1, periodSeconds 10, successThreshold 1, failureThreshold
//     3; httpGet (probes and lifecycle hooks) path "/" and scheme HTTP; grpc
//     service "".
//   - volumes: a volume without a source is an emptyDir; hostPath type ""
//     (no check); downwardAPI and projected defaultMode 0644 and their
//     fieldRef apiVersion v1.
//
// Pod-level resources (spec.resources) are not defaulted. SetDefaults is
// idempotent.
func SetDefaults(pod *v1.Pod) {
	s := &pod.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = v1.RestartPolicyAlways
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr(int64(v1.DefaultTerminationGracePeriodSeconds))
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = v1.DNSClusterFirst
	}
	if s.SchedulerName == "" {
		s.SchedulerName = v1.DefaultSchedulerName
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptr(v1.DefaultEnableServiceLinks)
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &v1.PodSecurityContext{}
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i], s.HostNetwork)
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i], s.HostNetwork)
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
}

func defaultContainer(c *v1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = v1.PullIfNotPresent
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = v1.PullAlways
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
	r := &c.Resources
	for name, limit := range r.Limits {
		if _, ok := r.Requests[name]; ok {
			continue
		}
		if r.Requests == nil {
			r.Requests = v1.ResourceList{}
		}
		r.Requests[name] = limit.DeepCopy()
	}
	roundUpToMilli(r.Limits)
	roundUpToMilli(r.Requests)
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil {
			defaultProbe(p)
		}
	}
	if lc := c.Lifecycle; lc != nil {
		for _, h := range []*v1.LifecycleHandler{lc.PostStart, lc.PreStop} {
			if h != nil && h.HTTPGet != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

// roundUpToMilli rounds every quantity of l up to a whole number of
// thousandths, as the API server does.
func roundUpToMilli(l v1.ResourceList) {
	for name, q := range l {
		q.RoundUp(-3)
		l[name] = q
	}
}

func defaultProbe(p *v1.Probe) {
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if p.HTTPGet != nil {
		defaultHTTPGet(p.HTTPGet)
	}
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = ptr("")
	}
}

func defaultHTTPGet(h *v1.HTTPGetAction) {
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = v1.URISchemeHTTP
	}
}

func defaultVolume(v *v1.Volume) {
	if v.VolumeSource == (v1.VolumeSource{}) {
		v.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	if v.HostPath != nil && v.HostPath.Type == nil {
		v.HostPath.Type = ptr(v1.HostPathUnset)
	}
	if d := v.DownwardAPI; d != nil {
		if d.DefaultMode == nil {
			d.DefaultMode = ptr(v1.DownwardAPIVolumeSourceDefaultMode)
		}
		defaultFieldRefs(d.Items)
	}
	if p := v.Projected; p != nil {
		if p.DefaultMode == nil {
			p.DefaultMode = ptr(v1.ProjectedVolumeSourceDefaultMode)
		}
		for _, src := range p.Sources {
			if src.DownwardAPI != nil {
				defaultFieldRefs(src.DownwardAPI.Items)
			}
		}
	}
}

func defaultFieldRefs(items []v1.DownwardAPIVolumeFile) {
	for i := range items {
		if f := items[i].FieldRef; f != nil && f.APIVersion == "" {
			f.APIVersion = "v1"
		}
	}
}

// imageTag returns the tag of an image reference as the API server's
// imagePullPolicy default sees it: "latest" when the reference has neither a
// tag nor a digest, "" when it has only a digest.
func imageTag(image string) string {
	name, _, hasDigest := strings.Cut(image, "@")
	// A tag follows the last ":" after the last "/" (a registry host may have a port).
	last := name[strings.LastIndex(name, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}

func ptr[T any](v T) *T { return &v }
