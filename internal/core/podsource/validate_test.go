package podsource

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestValidateProtectsTheNode: the rules of the API server (and, for a
// hostPath, an absolute path) that keep a local or static pod from reaching
// beyond what it names on the node: hostPath paths and types, subPaths that
// leave their volume, user and group IDs, procMount, capability names,
// privileged without privilege escalation, and seccomp and AppArmor
// profiles. Each error names the file, the pod, the field path and the
// value (issue 26, item 12); the valid forms pass.
func TestValidateProtectsTheNode(t *testing.T) {
	t.Parallel()
	const file = "local.yaml"
	const head = file + `: document 1: pod "web": `
	hostPath := func(path, typ string) string {
		s := "volumes:\n- name: h\n  hostPath:\n    path: " + path
		if typ != "" {
			s += "\n    type: " + typ
		}
		return s
	}
	mount := func(extra string) string { return "volumeMounts:\n- name: v\n  mountPath: /v\n  " + extra }
	const emptyDir = "volumes:\n- name: v\n  emptyDir: {}"
	for _, tc := range []struct {
		name, spec, ctr string
		want            string // "" for a valid pod
	}{
		{"hostPath type Bogus", hostPath("/data", "Bogus"), "",
			`spec.volumes[0].hostPath.type: "Bogus": want "", DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice or BlockDevice`},
		{"hostPath with ..", hostPath("/data/../etc", ""), "", `spec.volumes[0].hostPath.path: "/data/../etc": must not contain '..'`},
		{"hostPath ending in ..", hostPath("/var/..", ""), "", `spec.volumes[0].hostPath.path: "/var/..": must not contain '..'`},
		{"relative hostPath", hostPath("data/x", ""), "", `spec.volumes[0].hostPath.path: "data/x": must be an absolute path`},
		{"hostPath .. elsewhere named", hostPath("/data/..x/y", "DirectoryOrCreate"), "", ""},
		{"hostPath types", "volumes:\n- {name: a, hostPath: {path: /a, type: Directory}}\n- {name: b, hostPath: {path: /b, type: FileOrCreate}}\n" +
			"- {name: c, hostPath: {path: /c, type: Socket}}\n- {name: d, hostPath: {path: /d, type: CharDevice}}\n" +
			"- {name: e, hostPath: {path: /e, type: BlockDevice}}\n- {name: f, hostPath: {path: /f, type: File}}\n- {name: g, hostPath: {path: /g, type: ''}}", "", ""},
		{"absolute subPath", emptyDir, mount("subPath: /etc"), `spec.containers[0].volumeMounts[0].subPath: "/etc": must be a relative path`},
		{"subPath with ..", emptyDir, mount("subPath: a/../../b"), `spec.containers[0].volumeMounts[0].subPath: "a/../../b": must not contain '..'`},
		{"subPathExpr with ..", emptyDir, mount("subPathExpr: $(POD)/.."), `spec.containers[0].volumeMounts[0].subPathExpr: "$(POD)/..": must not contain '..'`},
		{"subPath and subPathExpr", emptyDir, mount("subPath: a\n  subPathExpr: b"),
			`spec.containers[0].volumeMounts[0].subPathExpr: "b": subPath and subPathExpr are mutually exclusive`},
		{"relative subPath", emptyDir, mount("subPath: a/b"), ""},
		{"negative runAsUser", "", "securityContext: {runAsUser: -1}",
			`spec.containers[0].securityContext.runAsUser: -1: must be between 0 and 2147483647, inclusive`},
		{"runAsUser beyond int32", "", "securityContext: {runAsUser: 2147483648}",
			`spec.containers[0].securityContext.runAsUser: 2147483648: must be between 0 and 2147483647, inclusive`},
		{"negative runAsGroup", "", "securityContext: {runAsGroup: -5}",
			`spec.containers[0].securityContext.runAsGroup: -5: must be between 0 and 2147483647, inclusive`},
		{"negative pod runAsUser", "securityContext: {runAsUser: -1}", "",
			`spec.securityContext.runAsUser: -1: must be between 0 and 2147483647, inclusive`},
		{"negative fsGroup", "securityContext: {fsGroup: -2}", "", `spec.securityContext.fsGroup: -2: must be between 0 and 2147483647, inclusive`},
		{"negative supplementalGroup", "securityContext: {supplementalGroups: [10, -3]}", "",
			`spec.securityContext.supplementalGroups[1]: -3: must be between 0 and 2147483647, inclusive`},
		{"root is an ID", "securityContext: {runAsUser: 0, runAsGroup: 0, fsGroup: 0}", "securityContext: {runAsUser: 0}", ""},
		{"procMount unknown", "", "securityContext: {procMount: Raw}", `spec.containers[0].securityContext.procMount: "Raw": want Default or Unmasked`},
		{"procMount Unmasked on host users", "", "securityContext: {procMount: Unmasked}",
			`spec.containers[0].securityContext.procMount: "Unmasked": needs spec.hostUsers false`},
		{"procMount Unmasked in a user namespace", "hostUsers: false", "securityContext: {procMount: Unmasked}", ""},
		{"empty capability", "", "securityContext: {capabilities: {add: [NET_ADMIN, '']}}",
			`spec.containers[0].securityContext.capabilities.add[1]: "": must not be empty`},
		{"empty dropped capability", "", "securityContext: {capabilities: {drop: [' ']}}",
			`spec.containers[0].securityContext.capabilities.drop[0]: " ": must not be empty`},
		{"privileged without escalation", "", "securityContext: {privileged: true, allowPrivilegeEscalation: false}",
			`spec.containers[0].securityContext.allowPrivilegeEscalation: "false": cannot be false while privileged is true`},
		{"seccomp type", "securityContext: {seccompProfile: {type: Open}}", "",
			`spec.securityContext.seccompProfile.type: "Open": want RuntimeDefault, Unconfined or Localhost`},
		{"seccomp localhost escapes", "", "securityContext: {seccompProfile: {type: Localhost, localhostProfile: ../../etc/x.json}}",
			`spec.containers[0].securityContext.seccompProfile.localhostProfile: "../../etc/x.json": must not contain '..'`},
		{"seccomp localhost absolute", "", "securityContext: {seccompProfile: {type: Localhost, localhostProfile: /etc/x.json}}",
			`spec.containers[0].securityContext.seccompProfile.localhostProfile: "/etc/x.json": must be a relative path`},
		{"seccomp localhost missing", "", "securityContext: {seccompProfile: {type: Localhost}}",
			`spec.containers[0].securityContext.seccompProfile.localhostProfile: "": required with type Localhost`},
		{"seccomp profile without Localhost", "", "securityContext: {seccompProfile: {type: RuntimeDefault, localhostProfile: a.json}}",
			`spec.containers[0].securityContext.seccompProfile.localhostProfile: "a.json": only with type Localhost`},
		{"AppArmor type", "", "securityContext: {appArmorProfile: {type: Strict}}",
			`spec.containers[0].securityContext.appArmorProfile.type: "Strict": want RuntimeDefault, Unconfined or Localhost`},
		{"valid profiles", "securityContext: {seccompProfile: {type: RuntimeDefault}, appArmorProfile: {type: Localhost, localhostProfile: k8s-x}}",
			"securityContext: {seccompProfile: {type: Localhost, localhostProfile: profiles/a.json}, capabilities: {add: [NET_ADMIN], drop: [ALL]}}", ""},
		{"container restart rules", "", "restartPolicy: Never\nrestartPolicyRules:\n- {action: RestartAllContainers, exitCodes: {operator: In, values: [42]}}\n- {action: Restart, exitCodes: {operator: NotIn, values: [0]}}", ""},
		{"container restartPolicy unknown", "", "restartPolicy: Sometimes", `spec.containers[0].restartPolicy: "Sometimes": want Always, OnFailure, Never or unset`},
		{"restart rules without a restartPolicy", "", "restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]",
			`spec.containers[0].restartPolicyRules[0]: "Restart": restartPolicyRules need the container's restartPolicy`},
		{"restart rule action unknown", "", "restartPolicy: Never\nrestartPolicyRules: [{action: RestartPod, exitCodes: {operator: In, values: [1]}}]",
			`spec.containers[0].restartPolicyRules[0].action: "RestartPod": want Restart or RestartAllContainers`},
		{"restart rule without exitCodes", "", "restartPolicy: Never\nrestartPolicyRules: [{action: Restart}]",
			`spec.containers[0].restartPolicyRules[0].exitCodes: "": required`},
		{"restart rule operator unknown", "", "restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: Is, values: [1]}}]",
			`spec.containers[0].restartPolicyRules[0].exitCodes.operator: "Is": want In or NotIn`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pods, errs := ParsePods(file, []byte(pod("web", tc.spec, tc.ctr)), "node-1")
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
			}
			if tc.want == "" {
				if len(errs) > 0 || len(pods) != 1 {
					t.Errorf("valid pod: %d pods, errors %q", len(pods), got)
				}
				return
			}
			if diff := cmp.Diff([]string{head + tc.want}, got); diff != "" || len(pods) != 0 {
				t.Errorf("%d pods; errors (-want +got):\n%s", len(pods), diff)
			}
		})
	}
}
