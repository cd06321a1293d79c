package podsource

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// defaultedSpec returns a pod spec with the pod-level defaults and the given
// containers and volumes.
func defaultedSpec(ctrs []v1.Container, vols []v1.Volume) v1.PodSpec {
	return v1.PodSpec{
		Containers:                    ctrs,
		Volumes:                       vols,
		RestartPolicy:                 v1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: ptr(int64(30)),
		DNSPolicy:                     v1.DNSClusterFirst,
		SchedulerName:                 "default-scheduler",
		EnableServiceLinks:            ptr(true),
		SecurityContext:               &v1.PodSecurityContext{},
	}
}

// defaultedContainer returns a container c with its defaults for an image with a tag.
func defaultedContainer(c v1.Container) v1.Container {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = v1.PullIfNotPresent
	}
	c.TerminationMessagePath = "/dev/termination-log"
	c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	return c
}

func TestSetDefaults(t *testing.T) {
	t.Parallel()
	q := resource.MustParse
	for _, tc := range []struct {
		name string
		in   v1.PodSpec
		want v1.PodSpec
	}{
		{
			name: "pod level",
			in:   v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "x:1"}}},
			want: defaultedSpec([]v1.Container{defaultedContainer(v1.Container{Name: "c", Image: "x:1"})}, nil),
		},
		{
			name: "set values are kept",
			in: v1.PodSpec{
				RestartPolicy: v1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr(int64(5)), DNSPolicy: v1.DNSDefault,
				SchedulerName: "mine", EnableServiceLinks: ptr(false), SecurityContext: &v1.PodSecurityContext{RunAsUser: ptr(int64(1))},
				Containers: []v1.Container{{Name: "c", Image: "x", ImagePullPolicy: v1.PullNever, TerminationMessagePath: "/t",
					TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError}},
			},
			want: v1.PodSpec{
				RestartPolicy: v1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr(int64(5)), DNSPolicy: v1.DNSDefault,
				SchedulerName: "mine", EnableServiceLinks: ptr(false), SecurityContext: &v1.PodSecurityContext{RunAsUser: ptr(int64(1))},
				Containers: []v1.Container{{Name: "c", Image: "x", ImagePullPolicy: v1.PullNever, TerminationMessagePath: "/t",
					TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError}},
			},
		},
		{
			name: "image pull policy from the tag",
			in: v1.PodSpec{
				InitContainers: []v1.Container{{Name: "i", Image: "busybox"}},
				Containers: []v1.Container{
					{Name: "a", Image: "busybox:latest"},
					{Name: "b", Image: "registry:5000/busybox"},
					{Name: "c", Image: "registry:5000/busybox:1.2"},
					{Name: "d", Image: "busybox@sha256:0123"},
					{Name: "e", Image: "busybox:latest@sha256:0123"},
				},
			},
			want: func() v1.PodSpec {
				s := defaultedSpec([]v1.Container{
					defaultedContainer(v1.Container{Name: "a", Image: "busybox:latest", ImagePullPolicy: v1.PullAlways}),
					defaultedContainer(v1.Container{Name: "b", Image: "registry:5000/busybox", ImagePullPolicy: v1.PullAlways}),
					defaultedContainer(v1.Container{Name: "c", Image: "registry:5000/busybox:1.2"}),
					defaultedContainer(v1.Container{Name: "d", Image: "busybox@sha256:0123"}),
					defaultedContainer(v1.Container{Name: "e", Image: "busybox:latest@sha256:0123", ImagePullPolicy: v1.PullAlways}),
				}, nil)
				s.InitContainers = []v1.Container{defaultedContainer(v1.Container{Name: "i", Image: "busybox", ImagePullPolicy: v1.PullAlways})}
				return s
			}(),
		},
		{
			name: "requests from limits, rounded up to millis",
			in: v1.PodSpec{
				InitContainers: []v1.Container{{Name: "i", Image: "x:1", Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{"memory": q("64Mi")}}}},
				Containers: []v1.Container{{Name: "c", Image: "x:1", Resources: v1.ResourceRequirements{
					Limits:   v1.ResourceList{"cpu": q("500m"), "memory": q("128Mi")},
					Requests: v1.ResourceList{"cpu": q("0.0001")}}}},
			},
			want: func() v1.PodSpec {
				s := defaultedSpec([]v1.Container{defaultedContainer(v1.Container{Name: "c", Image: "x:1", Resources: v1.ResourceRequirements{
					Limits:   v1.ResourceList{"cpu": q("500m"), "memory": q("128Mi")},
					Requests: v1.ResourceList{"cpu": q("1m"), "memory": q("128Mi")}}})}, nil)
				s.InitContainers = []v1.Container{defaultedContainer(v1.Container{Name: "i", Image: "x:1", Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{"memory": q("64Mi")}, Requests: v1.ResourceList{"memory": q("64Mi")}}})}
				return s
			}(),
		},
		{
			name: "ports, env, probes, hooks",
			in: v1.PodSpec{HostNetwork: true, Containers: []v1.Container{{
				Name: "c", Image: "x:1",
				Ports:          []v1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 53, Protocol: v1.ProtocolUDP}},
				Env:            []v1.EnvVar{{Name: "N", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				LivenessProbe:  &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80)}}},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9}}, PeriodSeconds: 2},
				StartupProbe:   &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}},
				Lifecycle:      &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Path: "/quit"}}},
			}}},
			want: func() v1.PodSpec {
				s := defaultedSpec([]v1.Container{defaultedContainer(v1.Container{
					Name: "c", Image: "x:1",
					Ports: []v1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: v1.ProtocolTCP},
						{ContainerPort: 53, HostPort: 53, Protocol: v1.ProtocolUDP}},
					Env: []v1.EnvVar{{Name: "N", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
					LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Path: "/", Scheme: v1.URISchemeHTTP}},
						TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
					ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9, Service: ptr("")}},
						TimeoutSeconds: 1, PeriodSeconds: 2, SuccessThreshold: 1, FailureThreshold: 3},
					StartupProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
						TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
					Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Path: "/quit", Scheme: v1.URISchemeHTTP}}},
				})}, nil)
				s.HostNetwork = true
				return s
			}(),
		},
		{
			name: "volumes",
			in: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "x:1"}}, Volumes: []v1.Volume{
				{Name: "none"},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/data"}}},
				{Name: "dir", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/d", Type: ptr(v1.HostPathDirectory)}}},
				{Name: "down", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
			}},
			want: defaultedSpec([]v1.Container{defaultedContainer(v1.Container{Name: "c", Image: "x:1"})}, []v1.Volume{
				{Name: "none", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/data", Type: ptr(v1.HostPathUnset)}}},
				{Name: "dir", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/d", Type: ptr(v1.HostPathDirectory)}}},
				{Name: "down", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{DefaultMode: ptr(int32(0o644)), Items: []v1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}}}},
			}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &v1.Pod{Spec: tc.in}
			SetDefaults(p)
			if d := cmp.Diff(tc.want, p.Spec); d != "" {
				t.Errorf("SetDefaults (-want +got):\n%s", d)
			}
			again := p.DeepCopy()
			SetDefaults(again)
			if d := cmp.Diff(p, again); d != "" {
				t.Errorf("SetDefaults is not idempotent (-first +second):\n%s", d)
			}
		})
	}
}
