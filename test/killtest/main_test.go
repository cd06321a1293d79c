package main

import (
	"net"
	"slices"
	"testing"
)

// TestCNIRuleIDs: the sandbox IDs of the bridge plugin's NAT rules are read
// from iptables -S output, only for addresses of the agent's podCIDR.
func TestCNIRuleIDs(t *testing.T) {
	t.Parallel()
	rules := `-P POSTROUTING ACCEPT
-A POSTROUTING -s 10.180.237.18/32 -m comment --comment "name: \"nodekeeper\" id: \"1b78346026b1\"" -j CNI-3227fb00e5bee7111787c656
-A POSTROUTING -s 10.181.226.25/32 -m comment --comment "name: \"nodekeeper\" id: \"cc7c29f27d61\"" -j CNI-073205eca8c084a037c7a16b
-A POSTROUTING -s 10.180.237.54/32 -m comment --comment "name: \"nodekeeper\" id: \"b0edb09c869a\"" -j CNI-6166abd5921582e06513b909
-A POSTROUTING -s 10.180.237.0/24 -j MASQUERADE
`
	_, cidr, err := net.ParseCIDR("10.180.237.0/24")
	if err != nil {
		t.Fatal(err)
	}
	got := cniRuleIDs(rules, cidr)
	if want := []string{"1b78346026b1", "b0edb09c869a"}; !slices.Equal(got, want) {
		t.Errorf("cniRuleIDs = %q, want %q", got, want)
	}
}
