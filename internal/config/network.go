package config

import (
	"encoding/json"
	"net/netip"
	"strconv"
)

// reservedPodRanges are the address ranges a pod network must not overlap:
// the pods' addresses would shadow the node's loopback, link-local (the
// cloud metadata address 169.254.169.254 among them), multicast or
// unspecified addresses, or be no unicast address at all.
var reservedPodRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (0.0.0.0/8)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (127.0.0.0/8)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.0.0/16)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (224.0.0.0/4)"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast (255.255.255.255)"},
	{netip.MustParsePrefix("::/128"), "unspecified (::)"},
	{netip.MustParsePrefix("::1/128"), "loopback (::1)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast (ff00::/8)"},
}

// podCIDRReason returns why p cannot be the pod network, or "".
func podCIDRReason(p netip.Prefix) string {
	if p.Addr().Is4In6() {
		return "an IPv4-mapped IPv6 range; write the IPv4 range"
	}
	for _, r := range reservedPodRanges {
		if p.Overlaps(r.prefix) {
			return "overlaps the " + r.what + " range; pods need unicast addresses of their own"
		}
	}
	return ""
}

// checkListeners refuses two of the agent's TCP listeners on one port: the
// read-only port, the healthz port and, while the kubelet API is served
// (enableServer, with --kubeconfig), its port. The second would fail to
// bind for as long as the agent runs. Port 0 turns a listener off and
// shares nothing. The error names the field the file sets (of two, the
// later in that order).
func checkListeners(name string, a Agent, c Cluster, raw map[string]json.RawMessage) error {
	type listener struct {
		field, what string
		port        int32
	}
	ls := []listener{{"readOnlyPort", "readOnlyPort", a.ReadOnlyPort}, {"healthzPort", "healthzPort", a.HealthzPort}}
	if c.EnableServer {
		ls = append(ls, listener{"port", "port (the kubelet API's, served with --kubeconfig)", c.Port})
	}
	for i, x := range ls {
		for _, y := range ls[i+1:] {
			if x.port == 0 || x.port != y.port {
				continue
			}
			named, other := y, x
			if _, set := raw[y.field]; !set {
				named, other = x, y
			}
			return fieldError(name, named.field, strconv.Itoa(int(named.port)),
				"the same port as "+other.what+"; two listeners cannot share a port (0 turns one off)")
		}
	}
	return nil
}
