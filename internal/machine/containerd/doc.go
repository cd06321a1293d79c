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
// containerd runs in its own session (and, with Config.Place, its own cgroup)
// without Pdeathsig, so it outlives a SIGKILLed agent, as a runtime outlives a
// crashed kubelet: an operation in flight is not cut off. Its pid and start
// time are kept in StateDir/containerd.pid; the next Run on the same state
// directory adopts that containerd when the process is still the recorded one
// (same start time, same --config) and its CRI API answers, and watches it
// through a pidfd, restarting it when it dies as it would its child. Any other
// containerd running with the state directory's config is killed; nothing
// else is. StopRecorded stops a containerd left so (`nodekeeper
// stop-runtime`). Its shims, and so the pods, survive containerd's own stops
// and restarts: the next containerd on the state directory re-attaches them.
// Test harnesses set Config.DieWithParent (Pdeathsig) to leave nothing behind.
//
// Each time a containerd answers, before Ready or a restart is signalled, Run
// calls Clean: it removes what an interrupted operation (a containerd killed
// while it created a task) left under StateDir — shims of this socket whose
// task containerd does not know, `runc init` processes of unknown containers
// and stale task directories — and nothing else. While containerd runs, a
// `runc init` of its runc root seen for a minute, or one that ran before
// Ready or the restart was signalled, at the first pass (reapInterval), is
// killed and its task deleted: a task created and never started (the agent died in the middle of
// StartContainer) otherwise holds its pod cgroup, and blocks the removal of
// its container, forever.
package containerd
