package nodeapi

import "testing"

func TestValidateUnsafeSysctl(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{
		"kernel.msg*": true, "kernel.shmmax": true, "kernel.sem": true, "fs.mqueue.*": true, "net.*": true,
		"net/core/somaxconn": true, "kernel.*": false, "vm.swappiness": false, "*": false, "net.*.x*": false, "": false,
	} {
		if err := ValidateUnsafeSysctl(p); (err == nil) != ok {
			t.Errorf("ValidateUnsafeSysctl(%q) = %v, want ok %v", p, err, ok)
		}
	}
}

// A pattern written with slashes matches the dotted name, a "*" only at the
// end matches a prefix, and a name matches only itself.
func TestSysctlMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"net.core.somaxconn", "net.core.somaxconn", true},
		{"net/core/somaxconn", "net.core.somaxconn", true},
		{"net.ipv4.conf.*", "net.ipv4.conf.eth0.1.forwarding", true},
		{"net/ipv4/conf/*", "net.ipv4.conf.all.forwarding", true},
		{"kernel.msg*", "kernel.msgmax", true},
		{"kernel.msg*", "kernel.shmmax", false},
		{"net.core.somaxconn", "net.core.somaxconn2", false},
		{"net.core", "net.core.somaxconn", false},
	} {
		if got := SysctlMatches(tc.pattern, tc.name); got != tc.want {
			t.Errorf("SysctlMatches(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestNormalizeSysctl(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"kernel.shm_rmid_forced":          "kernel.shm_rmid_forced",
		"kernel/shm_rmid_forced":          "kernel.shm_rmid_forced",
		"net/ipv4/conf/eth0.1/forwarding": "net.ipv4.conf.eth0/1.forwarding",
		"net.ipv4.conf.eth0/1.forwarding": "net.ipv4.conf.eth0/1.forwarding",
		"vm":                              "vm",
	} {
		if got := NormalizeSysctl(in); got != want {
			t.Errorf("NormalizeSysctl(%q) = %q, want %q", in, got, want)
		}
	}
}
