package containerd

import "time"

// SetReapTiming shortens m's stuck runc init reaping for a test; call it
// before Run.
func SetReapTiming(m *Managed, interval, after time.Duration) {
	m.reapInterval, m.stuckAfter = interval, after
}

// Restarts receives a value after containerd died, was restarted and its CRI
// API answers again. Values coalesce (the channel holds at most one), so a
// slow reader sees one value for several restarts; the first start is
// signalled by Ready, not here.
func (m *Managed) Restarts() <-chan struct{} { return m.restarts }

// Starts returns how many containerd processes Run has started (1 after the
// first start, +1 per restart).
func (m *Managed) Starts() int64 { return m.starts.Load() }

// PID returns the running containerd's process ID, or 0 when none runs.
func (m *Managed) PID() int { return int(m.pid.Load()) }
