// Package metrics holds the one registration rule the subsystems share: a
// collector is registered on the Registerer the caller injects, and when an
// identical one is already there (two managers on one registry), that one is
// used, so their series add up instead of failing.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or returns the collector of the
// same description already registered. A nil reg leaves c unregistered. Any
// other registration error is returned, prefixed with owner.
func Register[C prometheus.Collector](reg prometheus.Registerer, owner string, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("%s: register metrics: %w", owner, err)
	}
	return c, nil
}
