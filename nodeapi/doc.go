// Package nodeapi holds the contracts that nodekeeper's subsystems share with the
// agent that hosts them, and the small concepts several of them need:
//
//   - [PodKiller] and [KillRequest]: how eviction and preemption ask the agent's pod
//     workers to stop a pod and record its final status;
//   - [Recorder]: the event sink, with the method set of client-go's
//     record.EventRecorder, so a client-go recorder or [LogRecorder] can be passed;
//     node-level events name the Node object ([NodeRef]);
//   - pod names for logs and pod identity ([PodName], [KeyOf]);
//   - resource amounts with one overflow policy ([Amount], [PodRequest]) and
//     extended-resource names ([IsExtendedResourceName]);
//   - the kubelet defaults that more than one package needs ([DefaultMaxPods]);
//   - the pod-spec rules the kubelet applies, written once: which init
//     containers are sidecars ([IsSidecar]), whether a container that exited
//     restarts ([RestartsAfterExit]), the downward API's fields
//     ([FieldRefValue], [ResourceFieldValue], [ContainerRequests]), the
//     pod's memory limit and the size of a memory-backed volume
//     ([PodMemoryLimit], [TmpfsSize]), $(VAR) expansion ([ExpandVars]), and
//     which sysctls allowedUnsafeSysctls may name and what its patterns match
//     ([ValidateUnsafeSysctl], [SysctlMatches], [SysctlNamespace],
//     [NormalizeSysctl]).
//
// Everything here is a plain value or a pure function; the package keeps no state.
package nodeapi
