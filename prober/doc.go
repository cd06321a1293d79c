// Package prober runs the liveness, readiness and startup probes of the
// containers on a node, with the kubelet's semantics, and publishes their
// results to the agent's sync loop.
//
// A [Manager] keeps one probe per (pod, container, probe type). Probes do not
// own goroutines: one scheduler goroutine keeps them in a min-heap ordered by
// due time behind a single timer and hands due probes to a bounded pool of
// goroutines, so ten thousand probes cost a heap, not ten thousand tickers.
// What a probe does at each tick, and how a sequence of probe outcomes turns
// into reported results (thresholds, on-hold after a liveness failure or a
// startup verdict), are pure functions of their inputs ([decideTick],
// [observe]).
//
// The mechanisms (exec, HTTP, TCP, gRPC) each sit behind [Runner]; exec goes
// through the CRI ExecSync call, the others dial the pod over the network
// with SO_LINGER set so closed probe sockets do not pile up in TIME-WAIT.
//
// Results are published per probe type through [Results]: a cache read with
// [Results.Get] and a channel of changes, [Results.Updates], that the sync
// loop consumes.
package prober
