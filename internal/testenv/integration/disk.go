package integration

import "strings"

// HostDiskNeutral is the KubeletConfiguration (YAML lines) that keeps an
// agent's image GC and disk eviction off the machine's own disk, which holds
// a test's root directory: the defaults (image GC above 85 % used, eviction
// below 10-15 % available) act on a full enough disk, and then the images a
// test imported (which no registry serves) are collected and its pods stay
// in ImagePullBackOff; seen beside a conformance run that filled a loop file,
// and this machine's disk reads 82-84 % used on its own. A config that sets
// image GC or eviction thresholds itself (a test on a filesystem of its own)
// keeps its own: nothing is added for the keys it names.
func HostDiskNeutral(config string) string {
	var out string
	if !strings.Contains(config, "imageGC") {
		out += "imageGCHighThresholdPercent: 100\n"
	}
	if !strings.Contains(config, "evictionHard") {
		out += "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 1%\n  nodefs.inodesFree: 1%\n  imagefs.available: 1%\n"
	}
	return out
}
