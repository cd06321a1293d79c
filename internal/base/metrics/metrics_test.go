package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterSharesAnIdenticalCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	newVec := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"})
	}
	a, err := registerCollector(reg, "test", newVec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := registerCollector(reg, "test", newVec())
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("second registration did not return the first collector")
	}
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "different help"}, []string{"l"})
	if _, err := registerCollector(reg, "test", other); err == nil {
		t.Error("a conflicting collector registered")
	}
	if c, err := registerCollector(nil, "test", newVec()); err != nil || c == nil {
		t.Errorf("nil registerer: %v, %v", c, err)
	}
}

func TestRegistrarKeepsFirstError(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	r := NewRegistrar(reg, "a")
	c := r.CounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, "l")
	h := r.HistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, "l")
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	// A second subsystem instance on the same registry shares the vectors.
	r2 := NewRegistrar(reg, "a")
	if r2.CounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, "l") != c ||
		r2.HistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, "l") != h || r2.Err() != nil {
		t.Errorf("identical vectors not shared: %v", r2.Err())
	}
	// Conflicts: the first error is kept, later vectors still come back.
	r3 := NewRegistrar(reg, "owner3")
	r3.CounterVec(prometheus.CounterOpts{Name: "c_total", Help: "other help"}, "l")
	first := r3.Err()
	if first == nil || !strings.HasPrefix(first.Error(), "owner3: register metrics: ") {
		t.Fatalf("conflict error = %v", first)
	}
	if v := r3.HistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "other"}, "l"); v == nil || r3.Err() != first {
		t.Errorf("second conflict: vector %v, error %v, want the first error kept", v, r3.Err())
	}
	if v := NewRegistrar(nil, "x").CounterVec(prometheus.CounterOpts{Name: "n_total", Help: "n"}); v == nil {
		t.Error("nil registerer: no vector")
	}
}
