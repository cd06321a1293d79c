package devicemanager

import (
	"errors"
	"fmt"
)

// Error classes; check with errors.Is. Errors of a class do not repeat the
// class's text: their message is the kubelet's wording alone.
var (
	// ErrNotRunning: the operation needs Run to be active.
	ErrNotRunning = errors.New("device manager is not running")
	// ErrUnavailable: the devices a container needs cannot be given now
	// (resource unregistered, unhealthy or exhausted).
	ErrUnavailable = errors.New("devices unavailable")
	// ErrPlugin: a plugin RPC failed, timed out or answered nonsense.
	ErrPlugin = errors.New("device plugin error")
)

// classError carries a message and, apart from it, the class it belongs
// to: Error returns the message only, while errors.Is and errors.As see both
// the class and whatever the message wraps (a gRPC status, a context error).
type classError struct {
	class error // ErrUnavailable or ErrPlugin
	err   error // the message and its cause
}

func (e *classError) Error() string { return e.err.Error() }

// Unwrap gives the message's error first, then the class.
func (e *classError) Unwrap() []error { return []error{e.err, e.class} }

// classed formats the message like fmt.Errorf (%w keeps a cause) and
// attaches class to it without changing the text.
func classed(class error, format string, args ...any) error {
	return &classError{class: class, err: fmt.Errorf(format, args...)}
}
