package e2e

// PID returns the process id of the agent's current run, or 0 when it is not
// running.
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}
