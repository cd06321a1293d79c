// Package config loads a kubelet configuration file (apiVersion
// kubelet.config.k8s.io/v1beta1, kind KubeletConfiguration) written in YAML or
// JSON, applies the kubelet's defaults to the fields nodekeeper uses, validates
// them and resolves what the subsystems need: the eviction configuration, the
// reserved resources and the pod limit.
//
// Decoding is strict: a key that is not a KubeletConfiguration field is an error.
// Fields that are KubeletConfiguration fields but that nodekeeper does not use are
// decoded (so their types are still checked) and reported in one warning.
//
// Defaults, as the kubelet applies them. Paths are in kubernetes/kubernetes;
// "defaults.go" is pkg/kubelet/apis/config/v1beta1/defaults.go.
//
//	evictionHard                      memory.available 100Mi, nodefs.available 10%,
//	                                  nodefs.inodesFree 5%, imagefs.available 15%,
//	                                  imagefs.inodesFree 5% (Linux; the last one since
//	                                  v1.30), only when the file has no evictionHard
//	                                  map (pkg/kubelet/eviction/defaults_linux.go,
//	                                  defaults.go)
//	mergeDefaultEvictionSettings      false; when true, default signals missing from
//	                                  evictionHard are added (defaults.go, since v1.33)
//	evictionSoft, evictionSoftGracePeriod, evictionMinimumReclaim
//	                                  none
//	evictionPressureTransitionPeriod  5m; 0 also means 5m (defaults.go)
//	evictionMaxPodGracePeriod         0 seconds (defaults.go)
//	enforceNodeAllocatable            [pods] when absent; with "pods", every hard
//	                                  memory.available threshold gets an
//	                                  allocatableMemory.available twin
//	                                  (defaults.go, pkg/kubelet/eviction/helpers.go)
//	localStorageCapacityIsolation     true (defaults.go)
//	maxPods                           110 (nodeapi.DefaultMaxPods)
//	podPidsLimit                      -1, no limit (defaults.go)
//	imageGCHighThresholdPercent       85 (defaults.go)
//	imageGCLowThresholdPercent        80 (defaults.go)
//	imageMinimumGCAge                 2m; 0 also means 2m (defaults.go)
//	imageMaximumGCAge                 0, disabled (defaults.go, KEP-4210)
//	kubeReserved, systemReserved      none
//	staticPodPath                     none
//	containerRuntimeEndpoint          kept as written; empty means nodekeeper's own
//	                                  containerd (the kubelet defaults it to
//	                                  containerd's socket)
//	imageServiceEndpoint              kept as written; empty means the runtime's
//	healthzBindAddress, healthzPort   127.0.0.1, 10248; port 0 turns it off (defaults.go)
//	systemCgroups, kubeletCgroups     none; accepted, but nodekeeper moves no process
//	                                  into them (a warning when set)
//	featureGates                      none; nodekeeper acts on KubeletCrashLoopBackOffMax
//	                                  (on by default) and ReduceDefaultCrashLoopBackOffDecay
//	                                  (off) only (a warning names the others set)
//	crashLoopBackOff.maxContainerRestartPeriod
//	                                  300s with KubeletCrashLoopBackOffMax on, 1s to 300s;
//	                                  must not be set with it off (defaults.go, validation.go)
//	clusterDomain                     none (pod FQDNs end in "svc.")
//	serializeImagePulls               true, unless maxParallelImagePulls is 2 or more
//	                                  (defaults.go): one image pull at a time
//	maxParallelImagePulls             none: no bound once serializeImagePulls is false;
//	                                  at least 1, and at most 1 while serializeImagePulls
//	                                  is true (validation.go)
//	allowedUnsafeSysctls              none: pods may set the safe sysctls only
//	failCgroupV1                      true (defaults.go, since v1.35): run refuses cgroup v1
//	failSwapOn                        true (defaults.go): run refuses a machine with swap on
//	memorySwap.swapBehavior           NoSwap ("" is NoSwap; LimitedSwap needs cgroup v2)
//	cgroupDriver                      cgroupfs; unset, run takes the container runtime's
//	                                  (CRI RuntimeConfig); set, the runtime must agree
//
// LoadSources adds the kubelet's other two sources: the drop-in directory
// (--config-dir), whose *.conf files are merged over the file in lexical
// order as JSON merge patches (cmd/kubelet/app/server.go,
// mergeKubeletConfigurations: over the file's defaulted evictionHard), and the
// command-line flags that set a field, which win over both. An error names
// the file or the flag that set the field last.
//
// Validation follows the kubelet's (pkg/kubelet/apis/config/validation and
// pkg/kubelet/eviction/helpers.go): thresholds as eviction.ParseThresholds
// checks them, image GC percentages within [0, 100] with low <= high,
// imageMaximumGCAge 0 or above imageMinimumGCAge, reserved quantities parseable
// and not negative for cpu, memory, ephemeral-storage and pid, no negative
// durations or counts. nodekeeper refuses besides a podCIDR that overlaps a
// loopback, link-local, multicast, broadcast or unspecified range, and two
// of its TCP listeners on one port (readOnlyPort, healthzPort, and port while
// enableServer is true; 0 turns a listener off and shares nothing): the
// second would fail to bind for as long as the agent runs.
package config
