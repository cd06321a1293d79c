// Package containerdtest starts a private containerd for tests and builds and
// imports small OCI images, so CRI integration tests run with no registry.
//
// Start runs containerd through internal/machine/containerd's Managed (the same
// config writer and supervisor as the agent's), with its state directory a
// short temporary directory (unix socket paths must stay under 108 bytes),
// the native snapshotter, a sandbox (pause) image built by the test, and a
// CNI bridge network of its own (a unique bridge name and /24, so pods
// without host network get an IP; RunPod's pods use the host's) and, where
// this process may not lower its oom_score_adj, restrict_oom_score_adj = true.
// containerd dies with the test process (containerd.Config.DieWithParent), so
// a test binary killed on a timeout leaves none behind.
// Cleanup, registered with t.Cleanup, removes the pods, stops containerd and
// calls RemoveState: it kills the shims it left (by PID, only those serving
// this containerd), deletes the bridge, unmounts what is left under the
// directory and removes it.
//
// Start runs the containerd, ctr and shim found in PATH (Debian's 1.6.20 on our
// machines). StartWith(t, Options{BinDir: dir}) runs those in dir instead;
// BuildContainerd builds containerd 1.7, which reports CRI pinned images, from
// the separate module hack/containerd into a cached dir, and Pin labels an
// image pinned and waits for the CRI API to report it.
//
// Without root or without the containerd, ctr and runc binaries, Start skips
// the test, unless CI=true, where it fails it: CI must run these tests. The
// same holds for BuildContainerd, and a failed build always fails the test.
package containerdtest
