package podruntime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

// maxFileName is the longest file name ext4 allows.
const maxFileName = 255

// logSymlinkPath is the kubelet's legacy log symlink of a container in
// dir: POD_NAMESPACE_CONTAINER-ID.log, the part before ".log" cut to fit a
// file name.
func logSymlinkPath(dir, podName, namespace, container, id string) string {
	const suffix = ".log"
	name := podName + "_" + namespace + "_" + container + "-" + id
	if len(name) > maxFileName-len(suffix) {
		name = name[:maxFileName-len(suffix)]
	}
	return filepath.Join(dir, name+suffix)
}

// linkLog makes the legacy symlink to a started container's log file, as
// the kubelet does for log collectors that read ContainerLogsDir; none
// while the log file does not exist (it would dangle). Failures are logged:
// the container runs regardless.
func (m *Manager) linkLog(pod *v1.Pod, container, id, logPath string) {
	dir := m.cfg.ContainerLogsDir
	if dir == "" {
		return
	}
	if _, err := os.Stat(logPath); errors.Is(err, fs.ErrNotExist) {
		return
	}
	link := logSymlinkPath(dir, pod.Name, pod.Namespace, container, id)
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.Symlink(logPath, link)
	}
	if err != nil {
		m.log.Error("Failed to create legacy symbolic link", "path", link, "containerID", id, "containerLogPath", logPath, "err", err)
	}
}

// unlinkLog removes a removed container's legacy log symlink.
func (m *Manager) unlinkLog(c *runtimeapi.ContainerStatus) {
	dir := m.cfg.ContainerLogsDir
	l := c.GetLabels()
	if dir == "" || l[criconfig.LabelPodName] == "" {
		return
	}
	link := logSymlinkPath(dir, l[criconfig.LabelPodName], l[criconfig.LabelPodNamespace], l[criconfig.LabelContainerName], c.GetId())
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Error("Failed to remove legacy log symbolic link", "path", link, "containerID", c.GetId(), "err", err)
	}
}
