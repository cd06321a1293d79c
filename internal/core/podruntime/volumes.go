package podruntime

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
)

// errVolumesNotReady is the sync error of a pod some of whose volumes could
// not be written yet.
var errVolumesNotReady = errors.New("volumes not ready")

// setUpVolumes writes (or refreshes) the pod's configMap, secret,
// downwardAPI and projected volumes, recording a FailedMount event for each
// that fails. It returns an error (errVolumesNotReady) when one was never
// written: the pod's containers cannot start until it is. A failed refresh
// keeps the last content and does not stop the sync.
func (m *Manager) setUpVolumes(ctx context.Context, pod *v1.Pod) error {
	var notReady []error
	for _, f := range m.vols.SetUp(ctx, pod, m.volumeResource(pod)) {
		m.rec.Event(pod, v1.EventTypeWarning, "FailedMount", f.Error())
		if !f.Ready {
			notReady = append(notReady, f)
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("%w: %w", errVolumesNotReady, errors.Join(notReady...))
	}
	return nil
}

// volumeResource resolves a downwardAPI volume's resourceFieldRef, which
// names its container.
func (m *Manager) volumeResource(pod *v1.Pod) volumes.ResourceValue {
	return func(ref *v1.ResourceFieldSelector) (string, error) {
		var c *v1.Container
		for _, x := range allContainers(pod) {
			if x.Name == ref.ContainerName {
				c = x
			}
		}
		if c == nil {
			return "", fmt.Errorf("resourceFieldRef.containerName %q is not a container of the pod", ref.ContainerName)
		}
		return resourceFieldValue(containerInput{pod: pod, container: c, memCapacity: m.cfg.MemoryCapacity, cpus: m.cfg.CPUs}, ref)
	}
}
