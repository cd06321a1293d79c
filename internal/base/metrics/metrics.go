// Package metrics holds the one registration rule the subsystems share: a
// collector is registered on the Registerer the caller injects, and when an
// identical one is already there (two managers on one registry), that one is
// used, so their series add up instead of failing. [Registrar] applies it to
// the metric vectors a subsystem creates.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// registerCollector registers c on reg and returns it, or returns the collector of the
// same description already registered. A nil reg leaves c unregistered. Any
// other registration error is returned, prefixed with owner.
func registerCollector[C prometheus.Collector](reg prometheus.Registerer, owner string, c C) (C, error) {
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

// Registrar creates one subsystem's metric vectors and registers each by
// the package rule, keeping the first error for Err, so a constructor declares
// its metrics without an error check per metric. It is meant for one
// goroutine, the constructor's; the vectors it returns are safe for
// concurrent use.
type Registrar struct {
	reg   prometheus.Registerer
	owner string
	err   error
}

// NewRegistrar returns a Registrar for owner's metrics on reg; a nil reg
// registers nothing.
func NewRegistrar(reg prometheus.Registerer, owner string) *Registrar {
	return &Registrar{reg: reg, owner: owner}
}

// CounterVec returns a counter vector of opts partitioned by labels: the one
// registered, or an identical one already there. After an error the vector
// is usable but unregistered.
func (r *Registrar) CounterVec(opts prometheus.CounterOpts, labels ...string) *prometheus.CounterVec {
	return register(r, prometheus.NewCounterVec(opts, labels))
}

// HistogramVec is CounterVec for a histogram vector.
func (r *Registrar) HistogramVec(opts prometheus.HistogramOpts, labels ...string) *prometheus.HistogramVec {
	return register(r, prometheus.NewHistogramVec(opts, labels))
}

// Gauge is CounterVec for a single gauge.
func (r *Registrar) Gauge(opts prometheus.GaugeOpts) prometheus.Gauge {
	return register(r, prometheus.NewGauge(opts))
}

// GaugeVec is CounterVec for a gauge vector.
func (r *Registrar) GaugeVec(opts prometheus.GaugeOpts, labels ...string) *prometheus.GaugeVec {
	return register(r, prometheus.NewGaugeVec(opts, labels))
}

// Err returns the first registration error, or nil.
func (r *Registrar) Err() error { return r.err }

func register[C prometheus.Collector](r *Registrar, c C) C {
	c, err := registerCollector(r.reg, r.owner, c)
	if r.err == nil {
		r.err = err
	}
	return c
}
