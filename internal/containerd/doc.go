// Package containerd runs the containerd that nodekeeper manages when no
// containerRuntimeEndpoint is configured: its config (under one state
// directory: root, state, socket, log), the pod network's CNI config, its
// supervision (restarted with back-off when it dies, stopped without its pods
// when the agent stops) and the import of image tarballs.
//
// New validates a Config and resolves its defaults and detections (may this
// process lower oom_score_adj? does an overlay mount work where containerd
// keeps its layers?); Run writes the configs and supervises containerd until
// its ctx ends. Ready is closed when the CRI API first answers; Restarts
// signals each later restart, the agent's cue to resync its pods.
//
// containerd runs in its own process group with Pdeathsig SIGKILL, so it dies
// with a SIGKILLed agent; its shims, and so the pods, survive, and the next
// containerd started on the same state directory re-attaches them. That is
// how pods outlive an agent restart.
package containerd
