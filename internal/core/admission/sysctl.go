package admission

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// ReasonSysctlForbidden is the kubelet's rejection reason for a pod setting
// a sysctl the node does not allow.
const ReasonSysctlForbidden = "SysctlForbidden"

// safeSysctls are the sysctls every pod may set, the kubelet's safe set
// (each namespaced and isolated from the other pods; all need a kernel of
// 4.15 or later, which nodekeeper does not check).
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem",
}

// SysctlHandler rejects, as the kubelet does, a pod setting a sysctl that is
// neither safe nor allowed by allowedUnsafeSysctls, or a net (ipc) sysctl
// in a pod on the host's network (IPC) namespace.
type SysctlHandler struct {
	// AllowedUnsafe are the kubelet's allowedUnsafeSysctls, valid
	// (nodeapi.ValidateUnsafeSysctl).
	AllowedUnsafe []string
}

// Name returns "sysctl".
func (h *SysctlHandler) Name() string { return "sysctl" }

// Admit rejects a pod with a sysctl the node does not allow.
func (h *SysctlHandler) Admit(_ context.Context, req *Request, resp *Response) error {
	sc := req.Pod.Spec.SecurityContext
	if sc == nil {
		return nil
	}
	for _, s := range sc.Sysctls {
		if err := h.check(nodeapi.NormalizeSysctl(s.Name), req.Pod); err != nil {
			resp.Reject(ReasonSysctlForbidden, "forbidden sysctl: "+err.Error())
			return nil
		}
	}
	return nil
}

// check is nil when pod may set sysctl name.
func (h *SysctlHandler) check(name string, pod *v1.Pod) error {
	allowed := slices.Contains(safeSysctls, name)
	for _, p := range h.AllowedUnsafe {
		if nodeapi.SysctlMatches(p, name) {
			allowed = true
		}
	}
	if !allowed {
		return fmt.Errorf("%q not allowlisted", name)
	}
	switch ns := nodeapi.SysctlNamespace(name); {
	case ns == "net" && pod.Spec.HostNetwork, ns == "ipc" && pod.Spec.HostIPC:
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}
