package podresources

import (
	"context"

	podresourcesv1alpha1 "k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

// alphaVersion labels the v1alpha1 requests in the metrics.
const alphaVersion = "v1alpha1"

// alphaServer serves the pod-resources API v1alpha1 (List only), which the
// kubelet still registers on the same socket beside v1 and which clients of
// old, such as the node e2e suite's device-plugin specs, read. It answers
// from the same state as the Server it wraps.
type alphaServer struct {
	podresourcesv1alpha1.UnimplementedPodResourcesListerServer
	s *Server
}

// List returns the devices of each active pod's regular containers: v1alpha1
// has no init containers (the kubelet lists only spec.containers there). It
// is safe for concurrent use, as Server's methods are.
func (a alphaServer) List(_ context.Context, _ *podresourcesv1alpha1.ListPodResourcesRequest) (*podresourcesv1alpha1.ListPodResourcesResponse, error) {
	a.s.requests.WithLabelValues(alphaVersion).Inc() // the kubelet counts v1alpha1 in no other metric
	pods := a.s.deps.ActivePods()
	out := &podresourcesv1alpha1.ListPodResourcesResponse{PodResources: make([]*podresourcesv1alpha1.PodResources, 0, len(pods))}
	for _, p := range pods {
		pr := &podresourcesv1alpha1.PodResources{Name: p.Name, Namespace: p.Namespace}
		for _, c := range p.Spec.Containers {
			cr := &podresourcesv1alpha1.ContainerResources{Name: c.Name}
			if a.s.deps.Devices != nil {
				for _, d := range a.s.deps.Devices.ContainerDevices(string(p.UID), c.Name) {
					cr.Devices = append(cr.Devices, &podresourcesv1alpha1.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: d.DeviceIds})
				}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		out.PodResources = append(out.PodResources, pr)
	}
	return out, nil
}
