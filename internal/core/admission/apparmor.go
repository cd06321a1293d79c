package admission

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ReasonAppArmor is the kubelet's rejection reason for a pod asking for an
// AppArmor profile the node cannot enforce.
const ReasonAppArmor = "AppArmor"

// HostAppArmorEnabled reports whether the kernel under sysRoot (normally
// /sys) has AppArmor enabled: module/apparmor/parameters/enabled reads Y.
func HostAppArmorEnabled(sysRoot string) bool {
	b, err := os.ReadFile(filepath.Join(sysRoot, "module", "apparmor", "parameters", "enabled"))
	return err == nil && strings.HasPrefix(string(b), "Y")
}

// AppArmorHandler rejects, as the kubelet does, a pod that asks for an
// AppArmor profile (RuntimeDefault or Localhost, in the pod's or a
// container's securityContext or in the deprecated per-container
// annotation) on a node without AppArmor.
type AppArmorHandler struct {
	Enabled bool
}

// Name returns "apparmor".
func (h *AppArmorHandler) Name() string { return "apparmor" }

// Admit rejects a pod that needs AppArmor when the host has none.
func (h *AppArmorHandler) Admit(_ context.Context, req *Request, resp *Response) error {
	if !h.Enabled && needsAppArmor(req.Pod) {
		resp.Reject(ReasonAppArmor, "Cannot enforce AppArmor: AppArmor is not enabled on the host")
	}
	return nil
}

// appArmorAnnotationPrefix is the deprecated per-container annotation.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// needsAppArmor reports whether pod asks for a confining AppArmor profile.
func needsAppArmor(pod *v1.Pod) bool {
	confining := func(p *v1.AppArmorProfile) bool {
		return p != nil && p.Type != v1.AppArmorProfileTypeUnconfined
	}
	if sc := pod.Spec.SecurityContext; sc != nil && confining(sc.AppArmorProfile) {
		return true
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if sc := cs[i].SecurityContext; sc != nil && confining(sc.AppArmorProfile) {
				return true
			}
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, appArmorAnnotationPrefix) && v != "" && v != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}
