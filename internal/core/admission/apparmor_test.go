package admission

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAppArmorHandler: on a host without AppArmor a pod asking for a
// profile in a field or the annotation is rejected with the kubelet's
// reason and message; unconfined and profile-less pods, and any pod on a
// host with AppArmor, are admitted.
func TestAppArmorHandler(t *testing.T) {
	rd := &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
	un := &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
	pod := func(edit func(*v1.Pod)) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
		edit(p)
		return p
	}
	cases := []struct {
		name  string
		pod   *v1.Pod
		needs bool
	}{
		{"none", pod(func(*v1.Pod) {}), false},
		{"pod field", pod(func(p *v1.Pod) { p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: rd} }), true},
		{"container field", pod(func(p *v1.Pod) { p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: rd} }), true},
		{"unconfined field", pod(func(p *v1.Pod) { p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: un} }), false},
		{"annotation", pod(func(p *v1.Pod) {
			p.Annotations = map[string]string{appArmorAnnotationPrefix + "c": v1.DeprecatedAppArmorBetaProfileRuntimeDefault}
		}), true},
		{"unconfined annotation", pod(func(p *v1.Pod) {
			p.Annotations = map[string]string{appArmorAnnotationPrefix + "c": v1.DeprecatedAppArmorBetaProfileNameUnconfined}
		}), false},
	}
	for _, tc := range cases {
		for _, enabled := range []bool{false, true} {
			resp := Response{Admit: true}
			if err := (&AppArmorHandler{Enabled: enabled}).Admit(context.Background(), &Request{Pod: tc.pod}, &resp); err != nil {
				t.Fatal(err)
			}
			wantReject := tc.needs && !enabled
			if resp.Admit == wantReject {
				t.Errorf("%s, enabled %v: admit %v, want %v", tc.name, enabled, resp.Admit, !wantReject)
			}
			if wantReject && (resp.Reason != "AppArmor" || resp.Message != "Cannot enforce AppArmor: AppArmor is not enabled on the host") {
				t.Errorf("%s: rejected with %q %q", tc.name, resp.Reason, resp.Message)
			}
		}
	}
}

func TestHostAppArmorEnabled(t *testing.T) {
	sys := t.TempDir()
	if HostAppArmorEnabled(sys) {
		t.Error("enabled without the module's parameter")
	}
	dir := filepath.Join(sys, "module", "apparmor", "parameters")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]bool{"Y\n": true, "N\n": false} {
		if err := os.WriteFile(filepath.Join(dir, "enabled"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := HostAppArmorEnabled(sys); got != want {
			t.Errorf("enabled %q: %v, want %v", content, got, want)
		}
	}
}
