package daemon

import (
	"context"
	"maps"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/internal/core/node"
	"github.com/nodekeeper/nodekeeper/internal/servers/podresources"
)

// Device plugins and the pod-resources API live under the root directory as
// under the kubelet's (/var/lib/kubelet/device-plugins/kubelet.sock and
// /var/lib/kubelet/pod-resources/kubelet.sock); the kubelet has no flag for
// either.
func devicePluginDir(rootDir string) string { return filepath.Join(rootDir, "device-plugins") }

func podResourcesSocket(rootDir string) string {
	return filepath.Join(rootDir, podresources.Dir, podresources.SocketName)
}

// lazyDevices gives the pod runtime, built before the node-level managers,
// the device manager once node.New has built it.
type lazyDevices struct{ n **node.Node }

func (d lazyDevices) ContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.ContainerOptions, error) {
	if *d.n == nil || (*d.n).Devices == nil {
		return nil, nil
	}
	return (*d.n).Devices.ContainerOptions(ctx, pod, c)
}

// withDevices adds the device plugins' resources (healthy and unhealthy
// devices) to the node's capacity: admission derives allocatable from it, and
// the node package replaces the device resources' allocatable with their
// healthy devices.
func withDevices(c v1.ResourceList, n *node.Node) v1.ResourceList {
	if n == nil || n.Devices == nil {
		return c
	}
	devices, _, _ := n.Devices.Capacity()
	out := maps.Clone(c)
	if out == nil {
		out = v1.ResourceList{}
	}
	maps.Copy(out, devices)
	return out
}
