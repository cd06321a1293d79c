package containergc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's log locations.
const (
	DefaultPodLogsDir       = "/var/log/pods"
	DefaultContainerLogsDir = "/var/log/containers"
)

// LogDirs are where container logs live; an empty path leaves that place
// alone.
type LogDirs struct {
	// Pods holds one directory per pod, NAMESPACE_NAME_UID, as the kubelet
	// and CRI runtimes lay it out. The directory of a deleted pod is removed.
	Pods string
	// Containers holds the legacy symlinks POD_NAMESPACE_CONTAINER-ID.log
	// into Pods. A symlink whose target is gone is removed unless its
	// container still exists and has not exited.
	Containers string
}

// podUIDOfLogDir returns the UID of a pod log directory's name: the part
// after the last underscore (namespaces and names cannot hold one).
func podUIDOfLogDir(name string) string {
	return name[strings.LastIndexByte(name, '_')+1:]
}

// containerIDOfLogLink returns the container ID of a legacy log symlink's
// name, POD_NAMESPACE_CONTAINER-ID.log; ok is false for other names.
func containerIDOfLogLink(name string) (id string, ok bool) {
	base, ok := strings.CutSuffix(name, ".log")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(base, '-')
	if i < 0 || i == len(base)-1 {
		return "", false
	}
	return base[i+1:], true
}

// removeLogs removes the log directories of deleted pods and the dangling
// log symlinks of containers that are gone or exited. containers is the
// runtime's list after this pass's removals. Errors are collected, never
// fatal.
func (c *Collector) removeLogs(containers []*runtimeapi.Container) error {
	var errs []error
	if dir := c.deps.LogDirs.Pods; dir != "" && c.deps.Pods != nil {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("read pod log directory: %w", err))
		}
		for _, e := range entries {
			uid := podUIDOfLogDir(e.Name())
			if !e.IsDir() || uid == "" || !c.deps.Pods.IsPodDeleted(uid) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			c.log.Info("removing log directory of deleted pod", "path", path, "podUID", uid)
			if err := os.RemoveAll(path); err != nil {
				errs = append(errs, fmt.Errorf("remove pod log directory: %w", err))
			}
		}
	}
	if dir := c.deps.LogDirs.Containers; dir != "" {
		state := make(map[string]runtimeapi.ContainerState, len(containers))
		for _, ctr := range containers {
			state[ctr.GetId()] = ctr.GetState()
		}
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("read container log directory: %w", err))
		}
		for _, e := range entries {
			id, ok := containerIDOfLogLink(e.Name())
			if !ok || e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				continue // the target is still there
			}
			if st, exists := state[id]; exists && st != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue // created or running: its log file may yet appear
			}
			c.log.Info("removing dangling container log symlink", "path", path, "containerID", id)
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove container log symlink: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}
