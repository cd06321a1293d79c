package containerd

import "time"

// SetReapTiming shortens m's stuck runc init reaping for a test; call it
// before Run.
func SetReapTiming(m *Managed, interval, after time.Duration) {
	m.reapInterval, m.stuckAfter = interval, after
}
