package kubenode

import (
	"errors"
	"fmt"
	"net"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// HostIP returns the address the kubelet reports as the node's InternalIP
// when none is configured: the first address the node name resolves to that
// is a usable node IP (checkNodeIP) and belongs to one of the host's
// interfaces, IPv4 first, else the IPv4 address of the default-route
// interface (apimachinery's ChooseHostInterface). It resolves names and
// reads the host's interfaces; the daemon calls it once at start and passes
// the result as Config.NodeIP.
func HostIP(nodeName string) (net.IP, error) {
	if ip := net.ParseIP(nodeName); ip != nil && checkNodeIP(ip) == nil {
		return ip, nil
	}
	local, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("host addresses: %w", err)
	}
	onHost := func(ip net.IP) bool {
		for _, a := range local {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	addrs, _ := net.LookupIP(nodeName) // no DNS answer: the default route decides
	var found net.IP
	for _, ip := range addrs {
		if checkNodeIP(ip) != nil || !onHost(ip) {
			continue
		}
		if ip.To4() != nil {
			return ip, nil
		}
		if found == nil {
			found = ip
		}
	}
	if found != nil {
		return found, nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return nil, fmt.Errorf("node %q has no usable address: %w", nodeName, err)
	}
	return ip, nil
}

// checkNodeIP refuses the addresses the kubelet refuses as a node IP.
func checkNodeIP(ip net.IP) error {
	switch {
	case ip.IsLoopback():
		return errors.New("a loopback address")
	case ip.IsMulticast():
		return errors.New("a multicast address")
	case ip.IsLinkLocalUnicast():
		return errors.New("a link-local address")
	case ip.IsUnspecified():
		return errors.New("the unspecified address")
	}
	return nil
}
