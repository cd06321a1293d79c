package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sysctls: safe ones pass, unsafe ones only when allowed (by name or
// pattern, dotted or slashed), never a net (ipc) one with the host's
// network (IPC) namespace; rejections carry the kubelet's reason and
// message (node e2e "should not launch unsafe, but not explicitly enabled
// sysctls on the node").
func TestSysctlHandler(t *testing.T) {
	t.Parallel()
	pod := func(hostNet, hostIPC bool, names ...string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: v1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC, SecurityContext: &v1.PodSecurityContext{}}}
		for _, n := range names {
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
		}
		return p
	}
	allowed := []string{"kernel.msg*", "net.core.somaxconn"}
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		allowed []string
		want    string // "" admitted, else the message
	}{
		{name: "none", pod: &v1.Pod{}},
		{name: "safe", pod: pod(false, false, "kernel.shm_rmid_forced", "net.ipv4.tcp_keepalive_time")},
		{name: "safe, slashed", pod: pod(false, false, "kernel/shm_rmid_forced")},
		{name: "unsafe", pod: pod(false, false, "kernel.msgmax"), want: `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{name: "unsafe, allowed by pattern", pod: pod(false, false, "kernel.msgmax"), allowed: allowed},
		{name: "unsafe, allowed by name", pod: pod(false, false, "net.core.somaxconn"), allowed: allowed},
		{name: "unsafe, another", pod: pod(false, false, "net.core.rmem_max"), allowed: allowed, want: `forbidden sysctl: "net.core.rmem_max" not allowlisted`},
		{name: "net with host network", pod: pod(true, false, "net.ipv4.ip_local_port_range"),
			want: `forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host net enabled`},
		{name: "ipc with host IPC", pod: pod(false, true, "kernel.shm_rmid_forced"),
			want: `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled`},
		{name: "net with host IPC", pod: pod(false, true, "net.ipv4.tcp_syncookies")},
	} {
		resp := &Response{Admit: true}
		h := &SysctlHandler{AllowedUnsafe: tc.allowed}
		if err := h.Admit(t.Context(), &Request{Pod: tc.pod}, resp); err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.want == "" && !resp.Admit:
			t.Errorf("%s: rejected: %s %s", tc.name, resp.Reason, resp.Message)
		case tc.want != "" && (resp.Admit || resp.Reason != ReasonSysctlForbidden || resp.Message != tc.want):
			t.Errorf("%s: admit %v, %s %q; want SysctlForbidden %q", tc.name, resp.Admit, resp.Reason, resp.Message, tc.want)
		}
	}
}

// A pod for another operating system is rejected, by its spec.os or by its
// kubernetes.io/os label (node e2e "should reject pod when the node OS
// doesn't match pod's OS").
func TestOSHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		pod          *v1.Pod
		reason, desc string
	}{
		{name: "no os", pod: &v1.Pod{}},
		{name: "linux", pod: &v1.Pod{Spec: v1.PodSpec{OS: &v1.PodOS{Name: v1.Linux}}}},
		{name: "windows", pod: &v1.Pod{Spec: v1.PodSpec{OS: &v1.PodOS{Name: v1.Windows}}},
			reason: ReasonPodOSNotSupported, desc: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "label", pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelOSStable: "windows"}}},
			reason: ReasonPodOSSelectorMismatch, desc: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
	} {
		resp := &Response{Admit: true}
		if err := (&OSHandler{OS: "linux"}).Admit(t.Context(), &Request{Pod: tc.pod}, resp); err != nil {
			t.Fatal(err)
		}
		if resp.Admit != (tc.reason == "") || resp.Reason != tc.reason || resp.Message != tc.desc {
			t.Errorf("%s: admit %v %s %q; want %s %q", tc.name, resp.Admit, resp.Reason, resp.Message, tc.reason, tc.desc)
		}
	}
}
