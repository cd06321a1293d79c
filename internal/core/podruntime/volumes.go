package podruntime

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/volumes"
	"github.com/nodekeeper/nodekeeper/nodeapi"
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
	limits := criconfig.NodeLimits(m.cfg.CPUs, m.cfg.MemoryCapacity)
	return func(ref *v1.ResourceFieldSelector) (string, error) {
		return nodeapi.ResourceFieldValue(pod, nil, ref, limits)
	}
}
