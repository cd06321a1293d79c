// Package devicemanager serves the kubelet's device-plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) so that existing device
// plugins work with nodekeeper unchanged.
//
// A Manager listens for plugin registrations on kubelet.sock in the
// device-plugin directory, keeps the healthy and unhealthy devices of every
// resource from each plugin's ListAndWatch stream, assigns devices to
// containers at pod admission (Allocate) and hands the plugins' answers to the
// runtime side as CRI-ready options (ContainerOptions). Assignments survive
// restarts in the kubelet's own checkpoint file, kubelet_internal_checkpoint,
// which the kubelet and nodekeeper can read from each other.
//
// Beyond the kubelet, the Allocate RPC has a timeout so that a hung
// plugin fails one admission instead of blocking all of them. Each container
// also carries its device IDs in the AnnotationDevices annotation: when the
// checkpoint is unreadable, Run rebuilds the assignments of the runtime's
// live containers from it (Deps.RuntimeDevices), with a node event and a
// metric, and devices are freed only once no live container holds them. The
// pod-resources API (ContainerDevices, AllocatableDevices) reads the same
// state.
package devicemanager
