package daemon

import (
	"path/filepath"

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
