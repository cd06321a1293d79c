package pressure

// Mechanisms lists the mechanisms in use, in the order they were set up.
func (n *Notifier) Mechanisms() []string { return append([]string(nil), n.mechs...) }
