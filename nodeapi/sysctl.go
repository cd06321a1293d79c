package nodeapi

import (
	"fmt"
	"strings"
)

// SysctlNamespace is the Linux namespace that isolates the sysctl name
// (dotted, [NormalizeSysctl]): "ipc" (kernel.shm*, kernel.msg*, kernel.sem,
// fs.mqueue.*), "net" (net.*), or "" for a node-level one, as the kubelet
// places them. A pattern's prefix (before its "*") is placed the same way.
func SysctlNamespace(name string) string {
	switch {
	case strings.HasPrefix(name, "kernel.shm"), strings.HasPrefix(name, "kernel.msg"),
		name == "kernel.sem", strings.HasPrefix(name, "fs.mqueue."):
		return "ipc"
	case strings.HasPrefix(name, "net."):
		return "net"
	}
	return ""
}

// NormalizeSysctl turns a sysctl written with "/" separators
// (kernel/shm_rmid_forced, net/ipv4/conf/eth0.1/forwarding) into the dotted
// form, as the kubelet reads one: when the first separator is a "/", the
// slashes and dots swap. A dotted name is returned as it is.
func NormalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// ValidateUnsafeSysctl checks one entry of the kubelet's
// allowedUnsafeSysctls: a sysctl name or a prefix pattern ending in "*",
// namespaced (a node-level sysctl cannot be allowed to pods). The error
// quotes the pattern.
func ValidateUnsafeSysctl(pattern string) error {
	name := NormalizeSysctl(pattern)
	if strings.Contains(strings.TrimSuffix(name, "*"), "*") {
		return fmt.Errorf("%q: a pattern may only end in *", pattern)
	}
	prefix := strings.TrimSuffix(name, "*")
	if SysctlNamespace(prefix) == "" {
		return fmt.Errorf("%q is not known to be namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*)", pattern)
	}
	return nil
}

// SysctlMatches reports whether the allowedUnsafeSysctls entry pattern
// allows the sysctl name (dotted, [NormalizeSysctl]): pattern, normalized,
// is name itself, or ends in "*" and its prefix starts name.
func SysctlMatches(pattern, name string) bool {
	p := NormalizeSysctl(pattern)
	return p == name || strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*"))
}
