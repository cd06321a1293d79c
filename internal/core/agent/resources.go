package agent

import (
	v1 "k8s.io/api/core/v1"
)

// podResources is where in-place resize will plug in: desired is what the
// pod's spec asks for each container, allocated what the pod's last
// successful SyncPod applied. They are equal once a sync ended well, since
// today a changed spec restarts the containers it changes (the container
// hash covers resources); a resize would instead hand allocated → desired
// to the runtime (UpdateContainerResources) and set allocated on its
// success, with the pod's resize status derived from the difference.
type podResources struct {
	desired, allocated map[string]v1.ResourceRequirements
}

// desiredResources is the resources pod's spec asks for, by container name
// (init containers included); nil for a nil pod.
func desiredResources(pod *v1.Pod) map[string]v1.ResourceRequirements {
	if pod == nil {
		return nil
	}
	r := make(map[string]v1.ResourceRequirements, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			r[c.Name] = c.Resources
		}
	}
	return r
}
