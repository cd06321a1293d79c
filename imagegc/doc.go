// Package imagegc garbage-collects container images the way the kubelet does.
//
// The decisions are pure functions over data with the time passed in:
// Detect keeps the image records (first detected, last used, size, pinned),
// and Decide turns records, the set of images in use and the image
// filesystem's stats into a Plan: which images go, in which order and why, and
// which stay and why. The Manager runs them against a CRI runtime:
//
//   - every 5 minutes it detects images (the first pass records the images it
//     finds as detected at an unknown time in the past);
//   - every 30 seconds it refreshes the image-list cache;
//   - every 5 minutes it garbage-collects: unused images older than the maximum
//     age go regardless of usage, and when the image filesystem's usage is at or
//     above the high threshold, unused images are removed least recently used
//     first, then earliest detected, until usage is down to the low threshold.
//
// Images in use (by a container the runtime still has, running or exited, or the
// sandbox image) and images that
// the runtime reports as pinned are never removed; images used at or after the
// free time, or first detected less than the minimum age ago, are skipped.
// DeleteUnusedImages is the eviction manager's reclaim step: the same walk with
// no byte target, available even when periodic GC is disabled (high = 100).
//
// The runtime comes in through narrow interfaces whose method sets are subsets
// of k8s.io/cri-api's ImageManagerService and RuntimeService, so both
// internal/machine/cri's client and the cri-api fakes satisfy them.
package imagegc
