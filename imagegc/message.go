package imagegc

import "fmt"

// FreeDiskSpaceFailedMessage is the message of the FreeDiskSpaceFailed event
// and of GarbageCollect's error when the space step frees less than it wants,
// in the kubelet's wording (kubelet 1.35 and later): usagePercent and capacity
// describe the image filesystem as GC measured it, freed is what the space step
// removed.
func FreeDiskSpaceFailedMessage(usagePercent int, capacity, freed int64) string {
	return fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
		"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
		"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
		usagePercent, eventSize(capacity), freed)
}

// eventSize renders a byte count as the kubelet's event does: below 1 KiB in
// whole bytes ("512 B"), otherwise with one decimal in the largest binary unit,
// KiB to TiB, that the count reaches ("26.4 GiB", "2048.0 TiB").
func eventSize(b int64) string {
	if b < 1024 {
		return fmt.Sprintf("%d B", b)
	}
	units := [...]string{"KiB", "MiB", "GiB", "TiB"}
	v, u := float64(b)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024 // exact: a power of two
		u++
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
