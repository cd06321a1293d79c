package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

func newDescribeCmd() *cobra.Command {
	describe := &cobra.Command{
		Use:   "describe RESOURCE",
		Short: "Describe what a running nodekeeper runs, as kubectl describe does (RESOURCE: pod)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var (
		at        agentTarget
		namespace string
	)
	pod := &cobra.Command{
		Use:     "pod NAME [-n NAMESPACE] [--root-dir DIR | --socket PATH]",
		Aliases: []string{"pods", "po"},
		Short:   "Describe a pod of a running nodekeeper, as kubectl describe pod does",
		Long: `Reads the pod from /pods and its events from /events through the running
nodekeeper's unix socket ROOT_DIR/nodekeeper.sock (root only; default
` + defaultSocket + `) and prints kubectl describe's layout: name, namespace,
priority, node, start time, labels, annotations, status, IPs, the init and
regular containers (image, ports, state with reason, exit code and times, last
state, ready, restart count, limits and requests, liveness, readiness and
startup probes, environment, mounts), conditions, volumes, QoS class and the
pod's events (standalone; in a cluster they are the API server's: the section
says so). NAME is in namespace -n (default "default"); an unknown pod exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, base, sock, err := at.socketClient(cmd)
			if err != nil {
				return err
			}
			pods, err := fetchPods(cmd.Context(), c, base, sock)
			if err != nil {
				return err
			}
			q := podQuery{namespace: namespace, name: args[0]}
			found := q.filter(pods)
			if len(found) == 0 {
				return fmt.Errorf("pod %q not found in namespace %q (nodekeeper get pods lists them)", q.name, q.namespace)
			}
			p := &found[0]
			all, err := fetchEvents(cmd.Context(), c, base, sock)
			kept := !errors.Is(err, errNoEvents) // an agent in a cluster keeps none
			if err != nil && kept {
				return err
			}
			return describePod(cmd.OutOrStdout(), p, podEvents(all, p), kept, time.Now())
		},
	}
	at.flags(pod, false)
	_ = pod.Flags().MarkHidden("server") // the read-only port serves no events
	pod.Flags().StringVarP(&namespace, "namespace", "n", v1.NamespaceDefault, "the pod's namespace")
	describe.AddCommand(pod)
	return describe
}

// podEvents returns the events about p (not about an earlier pod of its
// name: one whose UID differs).
func podEvents(all []v1.Event, p *v1.Pod) []v1.Event {
	var out []v1.Event
	for _, e := range all {
		o := e.InvolvedObject
		if o.Kind == "Pod" && o.Namespace == p.Namespace && o.Name == p.Name && (o.UID == "" || o.UID == p.UID) {
			out = append(out, e)
		}
	}
	return out
}

// describer writes kubectl describe's layout: lines indented two spaces a
// level, their tab-separated columns aligned as kubectl's tabwriter does.
type describer struct {
	tw *tabwriter.Writer
}

func (d describer) line(level int, format string, args ...any) {
	fmt.Fprintf(d.tw, strings.Repeat("  ", level)+format+"\n", args...)
}

// rfc1123z is how kubectl describe prints a time.
func rfc1123z(t time.Time) string { return t.Format(time.RFC1123Z) }

// describePod writes p as kubectl describe pod does, with events (the pod's,
// standalone) relative to now; haveEvents false (an agent in a cluster,
// which keeps none) says where they are instead.
func describePod(w io.Writer, p *v1.Pod, events []v1.Event, haveEvents bool, now time.Time) error {
	d := describer{tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	d.line(0, "Name:\t%s", p.Name)
	d.line(0, "Namespace:\t%s", p.Namespace)
	if p.Spec.Priority != nil {
		d.line(0, "Priority:\t%d", *p.Spec.Priority)
	}
	if p.Spec.PriorityClassName != "" {
		d.line(0, "Priority Class Name:\t%s", p.Spec.PriorityClassName)
	}
	if rc := p.Spec.RuntimeClassName; rc != nil && *rc != "" {
		d.line(0, "Runtime Class Name:\t%s", *rc)
	}
	if p.Spec.ServiceAccountName != "" {
		d.line(0, "Service Account:\t%s", p.Spec.ServiceAccountName)
	}
	if p.Spec.NodeName == "" {
		d.line(0, "Node:\t<none>")
	} else {
		d.line(0, "Node:\t%s/%s", p.Spec.NodeName, p.Status.HostIP)
	}
	if p.Status.StartTime != nil {
		d.line(0, "Start Time:\t%s", rfc1123z(p.Status.StartTime.Time))
	}
	d.keyValues("Labels", p.Labels, "=")
	d.keyValues("Annotations", p.Annotations, ": ")
	if p.DeletionTimestamp != nil && p.Status.Phase != v1.PodFailed && p.Status.Phase != v1.PodSucceeded {
		d.line(0, "Status:\tTerminating (lasts %s)", since(p.DeletionTimestamp.Time, now))
		if g := p.DeletionGracePeriodSeconds; g != nil {
			d.line(0, "Termination Grace Period:\t%ds", *g)
		}
	} else {
		d.line(0, "Status:\t%s", p.Status.Phase)
	}
	if p.Status.Reason != "" {
		d.line(0, "Reason:\t%s", p.Status.Reason)
	}
	if p.Status.Message != "" {
		d.line(0, "Message:\t%s", p.Status.Message)
	}
	d.line(0, "IP:\t%s", p.Status.PodIP)
	if len(p.Status.PodIPs) == 0 {
		d.line(0, "IPs:\t<none>")
	} else {
		d.line(0, "IPs:")
		for _, ip := range p.Status.PodIPs {
			d.line(1, "IP:\t%s", ip.IP)
		}
	}
	if p.Status.NominatedNodeName != "" {
		d.line(0, "NominatedNodeName:\t%s", p.Status.NominatedNodeName)
	}
	if len(p.Spec.InitContainers) > 0 {
		d.containers(p, "Init Containers", p.Spec.InitContainers, p.Status.InitContainerStatuses)
	}
	d.containers(p, "Containers", p.Spec.Containers, p.Status.ContainerStatuses)
	if len(p.Spec.ReadinessGates) > 0 {
		d.line(0, "Readiness Gates:")
		d.line(1, "Type\tStatus")
		for _, g := range p.Spec.ReadinessGates {
			status := "<none>"
			if i := slices.IndexFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == g.ConditionType }); i >= 0 {
				status = string(p.Status.Conditions[i].Status)
			}
			d.line(1, "%s \t%s ", g.ConditionType, status)
		}
	}
	if len(p.Status.Conditions) > 0 {
		d.line(0, "Conditions:")
		d.line(1, "Type\tStatus")
		for _, c := range p.Status.Conditions {
			d.line(1, "%s \t%s ", c.Type, c.Status)
		}
	}
	d.volumes(p.Spec.Volumes)
	d.line(0, "QoS Class:\t%s", qos.Class(p))
	d.keyValues("Node-Selectors", p.Spec.NodeSelector, "=")
	d.tolerations(p.Spec.Tolerations)
	if err := d.tw.Flush(); err != nil {
		return err
	}
	switch {
	case !haveEvents:
		d.line(0, "Events:\t<in the API server: kubectl events --for pod/%s -n %s>", p.Name, p.Namespace)
	case len(events) == 0:
		d.line(0, "Events:\t<none>")
	default:
		sortEvents(events)
		d.line(0, "Events:")
		d.line(1, "Type\tReason\tAge\tFrom\tMessage")
		d.line(1, "----\t------\t----\t----\t-------")
		for _, e := range events {
			from := e.Source.Component
			if from == "" {
				from = e.ReportingController
			}
			msg := strings.TrimSpace(e.Message)
			if e.InvolvedObject.FieldPath != "" {
				msg = e.InvolvedObject.FieldPath + ": " + msg
			}
			d.line(1, "%s\t%s\t%s\t%s\t%s", e.Type, e.Reason, eventInterval(&e, now), from, msg)
		}
	}
	return d.tw.Flush()
}

// keyValues writes a map as kubectl's multi-line labels and annotations:
// sorted by key, <none> when empty.
func (d describer) keyValues(title string, m map[string]string, sep string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != v1.LastAppliedConfigAnnotation {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		d.line(0, "%s:\t<none>", title)
		return
	}
	sort.Strings(keys)
	for i, k := range keys {
		head := ""
		if i == 0 {
			head = title + ":"
		}
		d.line(0, "%s\t%s%s%s", head, k, sep, strings.TrimSuffix(m[k], "\n"))
	}
}

// tolerations writes the pod's tolerations as kubectl does, sorted by key:
// key=value:effect, op=Exists for a key alone, "for Ns".
func (d describer) tolerations(ts []v1.Toleration) {
	if len(ts) == 0 {
		d.line(0, "Tolerations:\t<none>")
		return
	}
	ts = slices.Clone(ts)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Key < ts[j].Key })
	for i, t := range ts {
		head := ""
		if i == 0 {
			head = "Tolerations:"
		}
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		if t.Effect != "" {
			s += ":" + string(t.Effect)
		}
		if t.Operator == v1.TolerationOpExists && t.Value == "" {
			if t.Key != "" || t.Effect != "" {
				s += " "
			}
			s += "op=Exists"
		}
		if t.TolerationSeconds != nil {
			s += fmt.Sprintf(" for %ds", *t.TolerationSeconds)
		}
		d.line(0, "%s\t%s", head, s)
	}
}

// containers writes one list of containers with their statuses.
func (d describer) containers(p *v1.Pod, label string, ctrs []v1.Container, statuses []v1.ContainerStatus) {
	if len(ctrs) == 0 {
		d.line(0, "%s: <none>", label)
		return
	}
	d.line(0, "%s:", label)
	for i := range ctrs {
		c := &ctrs[i]
		j := slices.IndexFunc(statuses, func(s v1.ContainerStatus) bool { return s.Name == c.Name })
		d.line(1, "%s:", c.Name)
		if j >= 0 {
			d.line(2, "Container ID:\t%s", statuses[j].ContainerID)
		}
		d.line(2, "Image:\t%s", c.Image)
		if j >= 0 {
			d.line(2, "Image ID:\t%s", statuses[j].ImageID)
		}
		d.ports("Port", "Ports", c.Ports, func(cp v1.ContainerPort) int32 { return cp.ContainerPort })
		d.ports("Host Port", "Host Ports", c.Ports, func(cp v1.ContainerPort) int32 { return cp.HostPort })
		for _, l := range []struct {
			name string
			args []string
		}{{"Command", c.Command}, {"Args", c.Args}} {
			if len(l.args) > 0 {
				d.line(2, "%s:", l.name)
				for _, a := range l.args {
					for _, s := range strings.Split(a, "\n") {
						d.line(3, "%s", s)
					}
				}
			}
		}
		if j >= 0 {
			st := statuses[j]
			d.state("State", st.State)
			if st.LastTerminationState.Terminated != nil {
				d.state("Last State", st.LastTerminationState)
			}
			d.line(2, "Ready:\t%s", trueFalse(st.Ready))
			d.line(2, "Restart Count:\t%d", st.RestartCount)
		}
		for _, r := range []struct {
			name string
			list v1.ResourceList
		}{{"Limits", c.Resources.Limits}, {"Requests", c.Resources.Requests}} {
			if len(r.list) == 0 {
				continue
			}
			d.line(2, "%s:", r.name)
			names := make([]string, 0, len(r.list))
			for n := range r.list {
				names = append(names, string(n))
			}
			sort.Strings(names)
			for _, n := range names {
				q := r.list[v1.ResourceName(n)]
				d.line(3, "%s:\t%s", n, q.String())
			}
		}
		for _, pr := range []struct {
			name  string
			probe *v1.Probe
		}{{"Liveness", c.LivenessProbe}, {"Readiness", c.ReadinessProbe}, {"Startup", c.StartupProbe}} {
			if pr.probe != nil {
				d.line(2, "%s:\t%s", pr.name, probeLine(pr.probe))
			}
		}
		d.env(p, c)
		if len(c.VolumeMounts) == 0 {
			d.line(2, "Mounts:\t<none>")
		} else {
			d.line(2, "Mounts:")
			mounts := slices.Clone(c.VolumeMounts)
			sort.SliceStable(mounts, func(a, b int) bool { return mounts[a].MountPath < mounts[b].MountPath })
			for _, m := range mounts {
				flags := "rw"
				if m.ReadOnly {
					flags = "ro"
				}
				if m.SubPath != "" {
					flags += fmt.Sprintf(",path=%q", m.SubPath)
				}
				d.line(3, "%s from %s (%s)", m.MountPath, m.Name, flags)
			}
		}
	}
}

// ports writes the container's (or host's, by port) ports as kubectl does:
// "8080/TCP (http)", <none> without any.
func (d describer) ports(one, many string, ports []v1.ContainerPort, port func(v1.ContainerPort) int32) {
	var out []string
	for _, cp := range ports {
		s := fmt.Sprintf("%d/%s", port(cp), cp.Protocol)
		if cp.Name != "" {
			s += " (" + cp.Name + ")"
		}
		out = append(out, s)
	}
	switch {
	case len(out) > 1:
		d.line(2, "%s:\t%s", many, strings.Join(out, ", "))
	case len(out) == 1:
		d.line(2, "%s:\t%s", one, out[0])
	default:
		d.line(2, "%s:\t<none>", one)
	}
}

// state writes a container state: Running with its start, Waiting with its
// reason, Terminated with reason, message, exit code, signal and times.
func (d describer) state(name string, s v1.ContainerState) {
	switch {
	case s.Running != nil:
		d.line(2, "%s:\tRunning", name)
		d.line(3, "Started:\t%s", rfc1123z(s.Running.StartedAt.Time))
	case s.Terminated != nil:
		t := s.Terminated
		d.line(2, "%s:\tTerminated", name)
		if t.Reason != "" {
			d.line(3, "Reason:\t%s", t.Reason)
		}
		if t.Message != "" {
			d.line(3, "Message:\t%s", t.Message)
		}
		d.line(3, "Exit Code:\t%d", t.ExitCode)
		if t.Signal > 0 {
			d.line(3, "Signal:\t%d", t.Signal)
		}
		d.line(3, "Started:\t%s", rfc1123z(t.StartedAt.Time))
		d.line(3, "Finished:\t%s", rfc1123z(t.FinishedAt.Time))
	default:
		d.line(2, "%s:\tWaiting", name)
		if s.Waiting != nil && s.Waiting.Reason != "" {
			d.line(3, "Reason:\t%s", s.Waiting.Reason)
		}
	}
}

// env writes the container's environment: values, or where they come from
// (a field resolved as the kubelet does, a resource, a secret's or config
// map's key).
func (d describer) env(p *v1.Pod, c *v1.Container) {
	if len(c.EnvFrom) > 0 {
		d.line(2, "Environment Variables from:")
		for _, from := range c.EnvFrom {
			kind, name, optional := "ConfigMap", "", false
			switch {
			case from.ConfigMapRef != nil:
				name, optional = from.ConfigMapRef.Name, from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
			case from.SecretRef != nil:
				kind, name, optional = "Secret", from.SecretRef.Name, from.SecretRef.Optional != nil && *from.SecretRef.Optional
			}
			prefix := ""
			if from.Prefix != "" {
				prefix = fmt.Sprintf(" with prefix '%s'", from.Prefix)
			}
			d.line(3, "%s\t%s%s\tOptional: %t", name, kind, prefix, optional)
		}
	}
	if len(c.Env) == 0 {
		d.line(2, "Environment:\t<none>")
		return
	}
	d.line(2, "Environment:")
	facts := nodeapi.PodFacts{NodeName: p.Spec.NodeName, HostIP: p.Status.HostIP}
	for _, ip := range p.Status.PodIPs {
		facts.PodIPs = append(facts.PodIPs, ip.IP)
	}
	for _, e := range c.Env {
		vf := e.ValueFrom
		switch {
		case vf == nil:
			for i, s := range strings.Split(e.Value, "\n") {
				if i == 0 {
					d.line(3, "%s:\t%s", e.Name, s)
				} else {
					d.line(3, "\t%s", s)
				}
			}
		case vf.FieldRef != nil:
			v, _ := nodeapi.FieldRefValue(p, vf.FieldRef.FieldPath, nodeapi.FieldInEnv, facts)
			d.line(3, "%s:\t%s (%s:%s)", e.Name, v, vf.FieldRef.APIVersion, vf.FieldRef.FieldPath)
		case vf.ResourceFieldRef != nil:
			v, err := nodeapi.ResourceFieldValue(p, c, vf.ResourceFieldRef, nil)
			if err != nil {
				v = ""
			}
			if r := vf.ResourceFieldRef.Resource; v == "0" && (r == "limits.cpu" || r == "limits.memory") {
				v = "node allocatable"
			}
			d.line(3, "%s:\t%s (%s)", e.Name, v, vf.ResourceFieldRef.Resource)
		case vf.SecretKeyRef != nil:
			d.line(3, "%s:\t<set to the key '%s' in secret '%s'>\tOptional: %t", e.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Name,
				vf.SecretKeyRef.Optional != nil && *vf.SecretKeyRef.Optional)
		case vf.ConfigMapKeyRef != nil:
			d.line(3, "%s:\t<set to the key '%s' of config map '%s'>\tOptional: %t", e.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Name,
				vf.ConfigMapKeyRef.Optional != nil && *vf.ConfigMapKeyRef.Optional)
		}
	}
}

// volumes writes the pod's volumes, with kubectl's descriptions of the
// sources a node meets; others are <unknown>.
func (d describer) volumes(vols []v1.Volume) {
	if len(vols) == 0 {
		d.line(0, "Volumes:\t<none>")
		return
	}
	d.line(0, "Volumes:")
	for _, v := range vols {
		d.line(1, "%s:", v.Name)
		s := v.VolumeSource
		switch {
		case s.HostPath != nil:
			t := "<none>"
			if s.HostPath.Type != nil {
				t = string(*s.HostPath.Type)
			}
			d.line(2, "Type:\tHostPath (bare host directory volume)")
			d.line(2, "Path:\t%s", s.HostPath.Path)
			d.line(2, "HostPathType:\t%s", t)
		case s.EmptyDir != nil:
			limit := "<unset>"
			if l := s.EmptyDir.SizeLimit; l != nil && l.Sign() > 0 {
				limit = l.String()
			}
			d.line(2, "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)")
			d.line(2, "Medium:\t%s", s.EmptyDir.Medium)
			d.line(2, "SizeLimit:\t%s", limit)
		case s.ConfigMap != nil:
			d.line(2, "Type:\tConfigMap (a volume populated by a ConfigMap)")
			d.line(2, "Name:\t%s", s.ConfigMap.Name)
			d.line(2, "Optional:\t%t", s.ConfigMap.Optional != nil && *s.ConfigMap.Optional)
		case s.Secret != nil:
			d.line(2, "Type:\tSecret (a volume populated by a Secret)")
			d.line(2, "SecretName:\t%s", s.Secret.SecretName)
			d.line(2, "Optional:\t%t", s.Secret.Optional != nil && *s.Secret.Optional)
		case s.DownwardAPI != nil:
			d.line(2, "Type:\tDownwardAPI (a volume populated by information about the pod)")
			d.line(2, "Items:")
			for _, it := range s.DownwardAPI.Items {
				if it.FieldRef != nil {
					d.line(3, "%s -> %s", it.FieldRef.FieldPath, it.Path)
				}
				if it.ResourceFieldRef != nil {
					d.line(3, "%s -> %s", it.ResourceFieldRef.Resource, it.Path)
				}
			}
		case s.Projected != nil:
			d.line(2, "Type:\tProjected (a volume that contains injected data from multiple sources)")
			for _, src := range s.Projected.Sources {
				switch {
				case src.Secret != nil:
					d.line(2, "SecretName:\t%s", src.Secret.Name)
					d.line(2, "Optional:\t%t", src.Secret.Optional != nil && *src.Secret.Optional)
				case src.DownwardAPI != nil:
					d.line(2, "DownwardAPI:\ttrue")
				case src.ConfigMap != nil:
					d.line(2, "ConfigMapName:\t%s", src.ConfigMap.Name)
					d.line(2, "Optional:\t%t", src.ConfigMap.Optional != nil && *src.ConfigMap.Optional)
				case src.ServiceAccountToken != nil && src.ServiceAccountToken.ExpirationSeconds != nil:
					d.line(2, "TokenExpirationSeconds:\t%d", *src.ServiceAccountToken.ExpirationSeconds)
				}
			}
		case s.PersistentVolumeClaim != nil:
			d.line(2, "Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)")
			d.line(2, "ClaimName:\t%s", s.PersistentVolumeClaim.ClaimName)
			d.line(2, "ReadOnly:\t%t", s.PersistentVolumeClaim.ReadOnly)
		case s.Image != nil:
			d.line(2, "Type:\tImage (a container image or OCI artifact)")
			d.line(2, "Reference:\t%s", s.Image.Reference)
			d.line(2, "PullPolicy:\t%s", s.Image.PullPolicy)
		default:
			d.line(1, "<unknown>")
		}
	}
}

// probeLine is kubectl describe's one-line probe: the handler, then delay,
// timeout, period and thresholds.
func probeLine(p *v1.Probe) string {
	attrs := fmt.Sprintf("delay=%ds timeout=%ds period=%ds #success=%d #failure=%d",
		p.InitialDelaySeconds, p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold)
	switch h := p.ProbeHandler; {
	case h.Exec != nil:
		return fmt.Sprintf("exec %v %s", h.Exec.Command, attrs)
	case h.HTTPGet != nil:
		u := url.URL{Scheme: strings.ToLower(string(h.HTTPGet.Scheme)), Host: h.HTTPGet.Host, Path: h.HTTPGet.Path}
		if port := h.HTTPGet.Port.String(); port != "" {
			u.Host = net.JoinHostPort(h.HTTPGet.Host, port)
		}
		return fmt.Sprintf("http-get %s %s", u.String(), attrs)
	case h.TCPSocket != nil:
		return fmt.Sprintf("tcp-socket %s:%s %s", h.TCPSocket.Host, h.TCPSocket.Port.String(), attrs)
	case h.GRPC != nil:
		service := ""
		if h.GRPC.Service != nil {
			service = *h.GRPC.Service
		}
		return fmt.Sprintf("grpc <pod>:%d %s %s", h.GRPC.Port, service, attrs)
	}
	return "unknown " + attrs
}

// trueFalse is kubectl's printBool.
func trueFalse(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
